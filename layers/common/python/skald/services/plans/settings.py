"""An account's settings route (OpenViking's shape): its effective plan and what is stored for
it, read by root or the account's admins, changed by root only.

A change is stored with the account (AccountStore.update_account_settings), recorded in the
audit trail (`account.settings`, the patch as its detail) and applies at once in this process
(the plan book and the counts forget the account); other processes read it within their
plan cache's bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from skald.domain.access.identity import ROOT_ACCOUNT, Identity
from skald.domain.errors import Conflict, NotFound, PermissionDenied
from skald.domain.plans import resolve
from skald.domain.plans.settings import apply_patch, check_patch, effective, overrides
from skald.ports import AccountStore, StateNotFound
from skald.ports.accounts import ACTIVE, Account
from skald.services.audit import AuditTrail, audited


@dataclass(frozen=True, slots=True)
class AccountSettingsView:
    """`settings`: the effective plan ({plan, limits: every limit, null = unlimited});
    `overrides`: what is stored for the account itself ({plan?, limits?})."""

    account_id: str
    settings: dict[str, Any]
    overrides: dict[str, Any]


def _is_root(identity: Identity) -> bool:
    return identity.role == "root" and (identity.dev_mode or identity.account_id == ROOT_ACCOUNT)


class AccountSettings:
    def __init__(
        self,
        accounts: AccountStore,
        *,
        default_tier: str,
        audit: AuditTrail | None = None,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        self.accounts = accounts
        self.default_tier = default_tier
        self.audit = audit
        self.on_change = on_change

    def _account(self, identity: Identity, account_id: str) -> Account:
        if not (
            _is_root(identity) or (identity.role == "admin" and identity.account_id == account_id)
        ):
            raise PermissionDenied(f"Not an administrator of account '{account_id}'")
        account = self.accounts.get_account(account_id)
        if account is None:
            raise NotFound(f"Account {account_id} not found", account_id, "account")
        return account

    def view(self, account: Account) -> AccountSettingsView:
        plan = resolve(account.settings, self.default_tier)
        return AccountSettingsView(account.account_id, effective(plan), overrides(account.settings))

    def get(self, identity: Identity, account_id: str) -> AccountSettingsView:
        return self.view(self._account(identity, account_id))

    def patch(
        self, identity: Identity, account_id: str, patch: Mapping[str, Any]
    ) -> AccountSettingsView:
        with audited(
            self.audit,
            identity,
            "account.settings",
            account_id,
            account_id=account_id,
            detail={"patch": dict(patch)},
        ):
            account = self._account(identity, account_id)
            check_patch(patch)  # an unsupported key is a bad request, whoever sends it
            if not _is_root(identity):
                raise PermissionDenied(
                    "Only the root key can change an account's plan and limits",
                    {"account_id": account_id},
                )
            if account.status != ACTIVE:
                raise Conflict(f"Account {account_id} is being deleted", {"account_id": account_id})
            settings = apply_patch(account.settings, patch, self.default_tier)
            try:
                updated = self.accounts.update_account_settings(account_id, settings)
            except StateNotFound:
                raise Conflict(
                    f"Account {account_id} is being deleted", {"account_id": account_id}
                ) from None
            if self.on_change is not None:
                self.on_change(account_id)
            return self.view(updated)
