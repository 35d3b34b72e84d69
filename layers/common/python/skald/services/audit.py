"""The audit trail: every admin, security and destructive data action is recorded before it
runs and settled after, and the console lists the records (OpenViking's
`GET /api/v1/console/audit`).

    with audit.action(identity, "fs.rm", str(uri), detail={"recursive": True}) as note:
        count = ...the action...
        note.detail["deleted"] = count

The pending record is written first; if that write fails the action does not run (503
UNAVAILABLE): an action that cannot be audited is not done. The block's outcome settles the
record: `ok`, or `error` with the SkaldError's code and message (the error is re-raised). A
crash in between leaves the record pending, which the listing shows as such.

Who acted comes from the Identity (account, user, role, key id); the request id, source IP,
method and route from the call context set at the HTTP edge. Callers put names, ids, counts
and flags in `detail`; never a key, a request body or file content.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from skald.domain.access.call_context import current_request
from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidArgument, PermissionDenied, SkaldError, Unavailable
from skald.domain.ops import audit as a
from skald.domain.paths.uri import validate_identifier
from skald.domain.timefmt import parse_time_bound
from skald.ports import AuditLog
from skald.services.faults import Faults

log = logging.getLogger("skald.audit")

DAY_S = 86400.0
MAX_PAGE_SIZE = 100
# A listing's default end lies this far past the reader's clock: a record stamped by another
# machine whose clock runs a little ahead is still listed at once.
CLOCK_SKEW_S = 60.0


@dataclass(frozen=True, slots=True)
class AuditListing:
    """One page of the console's audit listing, with totals over every page."""

    total: int
    success_rate: float
    page: int
    page_size: int
    items: list[a.AuditItem]


@dataclass
class Note:
    """What the running action may add to its record (counts, what it resolved)."""

    record: a.AuditRecord | None  # None: not audited (a service built without a trail)
    detail: dict[str, Any] = field(default_factory=dict)


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= a.MAX_TEXT:
        return text
    return text[: a.MAX_TEXT - 1] + "…"


