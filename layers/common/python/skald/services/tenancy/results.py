"""The results of the admin routes (accounts, users, roles, keys, usage), as the HTTP edge
serialises them (docs/api.md, "Accounts and keys"). A None marked OMIT_NONE is a key the wire
leaves out; a key is shown once, in the result that mints it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from skald.domain.wire import OMIT_NONE
from skald.ports.accounts import Status
from skald.services.metering.results import UsageSeries


@dataclass(frozen=True, slots=True)
class AccountCreated:
    account_id: str
    admin_user_id: str
    user_key: str


@dataclass(frozen=True, slots=True)
class AccountView:
    """An account; `deletion_*` while its purge runs."""

    account_id: str
    created_at: float
    user_count: int
    settings: dict[str, Any]  # the account's own settings blob, as it was given
    status: Status
    deletion_task_id: Annotated[str | None, OMIT_NONE] = None
    deletion_requested_at: Annotated[str | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True)
class UserView:
    """A user; `deletion_*` while its purge runs."""

    account_id: str
    user_id: str
    role: str
    created_at: float
    has_key: bool
    status: Status
    deletion_task_id: Annotated[str | None, OMIT_NONE] = None
    deletion_requested_at: Annotated[str | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True)
class UserRegistered:
    account_id: str
    user_id: str
    role: str
    user_key: str


@dataclass(frozen=True, slots=True)
class RoleSet:
    account_id: str
    user_id: str
    role: str


@dataclass(frozen=True, slots=True)
class UserKey:
    """The user's default key, regenerated."""

    account_id: str
    user_id: str
    user_key: str


@dataclass(frozen=True, slots=True)
class ApiKeyView:
    """One of a user's keys, as listings show it: never the key nor its hash."""

    key_id: str
    name: str
    account_id: str
    user_id: str
    created_at: str  # ISO-8601 UTC
    created_by: str
    expires_at: str | None
    last_used_at: str | None


@dataclass(frozen=True, slots=True)
class NewApiKey(ApiKeyView):
    user_key: str  # shown once


@dataclass(frozen=True, slots=True)
class KeyRevoked:
    account_id: str
    user_id: str
    key_id: str
    revoked: bool


@dataclass(frozen=True, slots=True)
class UserRemoval:
    """A user's removal under way: the tombstone is set, the purge runs as task `task_id`."""

    account_id: str
    user_id: str
    status: Status
    task_id: str


@dataclass(frozen=True, slots=True)
class AccountRemoval:
    """An account's removal under way, as UserRemoval."""

    account_id: str
    deleted: bool
    status: Status
    task_id: str


@dataclass(frozen=True, slots=True)
class UsageUsers:
    total: int
    admin: int
    user: int


@dataclass(frozen=True, slots=True)
class UsageSessions:
    total: int
    messages: int
    commits: int


@dataclass(frozen=True, slots=True)
class UsageRecords:
    total: int
    resource: int
    memory: int
    skill: int


@dataclass(frozen=True, slots=True)
class Usage:
    """What an account holds; `sessions` and `records` when the entry point has those
    stores."""

    account_id: str
    users: UsageUsers
    sessions: Annotated[UsageSessions | None, OMIT_NONE] = None
    records: Annotated[UsageRecords | None, OMIT_NONE] = None
    # The metered series, only when the route is asked for one (from, to, granularity).
    series: Annotated[UsageSeries | None, OMIT_NONE] = None
