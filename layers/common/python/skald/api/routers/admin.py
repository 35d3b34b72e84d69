"""/api/v1/admin: accounts, users, roles, API keys, settings (plans) and usage per account.

OpenViking's routes keep their shapes; removing a user or an account answers 202 with the
purge's task. The key routes (`.../users/{user_id}/keys`) are Skald's: several named keys per
user, for rotation without a gap.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Response
from pydantic import BaseModel, Field

from skald.api.deps import AnyIdentity, ContainerDep
from skald.api.envelope import Envelope, accepted, ok
from skald.api.openapi import Ok, errors
from skald.compose.composition import Composition
from skald.domain.access import call_context
from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidArgument
from skald.services.plans import AccountSettingsView
from skald.services.tenancy.results import (
    AccountCreated,
    AccountRemoval,
    AccountView,
    ApiKeyView,
    KeyRevoked,
    NewApiKey,
    RoleSet,
    Usage,
    UserKey,
    UserRegistered,
    UserRemoval,
    UserView,
)


async def _managed(account_id: str) -> None:
    """The request touches the account it manages, and no other."""
    call_context.tenant.set(account_id)


router = APIRouter(prefix="/api/v1/admin")
_FROM = "start of the window: a date, an ISO-8601 time or a duration back (7d); default 30 days"
_TO = "end of the window: a date (its whole day), an ISO-8601 time; default now"
_CSV: dict[int | str, dict[str, Any]] = {200: {"content": {"text/csv": {}}}}
Managed = Depends(_managed)


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


class CreateKeyBody(BaseModel):
    model_config = {"extra": "forbid"}

    name: str = Field(description="What the key is for, unique per user ('ci', 'laptop')")
    expires_in_s: float | None = Field(
        default=None,
        description="Seconds until the key stops working (60 s to 10 years); "
        "none: it works until revoked",
    )


@router.post("/accounts", response_model=Ok[AccountCreated], responses=errors(409))
def create_account(body: CreateAccountBody, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(
        c.accounts.create_account(identity, body.account_id, body.admin_user_id, body.settings)
    )


@router.get("/accounts", response_model=Ok[list[AccountView]])
def list_accounts(identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.accounts.list_accounts(identity), kind=list[AccountView])


@router.get(
    "/accounts/{account_id}",
    response_model=Ok[AccountView],
    responses=errors(404),
    dependencies=[Managed],
)
def get_account(account_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.accounts.get_account(identity, account_id))


@router.get(
    "/accounts/{account_id}/settings",
    response_model=Ok[AccountSettingsView],
    responses=errors(403, 404),
    dependencies=[Managed],
)
def get_account_settings(account_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.account_settings.get(identity, account_id))


@router.patch(
    "/accounts/{account_id}/settings",
    response_model=Ok[AccountSettingsView],
    responses=errors(400, 403, 404, 409),
    dependencies=[Managed],
)
def patch_account_settings(
    account_id: str,
    identity: AnyIdentity,
    c: ContainerDep,
    body: dict[str, Any] = Body(  # noqa: B008
        ...,
        description='{"plan": tier | null, "limits": {limit: number | null | "default"}}',
    ),
) -> Envelope:
    return ok(c.account_settings.patch(identity, account_id, body))


@router.get(
    "/accounts/{account_id}/usage",
    response_model=Ok[Usage],
    responses={**errors(400, 404), **_CSV},
    dependencies=[Managed],
)
def account_usage(
    account_id: str,
    identity: AnyIdentity,
    c: ContainerDep,
    from_: Annotated[str | None, Query(alias="from", description=_FROM)] = None,
    to: Annotated[str | None, Query(description=_TO)] = None,
    granularity: Annotated[str | None, Query(description="hour | day | month")] = None,
    user_id: Annotated[str | None, Query(description="one user's usage only")] = None,
    format: Annotated[str | None, Query(description="csv: the billing export")] = None,  # noqa: A002
) -> Envelope | Response:
    """What the account holds; with `from`, `to`, `granularity` or `user_id`, also its
    metered series (`series`); with `format=csv`, the series as CSV for billing."""
    asked = (from_, to, granularity, user_id, format)
    if all(v is None for v in asked):
        return ok(c.accounts.usage(identity, account_id))
    if format not in (None, "json", "csv"):
        raise InvalidArgument("format must be json or csv")
    if format == "csv":
        return _usage_csv(account_id, identity, c, from_, to, granularity, user_id)
    usage = c.accounts.usage(identity, account_id)
    series = c.metering.series(
        account_id, from_=from_, to=to, granularity=granularity, user_id=user_id
    )
    return ok(replace(usage, series=series))


@router.get(
    "/accounts/{account_id}/usage.csv",
    response_class=Response,
    responses={**errors(400, 404), **_CSV},
    dependencies=[Managed],
)
def account_usage_csv(
    account_id: str,
    identity: AnyIdentity,
    c: ContainerDep,
    from_: Annotated[str | None, Query(alias="from", description=_FROM)] = None,
    to: Annotated[str | None, Query(description=_TO)] = None,
    granularity: Annotated[str | None, Query(description="hour | day | month")] = None,
    user_id: Annotated[str | None, Query(description="one user's usage only")] = None,
) -> Response:
    """The metered series as CSV, one row per period x user x unit x dims (docs/api.md)."""
    return _usage_csv(account_id, identity, c, from_, to, granularity, user_id)


def _usage_csv(
    account_id: str,
    identity: Identity,
    c: Composition,
    from_: str | None,
    to: str | None,
    granularity: str | None,
    user_id: str | None,
) -> Response:
    c.accounts.get_account(identity, account_id)  # root or the account's admin; it exists
    series = c.metering.series(
        account_id, from_=from_, to=to, granularity=granularity, user_id=user_id
    )
    name = f"usage-{account_id}-{series.start[:10]}-{series.end[:10]}.csv"
    return Response(
        c.metering.csv(series),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.delete(
    "/accounts/{account_id}",
    status_code=202,
    response_model=Ok[AccountRemoval],
    responses=errors(404),
    dependencies=[Managed],
)
def delete_account(account_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return accepted(c.accounts.delete_account(identity, account_id))


@router.post(
    "/accounts/{account_id}/users",
    response_model=Ok[UserRegistered],
    responses=errors(404, 409),
    dependencies=[Managed],
)
def register_user(
    account_id: str, body: RegisterUserBody, identity: AnyIdentity, c: ContainerDep
) -> Envelope:
    return ok(c.accounts.register_user(identity, account_id, body.user_id, body.role))


@router.get(
    "/accounts/{account_id}/users",
    response_model=Ok[list[UserView]],
    responses=errors(404),
    dependencies=[Managed],
)
def list_users(account_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.accounts.list_users(identity, account_id), kind=list[UserView])


@router.get(
    "/accounts/{account_id}/users/{user_id}",
    response_model=Ok[UserView],
    responses=errors(404),
    dependencies=[Managed],
)
def get_user(account_id: str, user_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.accounts.get_user(identity, account_id, user_id))


@router.delete(
    "/accounts/{account_id}/users/{user_id}",
    status_code=202,
    response_model=Ok[UserRemoval],
    responses=errors(404),
    dependencies=[Managed],
)
def remove_user(account_id: str, user_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return accepted(c.accounts.remove_user(identity, account_id, user_id))


@router.put(
    "/accounts/{account_id}/users/{user_id}/role",
    response_model=Ok[RoleSet],
    responses=errors(400, 404),
    dependencies=[Managed],
)
def set_role(
    account_id: str, user_id: str, body: RoleBody, identity: AnyIdentity, c: ContainerDep
) -> Envelope:
    return ok(c.accounts.set_role(identity, account_id, user_id, body.role))


@router.post(
    "/accounts/{account_id}/users/{user_id}/key",
    response_model=Ok[UserKey],
    responses=errors(404),
    dependencies=[Managed],
)
def regenerate_key(
    account_id: str, user_id: str, identity: AnyIdentity, c: ContainerDep
) -> Envelope:
    return ok(c.accounts.regenerate_key(identity, account_id, user_id))


@router.get(
    "/accounts/{account_id}/users/{user_id}/keys",
    response_model=Ok[list[ApiKeyView]],
    responses=errors(404),
    dependencies=[Managed],
)
def list_keys(account_id: str, user_id: str, identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.accounts.list_keys(identity, account_id, user_id), kind=list[ApiKeyView])


@router.post(
    "/accounts/{account_id}/users/{user_id}/keys",
    response_model=Ok[NewApiKey],
    responses=errors(404, 409, 412),
    dependencies=[Managed],
)
def create_key(
    account_id: str, user_id: str, body: CreateKeyBody, identity: AnyIdentity, c: ContainerDep
) -> Envelope:
    return ok(c.accounts.create_key(identity, account_id, user_id, body.name, body.expires_in_s))


@router.delete(
    "/accounts/{account_id}/users/{user_id}/keys/{key_id}",
    response_model=Ok[KeyRevoked],
    responses=errors(404),
    dependencies=[Managed],
)
def revoke_key(
    account_id: str, user_id: str, key_id: str, identity: AnyIdentity, c: ContainerDep
) -> Envelope:
    return ok(c.accounts.revoke_key(identity, account_id, user_id, key_id))
