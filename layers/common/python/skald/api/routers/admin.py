"""/api/v1/admin: accounts, users, roles, key regeneration and usage per account."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from skald.api import results as r
from skald.api.deps import AnyIdentity, ContainerDep
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, errors

router = APIRouter(prefix="/api/v1/admin")


class CreateAccountBody(BaseModel):
    account_id: str
    admin_user_id: str
    seed: str | None = None
    user_config: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None


class RegisterUserBody(BaseModel):
    user_id: str
    role: str = "user"
    seed: str | None = None
    user_config: dict[str, Any] | None = None


class RoleBody(BaseModel):
    role: str


@router.post("/accounts", response_model=Ok[r.AccountKey], responses=errors(409))
def create_account(body: CreateAccountBody, identity: AnyIdentity,
                   c: ContainerDep) -> Envelope:
    return ok(c.accounts.create_account(identity, body.account_id, body.admin_user_id))


@router.get("/accounts", response_model=Ok[list[r.Account]])
def list_accounts(identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.accounts.list_accounts(identity))


@router.get("/accounts/{account_id}", response_model=Ok[r.Account], responses=errors(404))
def get_account(account_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.accounts.get_account(identity, account_id))


@router.get("/accounts/{account_id}/usage", response_model=Ok[r.Usage], responses=errors(404))
def account_usage(account_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.accounts.usage(identity, account_id))


@router.delete("/accounts/{account_id}", response_model=Ok[r.Deleted], responses=errors(404))
def delete_account(account_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.accounts.delete_account(identity, account_id))


@router.post("/accounts/{account_id}/users", response_model=Ok[r.UserKey],
             responses=errors(404, 409))
def register_user(account_id: str, body: RegisterUserBody, identity: AnyIdentity,
                  c: ContainerDep) -> Envelope:
    return ok(c.accounts.register_user(identity, account_id, body.user_id, body.role))


@router.get("/accounts/{account_id}/users", response_model=Ok[list[r.User]],
            responses=errors(404))
def list_users(account_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.accounts.list_users(identity, account_id))


@router.get("/accounts/{account_id}/users/{user_id}", response_model=Ok[r.User],
            responses=errors(404))
def get_user(account_id: str, user_id: str, identity: AnyIdentity,
             c: ContainerDep) -> Envelope:
    return ok(c.accounts.get_user(identity, account_id, user_id))


@router.delete("/accounts/{account_id}/users/{user_id}", response_model=Ok[r.Deleted],
               responses=errors(404))
def remove_user(account_id: str, user_id: str, identity: AnyIdentity,
                c: ContainerDep) -> Envelope:
    return ok(c.accounts.remove_user(identity, account_id, user_id))


@router.put("/accounts/{account_id}/users/{user_id}/role", response_model=Ok[r.User],
            responses=errors(404))
def set_role(account_id: str, user_id: str, body: RoleBody, identity: AnyIdentity,
             c: ContainerDep) -> Envelope:
    return ok(c.accounts.set_role(identity, account_id, user_id, body.role))


@router.post("/accounts/{account_id}/users/{user_id}/key", response_model=Ok[r.UserKey],
             responses=errors(404))
def regenerate_key(account_id: str, user_id: str, identity: AnyIdentity,
                   c: ContainerDep) -> Envelope:
    return ok(c.accounts.regenerate_key(identity, account_id, user_id))
