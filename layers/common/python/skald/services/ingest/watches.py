"""Watches: a remote source re-fetched into its root every `watch_interval` minutes.

A watch is one JSON object in the blob store (`_watches/<task_id>.json`, outside every
account's tree), so it survives restarts and is the same on every backend. A re-fetch is a
fetch job under a new internal task: unchanged files keep their records, changed files are
re-indexed, removed files are removed (RemoteSources). A user sees the watches they made, an
account admin those of the account, root all (OpenViking's rule); one watch per target.

Creating, changing and cancelling a watch is recorded in the audit trail (`watch.create`,
`watch.update`, `watch.cancel`): the target is the watched URI and the detail names the watch's
task id; an attempt on a watch that is not found is recorded with the URI or id it named.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from skald.catalog import WATCHES_PREFIX
from skald.domain.access.identity import Identity
from skald.domain.access.visibility import sees_user
from skald.domain.errors import Conflict, InvalidArgument, NotFound
from skald.domain.paths.uri import from_canonical, parse_uri
from skald.domain.timefmt import iso_utc
from skald.domain.wire import WireUri
from skald.ports import BlobNotFound, BlobStore
from skald.services.audit import AuditTrail, audited
from skald.services.ingest.fetch import RemoteSources
from skald.services.plans.quotas import Quotas

_PREFIX = WATCHES_PREFIX
OPTION_KEYS = ("include", "exclude", "ignore_dirs", "processing_mode")


@dataclass
class Watch:
    task_id: str
    path: str
    to_uri: str
    account_id: str
    user_id: str
    original_role: str
    watch_interval: float  # minutes
    created_at: float
    reason: str = ""
    instruction: str = ""
    is_active: bool = True
    last_execution_time: float | None = None
    next_execution_time: float | None = None
    last_task_id: str | None = None  # the task of the latest re-fetch
    options: dict[str, Any] = field(default_factory=dict)

    def view(self) -> WatchView:
        """OpenViking's public shape of a watch task."""
        return WatchView(
            task_id=self.task_id,
            path=self.path,
            to_uri=self.to_uri,
            parent_uri=self.to_uri.rsplit("/", 1)[0],
            reason=self.reason,
            instruction=self.instruction,
            watch_interval=self.watch_interval,
            processor_kwargs=dict(self.options),
            created_at=iso_utc(self.created_at),
            last_execution_time=iso_utc(self.last_execution_time)
            if self.last_execution_time
            else None,
            next_execution_time=iso_utc(self.next_execution_time)
            if self.next_execution_time
            else None,
            is_active=self.is_active,
            account_id=self.account_id,
            user_id=self.user_id,
            original_role=self.original_role,
            last_task_id=self.last_task_id,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchView:
    """A watch as the routes answer it (OpenViking's watch task)."""

    task_id: str
    path: str  # the watched source URL
    to_uri: WireUri
    parent_uri: WireUri
    reason: str
    instruction: str
    watch_interval: float  # minutes
    build_index: bool = True
    summarize: bool = False
    # the fetch's own options (include, exclude, ignore_dirs, processing_mode), as given
    processor_kwargs: dict[str, Any]
    created_at: str
    last_execution_time: str | None
    next_execution_time: str | None
    is_active: bool
    account_id: str
    user_id: str
    original_role: str
    last_task_id: str | None


@dataclass(frozen=True, slots=True)
class WatchList:
    tasks: list[WatchView]
    total: int


@dataclass(frozen=True, slots=True)
class WatchDeleted:
    task_id: str
    to_uri: WireUri
    deleted: bool = True


@dataclass(frozen=True, slots=True)
class WatchScheduled:
    """A re-fetch queued now, outside the watch's cadence."""

    task_id: str
    to_uri: WireUri
    scheduled: bool = True


MAX_INTERVAL_MIN = 366 * 24 * 60  # a year


def _bare(url: str) -> str:
    """A source URL as an audit record names it: no query, fragment or user info, which may
    carry a token."""
    try:
        parts = urlsplit(url)
        host = f"{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"
    except ValueError:
        return ""
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def check_interval(minutes: float) -> float:
    if not minutes > 0:
        raise InvalidArgument(
            "watch_interval must be > 0 (use is_active=false to pause without losing the cadence)"
        )
    if minutes > MAX_INTERVAL_MIN:
        raise InvalidArgument(f"watch_interval is in minutes, at most {MAX_INTERVAL_MIN}")
    return float(minutes)


class WatchService:
    def __init__(
        self,
        blobs: BlobStore,
        remote: Callable[[], RemoteSources],
        clock: Callable[[], float] = time.time,
        audit: AuditTrail | None = None,
        quotas: Quotas | None = None,
    ) -> None:
        self.audit = audit
        self.quotas = quotas
        self.blobs = blobs
        self._remote = remote
        self.clock = clock
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- storage

    def _all(self) -> list[Watch]:
        out: list[Watch] = []
        for blob in self.blobs.iter_all(_PREFIX):
            try:
                out.append(Watch(**json.loads(self.blobs.get(blob.key))))
            except (BlobNotFound, ValueError, TypeError):
                continue  # removed meanwhile, or not a watch
        return sorted(out, key=lambda w: w.created_at)

    def _save(self, watch: Watch) -> None:
        self.blobs.put(f"{_PREFIX}{watch.task_id}.json", json.dumps(asdict(watch)).encode())

    # ---------------------------------------------------------------- use cases

    def check_new(self, identity: Identity, interval: float, to_uri: str | None) -> None:
        check_interval(interval)
        existing = self._all()
        self._check_plan(identity, interval, existing)
        if to_uri:
            self.ensure_free(identity, to_uri, existing)

    def _check_plan(self, identity: Identity, interval: float, existing: list[Watch]) -> None:
        """A new watch within the plan: its interval and the account's count of watches."""
        if self.quotas is None:
            return
        account = identity.account_id
        self.quotas.check_watch_interval(account, interval)
        self.quotas.check_watches(
            account, lambda: sum(1 for w in existing if w.account_id == account)
        )

    def ensure_free(
        self, identity: Identity, to_uri: str, existing: list[Watch] | None = None
    ) -> None:
        """Conflict when a watch already refreshes `to_uri` (one watch per target)."""
        target = str(parse_uri(to_uri, user_id=identity.user_id, privileged=identity.privileged))
        for other in self._all() if existing is None else existing:
            if other.account_id == identity.account_id and other.to_uri == target:
                raise Conflict(
                    f"A watch already refreshes {target}",
                    {"to_uri": target, "task_id": other.task_id},
                )

    def create(
        self,
        identity: Identity,
        path: str,
        to_uri: str,
        interval: float,
        *,
        reason: str = "",
        instruction: str = "",
        options: dict[str, Any] | None = None,
    ) -> Watch:
        check_interval(interval)
        with (
            self._lock,
            audited(
                self.audit,
                identity,
                "watch.create",
                to_uri,
                detail={"source": _bare(path), "interval_min": interval},
            ) as note,
        ):
            existing = self._all()
            self._check_plan(identity, interval, existing)
            self.ensure_free(identity, to_uri, existing)
            now = self.clock()
            watch = Watch(
                str(uuid.uuid4()),
                path,
                to_uri,
                identity.account_id,
                identity.user_id,
                identity.role,
                interval,
                now,
                reason,
                instruction,
                last_execution_time=now,
                next_execution_time=now + interval * 60,
                options={
                    k: v for k, v in (options or {}).items() if k in OPTION_KEYS and v is not None
                },
            )
            self._save(watch)
            note.detail["task_id"] = watch.task_id
            return watch

    def list(self, identity: Identity, *, active_only: bool) -> list[Watch]:
        return [
            w
            for w in self._all()
            if self._visible(identity, w) and (w.is_active or not active_only)
        ]

    def get(self, identity: Identity, task_id: str | None, to_uri: str | None) -> Watch:
        if not task_id and not to_uri:
            raise InvalidArgument("Either {task_id} or ?to_uri= is required")
        if to_uri:
            to_uri = str(
                parse_uri(to_uri, user_id=identity.user_id, privileged=identity.privileged)
            )
        found = None
        for watch in self.list(identity, active_only=False):
            if (task_id and watch.task_id == task_id) or (not task_id and watch.to_uri == to_uri):
                found = watch
                break
        if found is None:
            raise NotFound(
                f"Watch task not found: {task_id or to_uri}", task_id or to_uri or "", "watch_task"
            )
        if task_id and to_uri and found.to_uri != to_uri:
            raise InvalidArgument(
                f"task_id {task_id} maps to to_uri={found.to_uri!r}, not {to_uri!r}"
            )
        return found

    def update(
        self,
        identity: Identity,
        task_id: str | None,
        to_uri: str | None,
        *,
        watch_interval: float | None,
        is_active: bool | None,
        reason: str | None,
        instruction: str | None,
    ) -> Watch:
        changes = {
            k: v
            for k, v in (("watch_interval", watch_interval), ("is_active", is_active))
            if v is not None
        }
        with self._lock, self._audited(identity, "watch.update", task_id, to_uri, changes) as watch:
            if watch_interval is not None:
                check_interval(watch_interval)
                if self.quotas is not None:  # the plan's shortest interval, before any change
                    self.quotas.check_watch_interval(watch.account_id, watch_interval)
                watch.watch_interval = float(watch_interval)
            if is_active is not None:
                watch.is_active = is_active
            if reason is not None:
                watch.reason = reason
            if instruction is not None:
                watch.instruction = instruction
            base = watch.last_execution_time or watch.created_at
            watch.next_execution_time = (
                base + watch.watch_interval * 60 if watch.is_active else None
            )
            self._save(watch)
            return watch

    def delete(self, identity: Identity, task_id: str | None, to_uri: str | None) -> Watch:
        with self._lock, self._audited(identity, "watch.cancel", task_id, to_uri, {}) as watch:
            self.blobs.delete(f"{_PREFIX}{watch.task_id}.json")
            return watch

    def remove_owned(self, account_id: str, user_id: str | None = None) -> int:
        """Removes every watch of the account (of one user when `user_id` is set): their
        owner is being deleted. Returns how many went."""
        with self._lock:
            doomed = [
                w
                for w in self._all()
                if w.account_id == account_id and (user_id is None or w.user_id == user_id)
            ]
            for watch in doomed:
                self.blobs.delete(f"{_PREFIX}{watch.task_id}.json")
            return len(doomed)

    def trigger(self, identity: Identity, task_id: str | None, to_uri: str | None) -> Watch:
        with self._lock:
            return self._run(self.get(identity, task_id, to_uri))

    def run_due(self, now: float | None = None) -> int:
        """Queues the re-fetch of every active watch whose time has come; how many."""
        now = self.clock() if now is None else now
        count = 0
        with self._lock:
            for watch in self._all():
                if (
                    watch.is_active
                    and watch.next_execution_time is not None
                    and watch.next_execution_time <= now
                ):
                    self._run(watch)
                    count += 1
        return count

    def _run(self, watch: Watch) -> Watch:
        owner = Identity(watch.account_id, watch.user_id, watch.original_role)
        watch.last_task_id = self._remote().refetch(
            owner, watch.path, from_canonical(watch.to_uri), watch.options
        )
        now = self.clock()
        watch.last_execution_time = now
        watch.next_execution_time = now + watch.watch_interval * 60 if watch.is_active else None
        self._save(watch)
        return watch

    @contextmanager
    def _audited(
        self,
        identity: Identity,
        action: str,
        task_id: str | None,
        to_uri: str | None,
        detail: dict[str, Any],
    ) -> Iterator[Watch]:
        """Finds the watch a request names and runs the block as the audited change of it
        (a watch not found: the failed attempt is recorded)."""
        try:
            watch = self.get(identity, task_id, to_uri)
        except NotFound:
            with audited(self.audit, identity, action, to_uri or task_id or "", detail=detail):
                raise
        with audited(
            self.audit, identity, action, watch.to_uri, detail={**detail, "task_id": watch.task_id}
        ):
            yield watch

    @staticmethod
    def _visible(identity: Identity, watch: Watch) -> bool:
        return sees_user(identity, watch.account_id, watch.user_id)
