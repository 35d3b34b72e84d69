"""Accounts, users, roles and API keys; resolving a request's credentials to an Identity.

Who may do what (OpenViking's rules): the root key manages accounts; the root key and an
account's admins manage its users; a role change only promotes to admin. Keys: several per
user (services/tenancy/keys.py), managed by root, the account's admins or the user themself.
Removing a user or an account tombstones it and queues its purge (services/tenancy/deletion.py).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from skald.domain.access.identity import ROLES, ROOT_ACCOUNT, Identity, parse_actor_peer
from skald.domain.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    SkaldError,
    Unauthenticated,
    Unavailable,
)
from skald.domain.paths.uri import validate_identifier
from skald.domain.plans.settings import check_initial
from skald.domain.timefmt import iso_utc
from skald.ports import (
    Account,
    IndexFilter,
    SearchIndex,
    SessionStore,
    StateConflict,
    StateNotFound,
    StateStore,
    User,
)
from skald.ports.accounts import ACTIVE, DEFAULT_KEY_NAME, Deletion
from skald.services.audit import AuditTrail, audited
from skald.services.tenancy.keys import ApiKeys, hash_key, mint_key, principal
from skald.services.tenancy.results import (
    AccountCreated,
    AccountRemoval,
    AccountView,
    ApiKeyView,
    KeyRevoked,
    NewApiKey,
    RoleSet,
    Usage,
    UsageRecords,
    UsageSessions,
    UsageUsers,
    UserKey,
    UserRegistered,
    UserRemoval,
    UserView,
)
from skald.services.tenancy.root_key import RootKey

DEFAULT_ACCOUNT = "default"
DEFAULT_USER = "default"
ROOT_KEY_ID = "root"

__all__ = [
    "DEFAULT_ACCOUNT",
    "DEFAULT_USER",
    "ROOT_ACCOUNT",
    "AccountService",
    "Credentials",
    "hash_key",
    "mint_key",
]


@dataclass(frozen=True)
class Credentials:
    api_key: str | None
    account_header: str | None
    user_header: str | None
    actor_peer_header: str | None


class Deletions(Protocol):
    """What AccountService asks of the deletion service (built on first use)."""

    def begin_user(self, actor: Identity, account_id: str, user_id: str) -> UserRemoval: ...

    def begin_account(self, actor: Identity, account_id: str) -> AccountRemoval: ...


class EdgeSync(Protocol):
    """What AccountService asks of the edge keys (services/plans/edge.py)."""

    default_tier: str

    def sync(self, account_id: str, tier: str | None = None) -> str | None: ...


class AccountService:
    def __init__(
        self,
        state: StateStore,
        root: RootKey | str | None,
        *,
        deletions: Callable[[], Deletions] | None = None,
        clock: Callable[[], float] = time.time,
        index: SearchIndex | None = None,
        sessions: SessionStore | None = None,
        audit: AuditTrail | None = None,
        edge: Callable[[], EdgeSync] | None = None,
    ) -> None:
        self.state = state
        # A new account's API Gateway key goes in its tier's usage plan (AWS).
        self._edge = edge
        # Every admin and key action is recorded before it runs, refused attempts included.
        self.audit = audit
        # Read only by `usage`: an entry point without them reports what it has.
        self.index = index
        self.sessions = sessions
        self.root = RootKey.fixed(root) if isinstance(root, str) else root
        self._deletions = deletions
        self.clock = clock
        self.keys = ApiKeys(state, clock)

    @property
    def auth_mode(self) -> str:
        return "api_key" if self.root is not None else "dev"

    # ---------------------------------------------------------------- identity

    def resolve_in_memory(self, creds: Credentials) -> Identity | None:
        """The identity when no key lookup is needed (dev mode, the root key); None when
        `resolve` has to look the key up in the state store. Raises like `resolve`."""
        peer = parse_actor_peer(creds.actor_peer_header)
        if self.root is None:
            account = creds.account_header or DEFAULT_ACCOUNT
            user = creds.user_header or DEFAULT_USER
            validate_identifier(account, "account id", account=True)
            validate_identifier(user, "user id")
            return Identity(account, user, "root", peer, dev_mode=True)
        if not creds.api_key:
            raise Unauthenticated("Missing API Key when resolving identity.")
        if self.root.matches(creds.api_key):
            return self._root_identity(peer)
        return None

    @staticmethod
    def _root_identity(peer: str | None) -> Identity:
        return Identity(ROOT_ACCOUNT, "root", "root", peer, key_id=ROOT_KEY_ID)

    def resolve(self, creds: Credentials) -> Identity:
        identity = self.resolve_in_memory(creds)
        if identity is not None:
            return identity
        assert creds.api_key and self.root is not None  # resolve_in_memory saw to both
        peer = parse_actor_peer(creds.actor_peer_header)
        found = self.state.resolve_key(hash_key(creds.api_key))
        if found is None:
            if self.root.matches_after_refresh(creds.api_key):  # a root key set meanwhile
                return self._root_identity(peer)
            raise Unauthenticated("Invalid API key")
        if not found.active:  # a tombstoned user or account: as if the key never existed
            raise Unauthenticated("Invalid API key")
        now = self.clock()
        if found.key.expires_at is not None and found.key.expires_at <= now:
            raise Unauthenticated(
                f"API key {found.key.key_id} expired at {iso_utc(found.key.expires_at)}"
            )
        self.keys.touch(found.key, now)
        user = found.user
        return Identity(
            user.account_id,
            user.user_id,
            user.role,
            peer,
            key_id=found.key.key_id,
            generation=user.generation,
        )

    # ---------------------------------------------------------------- who may

    @staticmethod
    def _require_root(identity: Identity) -> None:
        if identity.role != "root":
            raise PermissionDenied("Only the root key can manage accounts")

    @staticmethod
    def _require_admin_of(identity: Identity, account_id: str) -> None:
        if identity.role == "root" and (identity.dev_mode or identity.account_id == ROOT_ACCOUNT):
            return
        if identity.role == "admin" and identity.account_id == account_id:
            return
        raise PermissionDenied(f"Not an administrator of account '{account_id}'")

    def _require_keys_of(self, identity: Identity, account_id: str, user_id: str) -> None:
        """A user's keys: root, the account's admins, or the user themself."""
        if (
            identity.account_id == account_id
            and identity.user_id == user_id
            and identity.role in ("admin", "user")
        ):
            return
        self._require_admin_of(identity, account_id)

    def _account(self, account_id: str) -> Account:
        account = self.state.get_account(account_id)
        if account is None:
            raise NotFound(f"Account {account_id} not found", account_id, "account")
        return account

    def _active_account(self, account_id: str) -> Account:
        account = self._account(account_id)
        if account.status != ACTIVE:
            raise Conflict(
                f"Account {account_id} is being deleted",
                {"account_id": account_id, **_deleting(account.deletion)},
            )
        return account

    def _user(self, account_id: str, user_id: str) -> User:
        user = self.state.get_user(account_id, user_id)
        if user is None:
            raise NotFound(f"User {user_id} not found in {account_id}", user_id, "user")
        return user

    def _active_user(self, account_id: str, user_id: str) -> User:
        user = self._user(account_id, user_id)
        if user.status != ACTIVE:
            raise Conflict(
                f"User {user_id} of {account_id} is being deleted",
                {"user_id": user_id, **_deleting(user.deletion)},
            )
        return user

    @staticmethod
    def _check_role(role: str) -> str:
        if role not in ROLES or role == "root":
            raise InvalidArgument(f"Invalid role '{role}': admin or user")
        return role

    def deletions(self) -> Deletions:
        if self._deletions is None:
            raise RuntimeError("this entry point does not remove users or accounts")
        return self._deletions()

    # ---------------------------------------------------------------- accounts

    def create_account(
        self,
        identity: Identity,
        account_id: str,
        admin_user_id: str,
        settings: dict[str, Any] | None = None,
    ) -> AccountCreated:
        """`settings`: the account's own; a plan and limits there must be valid."""
        validate_identifier(account_id, "account id", account=True)
        validate_identifier(admin_user_id, "user id")
        with audited(
            self.audit,
            identity,
            "account.create",
            account_id,
            account_id=account_id,
            detail={"admin_user_id": admin_user_id},
        ) as note:
            self._require_root(identity)
            initial = check_initial(settings, "unlimited")
            result, note.detail["key_id"] = self._create_account(
                identity, account_id, admin_user_id, initial
            )
            return result

    def _create_account(
        self, identity: Identity, account_id: str, admin_user_id: str, settings: dict[str, Any]
    ) -> tuple[AccountCreated, str]:
        """The account and its admin's key; the key's id (for the audit record)."""
        self._edge_key(account_id)
        now = self.clock()
        try:
            self.state.create_account(Account(account_id, now, settings))
        except StateConflict:
            existing = self.state.get_account(account_id)
            if existing is not None and existing.status != ACTIVE:
                raise Conflict(
                    f"Account {account_id} is being deleted: create it again once "
                    "its purge has finished",
                    {"account_id": account_id, **_deleting(existing.deletion)},
                ) from None
            raise AlreadyExists(
                f"Account {account_id} already exists", {"account_id": account_id}
            ) from None
        raw, key = self.keys.new(account_id, admin_user_id, DEFAULT_KEY_NAME, principal(identity))
        self.state.create_user(User(account_id, admin_user_id, "admin", now, uuid.uuid4().hex), key)
        return AccountCreated(account_id, admin_user_id, raw), key.key_id

    def _edge_key(self, account_id: str) -> None:
        """A new account's key in its usage plan before the account exists: a failure
        leaves nothing written (an existing id is refused next, without touching its key)."""
        if self._edge is None or self.state.get_account(account_id) is not None:
            return
        edge = self._edge()
        try:
            edge.sync(account_id, edge.default_tier)  # a new account's settings name no plan
        except SkaldError:
            raise
        except Exception as exc:
            raise Unavailable(
                f"Account {account_id} was not created: its edge key could not be set up "
                "(try again)",
                {"account_id": account_id},
            ) from exc

    def list_accounts(self, identity: Identity) -> list[AccountView]:
        self._require_root(identity)
        return [self._account_view(a) for a in self.state.list_accounts()]

    def get_account(self, identity: Identity, account_id: str) -> AccountView:
        self._require_admin_of(identity, account_id)
        return self._account_view(self._account(account_id))

    def _account_view(self, account: Account) -> AccountView:
        users = self.state.list_users(account.account_id)
        return AccountView(
            account.account_id,
            account.created_at,
            len(users),
            account.settings,
            account.status,
            **_deleting(account.deletion),
        )

    def delete_account(self, identity: Identity, account_id: str) -> AccountRemoval:
        with audited(
            self.audit, identity, "account.delete", account_id, account_id=account_id
        ) as note:
            self._require_root(identity)
            result = self.deletions().begin_account(identity, account_id)
            note.detail["task_id"] = result.task_id
            return result

    # ---------------------------------------------------------------- users

    def register_user(
        self, identity: Identity, account_id: str, user_id: str, role: str
    ) -> UserRegistered:
        validate_identifier(user_id, "user id")
        with audited(
            self.audit,
            identity,
            "user.register",
            user_id,
            account_id=account_id,
            detail={"role": role},
        ) as note:
            self._require_admin_of(identity, account_id)
            result, note.detail["key_id"] = self._register_user(identity, account_id, user_id, role)
            return result

    def _register_user(
        self, identity: Identity, account_id: str, user_id: str, role: str
    ) -> tuple[UserRegistered, str]:
        """The user and their key; the key's id (for the audit record)."""
        self._check_role(role)
        self._active_account(account_id)
        existing = self.state.get_user(account_id, user_id)
        if existing is not None and existing.status != ACTIVE:
            raise Conflict(
                f"User {user_id} of {account_id} is being deleted: register the id "
                "again once its purge has finished",
                {"user_id": user_id, **_deleting(existing.deletion)},
            )
        raw, key = self.keys.new(account_id, user_id, DEFAULT_KEY_NAME, principal(identity))
        try:
            self.state.create_user(
                User(account_id, user_id, role, self.clock(), uuid.uuid4().hex), key
            )
        except StateNotFound:
            raise Conflict(
                f"Account {account_id} is being deleted", {"account_id": account_id}
            ) from None
        except StateConflict:
            raise AlreadyExists(
                f"User {user_id} already exists in {account_id}", {"user_id": user_id}
            ) from None
        return UserRegistered(account_id, user_id, role, raw), key.key_id

    def list_users(self, identity: Identity, account_id: str) -> list[UserView]:
        self._require_admin_of(identity, account_id)
        self._account(account_id)
        holders = {k.user_id for k in self.state.list_keys(account_id)}
        return [self._user_view(u, u.user_id in holders) for u in self.state.list_users(account_id)]

    def get_user(self, identity: Identity, account_id: str, user_id: str) -> UserView:
        self._require_admin_of(identity, account_id)
        user = self._user(account_id, user_id)
        return self._user_view(user, bool(self.state.list_keys(account_id, user_id)))

    @staticmethod
    def _user_view(user: User, has_key: bool) -> UserView:
        return UserView(
            user.account_id,
            user.user_id,
            user.role,
            user.created_at,
            has_key,
            user.status,
            **_deleting(user.deletion),
        )

    def remove_user(self, identity: Identity, account_id: str, user_id: str) -> UserRemoval:
        with audited(self.audit, identity, "user.remove", user_id, account_id=account_id) as note:
            self._require_admin_of(identity, account_id)
            result = self.deletions().begin_user(identity, account_id, user_id)
            note.detail["task_id"] = result.task_id
            return result

    def set_role(self, identity: Identity, account_id: str, user_id: str, role: str) -> RoleSet:
        """OpenViking's rule: the route only promotes to admin."""
        with audited(
            self.audit, identity, "user.role", user_id, account_id=account_id, detail={"role": role}
        ):
            return self._set_role(identity, account_id, user_id, role)

    def _set_role(self, identity: Identity, account_id: str, user_id: str, role: str) -> RoleSet:
        self._require_admin_of(identity, account_id)
        if role != "admin":
            raise InvalidArgument("set_user_role only supports promotion to admin.", {"role": role})
        self._active_user(account_id, user_id)
        try:
            self.state.set_user_role(account_id, user_id, role)
        except StateNotFound:
            raise NotFound(f"User {user_id} not found in {account_id}", user_id, "user") from None
        return RoleSet(account_id, user_id, role)

    # ---------------------------------------------------------------- keys

    def regenerate_key(self, identity: Identity, account_id: str, user_id: str) -> UserKey:
        """OpenViking's route: the user's default key is replaced; the old one stops working
        on the next request. Named keys are left alone."""
        with audited(
            self.audit,
            identity,
            "key.regenerate",
            user_id,
            account_id=account_id,
            detail={"user_id": user_id},
        ) as note:
            self._require_admin_of(identity, account_id)
            self._active_user(account_id, user_id)
            raw = self.keys.regenerate(identity, account_id, user_id)
            note.detail["key_id"] = hash_key(raw)[:16]
            return UserKey(account_id, user_id, raw)

    def list_keys(self, identity: Identity, account_id: str, user_id: str) -> list[ApiKeyView]:
        self._require_keys_of(identity, account_id, user_id)
        self._user(account_id, user_id)
        return self.keys.list(account_id, user_id)

    def create_key(
        self,
        identity: Identity,
        account_id: str,
        user_id: str,
        name: str,
        expires_in_s: float | None,
    ) -> NewApiKey:
        with audited(
            self.audit,
            identity,
            "key.create",
            user_id,
            account_id=account_id,
            detail={"user_id": user_id, "name": name},
        ) as note:
            self._require_keys_of(identity, account_id, user_id)
            self._active_user(account_id, user_id)
            made = self.keys.create(identity, account_id, user_id, name, expires_in_s)
            note.detail["key_id"] = made.key_id
            return made

    def revoke_key(
        self, identity: Identity, account_id: str, user_id: str, key_id: str
    ) -> KeyRevoked:
        with audited(
            self.audit,
            identity,
            "key.revoke",
            key_id,
            account_id=account_id,
            detail={"user_id": user_id, "key_id": key_id},
        ):
            self._require_keys_of(identity, account_id, user_id)
            return self.keys.revoke(account_id, user_id, key_id)

    # ---------------------------------------------------------------- usage

    def usage(self, identity: Identity, account_id: str) -> Usage:
        """What an account holds: users by role, sessions and their messages, index records
        by context type. Counts come from the stores' own indexes, not from walking files."""
        self._require_admin_of(identity, account_id)
        self._account(account_id)
        users = self.state.list_users(account_id)
        out = Usage(
            account_id,
            UsageUsers(
                len(users),
                sum(1 for u in users if u.role == "admin"),
                sum(1 for u in users if u.role == "user"),
            ),
        )
        if self.sessions is not None:
            records = [s for u in users for s in self.sessions.list_sessions(account_id, u.user_id)]
            out = replace(
                out,
                sessions=UsageSessions(
                    len(records),
                    sum(s.last_seq for s in records),
                    sum(s.commit_count for s in records),
                ),
            )
        if self.index is not None:
            by_type = {
                t: self.index.count(account_id, IndexFilter(context_types=[t]))
                for t in ("resource", "memory", "skill")
            }
            out = replace(out, records=UsageRecords(self.index.count(account_id), **by_type))
        return out


def _deleting(deletion: Deletion | None) -> dict[str, str]:
    """The purge under way, as views and errors show it."""
    if deletion is None:
        return {}
    return {
        "deletion_task_id": deletion.task_id,
        "deletion_requested_at": iso_utc(deletion.requested_at),
    }
