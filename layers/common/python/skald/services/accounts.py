"""Accounts, users, roles and API keys; resolving a request's credentials to an Identity.

Keys are shown once and stored only as sha256 hashes. A user key looks like
`base64url(account).base64url(user).<64 hex>`, as OpenViking's do.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skald.domain.errors import (
    AlreadyExists,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from skald.domain.identity import ROLES, Identity, parse_actor_peer
from skald.domain.uri import validate_identifier
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

DEFAULT_ACCOUNT = "default"
DEFAULT_USER = "default"
ROOT_ACCOUNT = "_root"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def mint_key(account_id: str, user_id: str) -> str:
    def b64(value: str) -> str:
        return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")

    return f"{b64(account_id)}.{b64(user_id)}.{secrets.token_hex(32)}"


@dataclass(frozen=True)
class Credentials:
    api_key: str | None
    account_header: str | None
    user_header: str | None
    actor_peer_header: str | None


class AccountService:
    def __init__(
        self,
        state: StateStore,
        root_api_key: str | None,
        *,
        on_account_deleted: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
        index: SearchIndex | None = None,
        sessions: SessionStore | None = None,
    ) -> None:
        self.state = state
        # Read only by `usage`: an entry point without them reports what it has.
        self.index = index
        self.sessions = sessions
        self._root_hash = hash_key(root_api_key) if root_api_key else None
        self.on_account_deleted = on_account_deleted
        self.clock = clock

    @property
    def auth_mode(self) -> str:
        return "api_key" if self._root_hash else "dev"

    # ---------------------------------------------------------------- identity

    def resolve_in_memory(self, creds: Credentials) -> Identity | None:
        """The identity when no key lookup is needed (dev mode, the root key); None when
        `resolve` has to look the key up in the state store. Raises like `resolve`."""
        peer = parse_actor_peer(creds.actor_peer_header)
        if self._root_hash is None:
            account = creds.account_header or DEFAULT_ACCOUNT
            user = creds.user_header or DEFAULT_USER
            validate_identifier(account, "account id", account=True)
            validate_identifier(user, "user id")
            return Identity(account, user, "root", peer, dev_mode=True)
        if not creds.api_key:
            raise Unauthenticated("Missing API Key when resolving identity.")
        if hmac.compare_digest(hash_key(creds.api_key), self._root_hash):
            return Identity(ROOT_ACCOUNT, "root", "root", peer)
        return None

    def resolve(self, creds: Credentials) -> Identity:
        identity = self.resolve_in_memory(creds)
        if identity is not None:
            return identity
        assert creds.api_key  # resolve_in_memory refuses a missing key
        found = self.state.resolve_key(hash_key(creds.api_key))
        if found is None:
            raise Unauthenticated("Invalid API key")
        return Identity(found.account_id, found.user_id, found.role,
                        parse_actor_peer(creds.actor_peer_header))

    # ---------------------------------------------------------------- admin

    @staticmethod
    def _require_root(identity: Identity) -> None:
        if identity.role != "root":
            raise PermissionDenied("Only the root key can manage accounts")

    @staticmethod
    def _require_admin_of(identity: Identity, account_id: str) -> None:
        if identity.role == "root" and (identity.dev_mode or
                                         identity.account_id == ROOT_ACCOUNT):
            return
        if identity.role == "admin" and identity.account_id == account_id:
            return
        raise PermissionDenied(f"Not an administrator of account '{account_id}'")

    def _account(self, account_id: str) -> Account:
        account = self.state.get_account(account_id)
        if account is None:
            raise NotFound(f"Account {account_id} not found", account_id, "account")
        return account

    @staticmethod
    def _check_role(role: str) -> str:
        if role not in ROLES or role == "root":
            raise InvalidArgument(f"Invalid role '{role}': admin or user")
        return role

    def create_account(self, identity: Identity, account_id: str,
                       admin_user_id: str) -> dict[str, Any]:
        self._require_root(identity)
        validate_identifier(account_id, "account id", account=True)
        validate_identifier(admin_user_id, "user id")
        now = self.clock()
        try:
            self.state.create_account(Account(account_id, now))
        except StateConflict:
            raise AlreadyExists(f"Account {account_id} already exists",
                                {"account_id": account_id}) from None
        key = mint_key(account_id, admin_user_id)
        self.state.create_user(User(account_id, admin_user_id, "admin", now, hash_key(key)))
        return {"account_id": account_id, "admin_user_id": admin_user_id, "user_key": key}

    def list_accounts(self, identity: Identity) -> list[dict[str, Any]]:
        self._require_root(identity)
        return [self._account_view(a) for a in self.state.list_accounts()]

    def get_account(self, identity: Identity, account_id: str) -> dict[str, Any]:
        self._require_admin_of(identity, account_id)
        return self._account_view(self._account(account_id))

    def _account_view(self, account: Account) -> dict[str, Any]:
        users = self.state.list_users(account.account_id)
        return {"account_id": account.account_id, "created_at": account.created_at,
                "user_count": len(users), "settings": account.settings}

    def delete_account(self, identity: Identity, account_id: str) -> dict[str, Any]:
        self._require_root(identity)
        self._account(account_id)
        self.state.delete_account(account_id)
        if self.on_account_deleted:
            self.on_account_deleted(account_id)
        return {"account_id": account_id, "deleted": True}

    def register_user(self, identity: Identity, account_id: str, user_id: str,
                      role: str) -> dict[str, Any]:
        self._require_admin_of(identity, account_id)
        validate_identifier(user_id, "user id")
        self._check_role(role)
        self._account(account_id)
        key = mint_key(account_id, user_id)
        try:
            self.state.create_user(User(account_id, user_id, role, self.clock(), hash_key(key)))
        except StateConflict:
            raise AlreadyExists(f"User {user_id} already exists in {account_id}",
                                {"user_id": user_id}) from None
        return {"account_id": account_id, "user_id": user_id, "role": role, "user_key": key}

    def list_users(self, identity: Identity, account_id: str) -> list[dict[str, Any]]:
        self._require_admin_of(identity, account_id)
        self._account(account_id)
        return [self._user_view(u) for u in self.state.list_users(account_id)]

    def get_user(self, identity: Identity, account_id: str, user_id: str) -> dict[str, Any]:
        self._require_admin_of(identity, account_id)
        return self._user_view(self._user(account_id, user_id))

    def _user(self, account_id: str, user_id: str) -> User:
        user = self.state.get_user(account_id, user_id)
        if user is None:
            raise NotFound(f"User {user_id} not found in {account_id}", user_id, "user")
        return user

    @staticmethod
    def _user_view(user: User) -> dict[str, Any]:
        return {"account_id": user.account_id, "user_id": user.user_id, "role": user.role,
                "created_at": user.created_at, "has_key": user.key_hash is not None}

    def remove_user(self, identity: Identity, account_id: str, user_id: str) -> dict[str, Any]:
        self._require_admin_of(identity, account_id)
        if not self.state.delete_user(account_id, user_id):
            raise NotFound(f"User {user_id} not found in {account_id}", user_id, "user")
        return {"account_id": account_id, "user_id": user_id, "deleted": True}

    def set_role(self, identity: Identity, account_id: str, user_id: str,
                 role: str) -> dict[str, Any]:
        self._require_admin_of(identity, account_id)
        self._check_role(role)
        try:
            self.state.set_user_role(account_id, user_id, role)
        except StateNotFound:
            raise NotFound(f"User {user_id} not found in {account_id}", user_id, "user") from None
        return {"account_id": account_id, "user_id": user_id, "role": role}

    def regenerate_key(self, identity: Identity, account_id: str,
                       user_id: str) -> dict[str, Any]:
        self._require_admin_of(identity, account_id)
        self._user(account_id, user_id)
        key = mint_key(account_id, user_id)
        self.state.set_user_key(account_id, user_id, hash_key(key))
        return {"account_id": account_id, "user_id": user_id, "user_key": key}

    def usage(self, identity: Identity, account_id: str) -> dict[str, Any]:
        """What an account holds: users by role, sessions and their messages, index records
        by context type. Counts come from the stores' own indexes, not from walking files."""
        self._require_admin_of(identity, account_id)
        self._account(account_id)
        users = self.state.list_users(account_id)
        out: dict[str, Any] = {
            "account_id": account_id,
            "users": {"total": len(users),
                      **{role: sum(1 for u in users if u.role == role)
                         for role in ("admin", "user")}},
        }
        if self.sessions is not None:
            records = [s for u in users
                       for s in self.sessions.list_sessions(account_id, u.user_id)]
            out["sessions"] = {"total": len(records),
                               "messages": sum(s.last_seq for s in records),
                               "commits": sum(s.commit_count for s in records)}
        if self.index is not None:
            by_type = {t: self.index.count(account_id, IndexFilter(context_types=[t]))
                       for t in ("resource", "memory", "skill")}
            out["records"] = {"total": self.index.count(account_id), **by_type}
        return out
