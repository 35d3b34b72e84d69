"""The account store port: accounts, users, API keys and the tombstones of deletions.

Deletion is two-phased. `begin_*_deletion` tombstones at once (the row stays, status
"deleting": its keys stop resolving on the next lookup and its id cannot be registered again);
a purge then removes what it owned in every store and `finish_*_deletion` removes the row,
after which the id is free. A tombstone names the purge's task, so a retried DELETE finds the
purge already under way, and a sweep can restart a purge whose job was lost.

Keys are stored as sha256 hashes only. A user has at most MAX_KEYS_PER_USER keys, so that a
user's tombstone and its keys' removal fit one transaction on every backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class Status(StrEnum):
    """An account's or a user's: in use, or tombstoned while its purge runs."""

    ACTIVE = "active"
    DELETING = "deleting"


ACTIVE = Status.ACTIVE
DELETING = Status.DELETING
MAX_KEYS_PER_USER = 20
# The key of registration and of `regenerate`: OpenViking's one key per user. Other names
# are the user's own rotation keys, which `regenerate` leaves alone.
DEFAULT_KEY_NAME = "default"


@dataclass(frozen=True)
class Deletion:
    """A tombstone: which purge removes the row's data, and who asked for it."""

    task_id: str
    requested_at: float
    requested_by: str  # "account/user" of the requester
    # The purge task's owner (who may read it): the requester, or the system when the
    # requester is the root key or the user being deleted.
    owner_account: str
    owner_user: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "requested_at": self.requested_at,
            "requested_by": self.requested_by,
            "owner_account": self.owner_account,
            "owner_user": self.owner_user,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Deletion:
        return cls(
            str(raw["task_id"]),
            float(raw["requested_at"]),
            str(raw["requested_by"]),
            str(raw["owner_account"]),
            str(raw["owner_user"]),
        )


@dataclass
class Account:
    account_id: str
    created_at: float
    settings: dict[str, Any] = field(default_factory=dict)
    status: Status = ACTIVE
    deletion: Deletion | None = None


@dataclass
class User:
    account_id: str
    user_id: str
    role: str  # "admin" | "user"
    created_at: float
    # A fresh id per registration: work queued for a removed user never runs for a new user
    # of the same id. None on rows older than the field.
    generation: str | None = None
    status: Status = ACTIVE
    deletion: Deletion | None = None


@dataclass(frozen=True)
class ApiKey:
    key_id: str  # public: shown in listings and audit records
    account_id: str
    user_id: str
    key_hash: str  # sha256 hex of the key; the key itself is never stored
    name: str
    created_at: float
    created_by: str  # "account/user" of whoever minted it ("_root/root" for the root key)
    expires_at: float | None = None
    last_used_at: float | None = None


@dataclass(frozen=True)
class ResolvedKey:
    """What one API key stands for: the key, its user and the user's account, read together."""

    key: ApiKey
    user: User
    account: Account

    @property
    def active(self) -> bool:
        return self.user.status == ACTIVE and self.account.status == ACTIVE


@dataclass(frozen=True)
class PendingDeletion:
    account_id: str
    user_id: str | None  # None: the whole account
    deletion: Deletion


@runtime_checkable
class AccountStore(Protocol):
    def create_account(self, account: Account) -> None:
        """Raises StateConflict when the account exists (being deleted included)."""
        ...

    def get_account(self, account_id: str) -> Account | None:
        """The account, tombstoned or not."""
        ...

    def list_accounts(self) -> list[Account]: ...

    def update_account_settings(self, account_id: str, settings: dict[str, Any]) -> Account:
        """Replaces the account's settings whole; the account as it is now. Raises
        StateNotFound when there is no such account or it is being deleted."""
        ...

    def begin_account_deletion(self, account_id: str, deletion: Deletion) -> Account:
        """Tombstones the account (its users' keys stop resolving at once). An account being
        deleted already is returned unchanged: its tombstone names the purge under way.
        Raises StateNotFound."""
        ...

    def replace_account_deletion(
        self, account_id: str, expected_task_id: str, deletion: Deletion
    ) -> Account:
        """Names a new purge on a tombstone whose purge `expected_task_id` ended without
        finishing. Raises StateNotFound (no such tombstone) or StateConflict (another purge
        took it meanwhile)."""
        ...

    def finish_account_deletion(self, account_id: str, task_id: str) -> bool:
        """Removes the tombstoned account row with whatever users and keys remain, if its
        tombstone still names `task_id`; False otherwise (already gone, or another purge)."""
        ...

    def create_user(self, user: User, key: ApiKey | None = None) -> None:
        """The user and its first key, together. Raises StateNotFound when the account does
        not exist or is being deleted, StateConflict when the user exists (being deleted
        included) or the key hash is in use."""
        ...

    def get_user(self, account_id: str, user_id: str) -> User | None:
        """The user, tombstoned or not."""
        ...

    def list_users(self, account_id: str) -> list[User]: ...

    def begin_user_deletion(self, account_id: str, user_id: str, deletion: Deletion) -> User:
        """Tombstones the user and removes its keys, in one transaction. A user being deleted
        already is returned unchanged. Raises StateNotFound."""
        ...

    def replace_user_deletion(
        self, account_id: str, user_id: str, expected_task_id: str, deletion: Deletion
    ) -> User:
        """As replace_account_deletion, for a user."""
        ...

    def finish_user_deletion(self, account_id: str, user_id: str, task_id: str) -> bool:
        """Removes the tombstoned user row if its tombstone still names `task_id`."""
        ...

    def pending_deletions(self) -> list[PendingDeletion]:
        """Every tombstone, accounts and users, for the sweep that restarts lost purges."""
        ...

    def set_user_role(self, account_id: str, user_id: str, role: str) -> None:
        """Raises StateNotFound (no such user, or being deleted)."""
        ...

    def add_key(self, key: ApiKey, *, replace_named: str | None = None) -> None:
        """Adds a key to an active user; with `replace_named`, the user's keys of that name
        go in the same transaction (a rotation that never leaves two keys of the name, nor
        none). Raises StateNotFound (no such active user), StateConflict (the hash is in use,
        or the user holds MAX_KEYS_PER_USER keys already)."""
        ...

    def list_keys(self, account_id: str, user_id: str | None = None) -> list[ApiKey]:
        """The user's keys (every user's of the account when None), oldest first."""
        ...

    def delete_key(self, account_id: str, user_id: str, key_id: str) -> bool: ...

    def touch_key(self, key: ApiKey, at: float) -> None:
        """Records `at` as the key's last use (best effort: a key deleted meanwhile is left
        alone)."""
        ...

    def resolve_key(self, key_hash: str) -> ResolvedKey | None:
        """The key of that hash with its user and account, read consistently; None when no
        key has it. Tombstoned users and accounts are returned: the caller refuses them."""
        ...
