"""The audit trail's records and rules: what an admin, security or destructive data action
leaves behind, the names of those actions, and the filters of the console's listing
(OpenViking's `GET /api/v1/console/audit`), shared by every adapter of the AuditLog port.

A record is written before its action runs (outcome `pending`) and settled once afterwards
(`ok`, or `error` with the code and message of the failure). A record that stays pending is
an action whose end was never written: the process died during it, or the settling write
failed after it ran.

Records name who acted (account, user, role, key id: never the key), from where (source IP,
request id), what (action, target) and how it ended; never a request body or file content.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from skald.domain.errors import InvalidArgument
from skald.domain.timefmt import iso_utc


class Outcome(StrEnum):
    """How a recorded action ended; `pending` until its end is written."""

    PENDING = "pending"
    OK = "ok"
    ERROR = "error"


PENDING = Outcome.PENDING
OK = Outcome.OK
ERROR = Outcome.ERROR
OUTCOMES = tuple(Outcome)

# Every action the trail records, with its family (OpenViking's `api_type`). Admin and
# security actions first, then the destructive data actions.
ACTIONS: dict[str, str] = {
    "account.create": "admin",
    "account.delete": "admin",
    "account.settings": "admin",
    "user.register": "admin",
    "user.remove": "admin",
    "user.role": "admin",
    "key.create": "key",
    "key.revoke": "key",
    "key.regenerate": "key",
    "fs.rm": "fs",
    "fs.mv": "fs",
    "memory.forget": "memory",
    "skill.delete": "skill",
    "pack.import": "pack",
    "pack.restore": "pack",
    "session.delete": "session",
    "watch.create": "watch",
    "watch.update": "watch",
    "watch.cancel": "watch",
}
API_TYPES = tuple(dict.fromkeys(ACTIONS.values()))

# Bounds of what one record keeps of a failure or a target (a long URI list in an error's
# details must not make records large).
MAX_TEXT = 1024
MAX_DETAIL_JSON = 4096


def api_type_of(action: str) -> str:
    try:
        return ACTIONS[action]
    except KeyError:
        raise ValueError(
            f"unknown audit action '{action}' (skald/domain/ops/audit.py ACTIONS)"
        ) from None


@dataclass(frozen=True)
class AuditRecord:
    record_id: str
    account_id: str  # the account acted on
    actor_account_id: str  # the caller's own account (`_root` for the root key)
    user_id: str
    role: str
    action: str
    target: str
    created_at: float  # epoch seconds
    expires_at: float  # when retention lets it go
    key_id: str | None = None
    request_id: str | None = None
    source_ip: str | None = None
    method: str | None = None
    route: str | None = None
    outcome: Outcome = PENDING
    status_code: int = 0  # HTTP status of the outcome; 0 while pending
    duration_ms: float = 0.0
    error_code: str | None = None
    error_message: str | None = None
    error_details: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def api_type(self) -> str:
        return ACTIONS.get(self.action, self.action.split(".", 1)[0])

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status_code < 400

    def view(self) -> AuditItem:
        """The console's item: OpenViking's fields, then Skald's."""
        return AuditItem(
            request_id=self.request_id,
            account_id=self.account_id,
            user_id=self.user_id,
            method=self.method,
            route=self.route,
            api_type=self.api_type,
            status_code=self.status_code,
            duration_ms=round(self.duration_ms, 3),
            error_code=self.error_code,
            error_message=self.error_message,
            error_details=self.error_details,
            created_at=iso_utc(self.created_at, millis=True),
            id=self.record_id,
            role=self.role,
            key_id=self.key_id,
            source_ip=self.source_ip,
            action=self.action,
            target=self.target,
            outcome=Outcome(self.outcome),
            actor_account_id=self.actor_account_id,
            detail=dict(self.detail),
        )


@dataclass(frozen=True, slots=True)
class AuditItem:
    """One record as the console's listing shows it (OpenViking's request-audit fields, then
    Skald's). `status_code` is the HTTP status the action ended with (0 while `outcome` is
    pending)."""

    request_id: str | None
    account_id: str
    user_id: str
    method: str | None
    route: str | None
    api_type: str
    status_code: int
    duration_ms: float
    error_code: str | None
    error_message: str | None
    error_details: dict[str, Any] | None  # the failure's own details, bounded
    created_at: str  # ISO-8601 UTC
    id: str
    role: str
    key_id: str | None
    source_ip: str | None
    action: str
    target: str
    outcome: Outcome
    actor_account_id: str
    detail: dict[str, Any]  # what the action noted (names, ids, counts), bounded