def _bounded(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`value` as plain JSON, or a marker when it would make the record large."""
    if value is None:
        return None
    text = json.dumps(dict(value), default=str, ensure_ascii=False)
    if len(text) > a.MAX_DETAIL_JSON:
        return {"truncated": True, "size": len(text)}
    loaded: dict[str, Any] = json.loads(text)
    return loaded


class AuditTrail:
    """`status_of`: the HTTP status an error code answers (the edge's table), recorded as
    OpenViking's `status_code`."""

    def __init__(
        self,
        log_: AuditLog,
        *,
        retention_days: float,
        status_of: Callable[[str], int] = lambda code: 500,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        faults: Faults | None = None,
    ) -> None:
        self.faults = faults or Faults()
        self.log = log_
        self.retention_s = retention_days * DAY_S
        self.status_of = status_of
        self.clock = clock
        self.new_id = new_id

    # ---------------------------------------------------------------- recording

    def begin(
        self,
        identity: Identity,
        action: str,
        target: str,
        *,
        account_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> a.AuditRecord:
        """Writes the pending record; raises Unavailable when it could not be written."""
        a.api_type_of(action)  # an unknown action name is a bug, not a request error
        now = self.clock()
        meta = current_request()
        record = a.AuditRecord(
            record_id=self.new_id(),
            account_id=account_id or identity.account_id,
            actor_account_id=identity.account_id,
            user_id=identity.user_id,
            role=identity.role,
            action=action,
            target=_clip(target) or "",
            created_at=now,
            expires_at=now + self.retention_s,
            key_id=identity.key_id,
            request_id=meta.request_id if meta else None,
            source_ip=meta.source_ip if meta else None,
            method=meta.method if meta else None,
            route=meta.route if meta else None,
            detail=_bounded(detail) or {},
        )
        try:
            self.log.append(record)
        except Exception:
            log.exception("the audit record of %s could not be written: refused", action)
            raise Unavailable(
                "The audit trail cannot be written right now, so the action "
                "was not done; retry later",
                {"action": action},
            ) from None
        return record

    def settle(
        self,
        record: a.AuditRecord,
        *,
        started: float | None = None,
        error: SkaldError | None = None,
        failed: bool = False,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Writes the outcome of `record`: ok, or error (`error`'s code and message; an
        unexpected failure when `failed` without one). Never raises: the action is done."""
        meta = current_request()
        began = meta.started if meta is not None and meta.started is not None else started
        duration = 0.0 if began is None else max(time.monotonic() - began, 0.0) * 1000
        merged = {**record.detail, **(detail or {})}
        if error is None and not failed:
            done = replace(
                record,
                outcome=a.OK,
                status_code=200,
                duration_ms=duration,
                detail=_bounded(merged) or {},
            )
        else:
            code = error.code if error is not None else "INTERNAL"
            done = replace(
                record,
                outcome=a.ERROR,
                status_code=self.status_of(code),
                duration_ms=duration,
                error_code=code,
                error_message=_clip(error.message if error is not None else "Internal error"),
                error_details=_bounded(error.details)
                if error is not None and error.details
                else None,
                detail=_bounded(merged) or {},
            )
        for attempt in (1, 2):
            try:
                if not self.log.settle(done):
                    log.warning(
                        "audit record %s was not pending: outcome %s not written",
                        record.record_id,
                        done.outcome,
                    )
                return
            except Exception:
                if attempt == 2:  # the record stays pending: the listing shows that
                    log.exception(
                        "the outcome of audit record %s could not be written", record.record_id
                    )

    @contextmanager
    def action(
        self,
        identity: Identity,
        action: str,
        target: str,
        *,
        account_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> Iterator[Note]:
        """Runs the block as the audited `action` on `target` (`account_id`: the account
        acted on, when it is not the caller's own, e.g. root managing an account)."""
        started = time.monotonic()
        note = Note(self.begin(identity, action, target, account_id=account_id, detail=detail))
        record = note.record
        assert record is not None
        try:
            # Tests stop the process here: the record is durable, the action not begun.
            self.faults.hit("audit.after_record")
            yield note
        except SkaldError as exc:
            self.settle(record, started=started, error=exc, detail=note.detail)
            raise
        except Exception:
            self.settle(record, started=started, failed=True, detail=note.detail)
            raise
        self.settle(record, started=started, detail=note.detail)

    # ---------------------------------------------------------------- reading

    @staticmethod
    def visible_account(identity: Identity, account_id: str | None) -> str | None:
        """The account whose records `identity` may list (None: every account): root (the
        root key, or dev mode) any or all, an account admin their own, a user none."""
        if identity.role == "root":
            return account_id or None
        if identity.role == "admin":
            if account_id and account_id != identity.account_id:
                raise PermissionDenied(
                    "An account admin reads their own account's audit trail only",
                    {"account_id": account_id},
                )
            return identity.account_id
        raise PermissionDenied("Only root and account admins may read the audit trail")

    def listing(
        self,
        identity: Identity,
        *,
        page: int = 1,
        page_size: int = 10,
        request_id: str | None = None,
        statuses: Sequence[str] = (),
        api_types: Sequence[str] = (),
        actions: Sequence[str] = (),
        account_id: str | None = None,
        user_id: str | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> AuditListing:
        """OpenViking's audit page: totals over every page, the items newest first."""
        if account_id:
            validate_identifier(account_id, "account id")
        scope = self.visible_account(identity, account_id)
        if page < 1:
            raise InvalidArgument("page must be >= 1", {"field": "page"})
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise InvalidArgument(f"page_size must be 1 to {MAX_PAGE_SIZE}", {"field": "page_size"})
        if user_id:
            validate_identifier(user_id, "user id")
        if request_id is not None and not 0 < len(request_id) <= 200:
            raise InvalidArgument("request_id must be 1 to 200 characters", {"field": "request_id"})
        now = self.clock()
        start = parse_time_bound(since, now, "since")
        end = parse_time_bound(until, now, "until")
        if start is not None and end is not None and start > end:
            raise InvalidArgument("since is after until", {"field": "since"})
        query = a.AuditQuery(
            account_id=scope,
            since=max(start if start is not None else 0.0, now - self.retention_s),
            until=end if end is not None else now + CLOCK_SKEW_S,
            now=now,
            page=page,
            page_size=page_size,
            user_id=user_id or None,
            request_id=request_id or None,
            actions=a.parse_actions(actions),
            api_types=a.parse_api_types(api_types),
            statuses=a.parse_statuses(statuses),
        )
        found = self.log.query(query)
        return AuditListing(
            total=found.total,
            success_rate=found.succeeded / found.total if found.total else 0.0,
            page=page,
            page_size=page_size,
            items=[r.view() for r in found.items],
        )


def audited(
    trail: AuditTrail | None,
    identity: Identity,
    action: str,
    target: str,
    *,
    account_id: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> AbstractContextManager[Note]:
    """`trail.action(...)`, or nothing recorded when a service was built without a trail
    (unit tests of the service alone; every composition gives one)."""
    if trail is None:
        return nullcontext(Note(None))
    return trail.action(identity, action, target, account_id=account_id, detail=detail)