# --------------------------------------------------------------------------------------------
# The listing's filters


@dataclass(frozen=True)
class StatusRange:
    """Status codes `low <= code < high`."""

    low: int
    high: int

    def matches(self, code: int) -> bool:
        return self.low <= code < self.high


_NAMED_STATUSES = {
    "success": StatusRange(200, 400),
    "ok": StatusRange(200, 400),
    "error": StatusRange(400, 600),
    "failed": StatusRange(400, 600),
    # Skald's: the records whose outcome was never written.
    "pending": StatusRange(0, 1),
}


def split_multi(values: Iterable[str] | None) -> list[str]:
    """Repeated and comma-separated query values as one list (OpenViking's `_split_multi`)."""
    out: list[str] = []
    for value in values or ():
        out.extend(part.strip() for part in str(value).split(",") if part.strip())
    return out


def parse_statuses(values: Iterable[str]) -> tuple[StatusRange, ...]:
    """`success`/`ok` (2xx-3xx), `error`/`failed` (>= 400), `2xx`..`5xx`, an exact code, or
    `pending`; anything else is an InvalidArgument."""
    out: list[StatusRange] = []
    for raw in values:
        value = raw.strip().lower()
        named = _NAMED_STATUSES.get(value)
        if named is not None:
            out.append(named)
        elif len(value) == 3 and value.endswith("xx") and value[0] in "12345":
            low = int(value[0]) * 100
            out.append(StatusRange(low, low + 100))
        elif value.isdigit() and len(value) == 3 and 100 <= int(value) <= 599:
            out.append(StatusRange(int(value), int(value) + 1))
        else:
            raise InvalidArgument(
                f"Invalid status '{raw}': use success, error, pending, 2xx..5xx or a status code",
                {"field": "status", "value": raw[:100]},
            )
    return tuple(dict.fromkeys(out))


def parse_actions(values: Iterable[str]) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(values))
    unknown = [a for a in out if a not in ACTIONS]
    if unknown:
        raise InvalidArgument(
            f"Unknown action '{unknown[0][:100]}'", {"field": "action", "actions": sorted(ACTIONS)}
        )
    return out


def parse_api_types(values: Iterable[str]) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(values))
    unknown = [t for t in out if t not in API_TYPES]
    if unknown:
        raise InvalidArgument(
            f"Unknown api_type '{unknown[0][:100]}'",
            {"field": "api_type", "api_types": list(API_TYPES)},
        )
    return out


@dataclass(frozen=True)
class AuditQuery:
    """One page of the records matching every filter given, newest first. `since` and
    `until` bound `created_at` (inclusive); records expired at `now` are never listed."""

    account_id: str | None  # None: every account (root's view)
    since: float
    until: float
    now: float
    page: int = 1
    page_size: int = 10
    user_id: str | None = None
    request_id: str | None = None
    actions: tuple[str, ...] = ()
    api_types: tuple[str, ...] = ()
    statuses: tuple[StatusRange, ...] = ()

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.page_size

    def matches(self, r: AuditRecord) -> bool:
        """The rule every adapter applies (the SQLite one as SQL, with the same meaning)."""
        return (
            (self.account_id is None or r.account_id == self.account_id)
            and self.since <= r.created_at <= self.until
            and r.expires_at > self.now
            and (self.user_id is None or r.user_id == self.user_id)
            and (self.request_id is None or r.request_id == self.request_id)
            and (not self.actions or r.action in self.actions)
            and (not self.api_types or r.api_type in self.api_types)
            and (not self.statuses or any(s.matches(r.status_code) for s in self.statuses))
        )


@dataclass(frozen=True)
class AuditPage:
    total: int  # records matching, over every page
    succeeded: int  # of those, the ones that ended with a 2xx or 3xx
    items: list[AuditRecord]


def newest_first(r: AuditRecord) -> tuple[float, str]:
    """Sort key of the listing (reverse=True): created_at, then the record id."""
    return r.created_at, r.record_id
