"""The purge of a removed user or account: everything it owned, in every store, then its row.

Steps run in a fixed order, each idempotent (it removes what is still there), so a purge cut
short anywhere (a crash, kill -9) is finished by running it again: the steps already done find
nothing left. A purge short of time queues its continuation under the same task, naming the
step it reached (`payload["step"]`): every job moves the purge on by a batch at least. The task
shows the step under way (`stage`) and what each step removed so far (`result`).

What a user owns: their user space (files, memories, session trees and archives, recall
ledgers kept beside them), its index records, their sessions (with their idle timers), their
unused uploads, their watches, their tasks, their queued and dead-lettered jobs, their keys
(gone with the tombstone already). An account: all of that for every user, the shared
trees (`resources`, `agent`, ...) and its API Gateway key (AWS: out of its usage plan). Audit
records are kept for their retention: the trail of who removed what must outlive what was
removed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skald.domain.paths.uri import PUBLIC_SCOPES
from skald.ports import (
    BlobStore,
    JobQueue,
    Scheduler,
    SearchIndex,
    SessionStore,
    StateStore,
    TaskStatus,
    TenantJobs,
)
from skald.services.faults import Faults
from skald.services.sessions.service import timer_name
from skald.services.tasks import FINAL, TaskService

log = logging.getLogger("skald.purge")
BATCH = 1000
_ACTIVE = (TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.CANCELLING)
# Time kept back for handing on: the continuation is queued and the task updated before the
# job's own deadline.
RESERVE_S = 10.0


@dataclass
class PurgeStores:
    state: StateStore
    blobs: BlobStore
    index: SearchIndex
    sessions: SessionStore
    queue: JobQueue
    scheduler: Scheduler | None
    remove_watches: Callable[[str, str | None], int]
    remove_uploads: Callable[[str, str], int]
    # A removed account's API Gateway key (out of its usage plan); None: no edge (serve).
    remove_edge_key: Callable[[str], int] | None = None
    # A removed account's metered usage (its hourly cells and running totals): an account
    # created again under the id starts at zero. Export the usage for billing before removal.
    remove_usage: Callable[[str], int] | None = None


class OutOfTime(Exception):  # noqa: N818 - not an error: the purge goes on in another job
    """The purge stopped between two batches to hand on the rest."""


class TenantPurge:
    def __init__(
        self,
        stores: PurgeStores,
        tasks: TaskService,
        *,
        faults: Faults | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.s = stores
        self.tasks = tasks
        self.faults = faults or Faults()
        self.monotonic = monotonic
        self._moved = False  # this job removed something (or found nothing) already

    def run(self, payload: dict[str, Any], deadline: float | None) -> bool:
        """Runs the purge of `payload` (purge_payload's shape). True when it finished (or
        had nothing to do: another purge owns the tombstone, or it is gone); False when it
        ran out of time: `payload["step"]` then names where the rest begins, and the caller
        queues it."""
        account, user, task_id = payload["account"], payload.get("user"), payload["task_id"]
        task = self.tasks.store.get_task(task_id)
        if task is not None and task.status in FINAL:
            return True  # a duplicate delivery of a purge that ended
        if not self._owns_tombstone(account, user, task_id):
            if task is not None:
                self.tasks.complete(task_id, {"deleted": False, "stale": True})
            return True
        counts: dict[str, int] = dict((task.result or {}) if task is not None else {})
        self.tasks.start(task_id, "purging")
        first = int(payload.get("step") or 0)
        self._moved = False
        steps = self._steps(account, user)
        for index in range(first, len(steps)):
            step, work = steps[index]
            self.tasks.store.update_task(task_id, stage=f"purging {step}", result=dict(counts))
            try:
                counts[step] = counts.get(step, 0) + self._drain(work, deadline, counts, step)
            except OutOfTime:
                payload["step"] = index
                self.tasks.store.update_task(
                    task_id, stage=f"purging {step} (continues)", result=dict(counts)
                )
                return False
            self.faults.hit(f"purge.after_{step}")
        finished = (
            self.s.state.finish_account_deletion(account, task_id)
            if user is None
            else self.s.state.finish_user_deletion(account, user, task_id)
        )
        self.tasks.complete(task_id, {"deleted": finished, "removed": counts})
        log.info("purged %s: %s", account if user is None else f"{account}/{user}", counts)
        return True

    def _owns_tombstone(self, account: str, user: str | None, task_id: str) -> bool:
        row = (
            self.s.state.get_account(account)
            if user is None
            else self.s.state.get_user(account, user)
        )
        return row is not None and row.deletion is not None and row.deletion.task_id == task_id

    def _drain(
        self, work: Callable[[], int], deadline: float | None, counts: dict[str, int], step: str
    ) -> int:
        """Calls `work` (one bounded batch) until it removes nothing. Out of time, what it
        removed is added to `counts` before OutOfTime; the first batch of a job always runs."""
        total = 0
        while True:
            if self._moved and deadline is not None and self.monotonic() > deadline - RESERVE_S:
                counts[step] = counts.get(step, 0) + total
                raise OutOfTime
            done = work()
            self._moved = True
            total += done
            if done == 0:
                return total

    def _steps(self, account: str, user: str | None) -> list[tuple[str, Callable[[], int]]]:
        s = self.s
        once = _Once
        steps: list[tuple[str, Callable[[], int]]] = [
            ("watches", once(lambda: s.remove_watches(account, user))),
            ("tasks_cancelled", once(lambda: self._cancel_tasks(account, user))),
            ("sessions", once(lambda: self._sessions(account, user))),
            ("index_records", once(lambda: self._index(account, user))),
        ]
        if user is not None:
            steps.append(("uploads", once(lambda: s.remove_uploads(account, user))))
        else:
            if s.remove_edge_key is not None:
                remove_key = s.remove_edge_key
                steps.append(("edge_key", once(lambda: remove_key(account))))
        prefix = f"{account}/" if user is None else f"{account}/user/{user}/"
        steps.append(("blobs", lambda: s.blobs.purge_prefix(prefix, limit=BATCH)))
        if isinstance(s.queue, TenantJobs):
            queue = s.queue
            steps.append(("jobs", lambda: queue.purge_tenant(account, user, limit=BATCH)))
        steps.append(("tasks", lambda: s.state.delete_tasks(account, user_id=user, limit=BATCH)))
        if user is None and s.remove_usage is not None:
            remove_usage = s.remove_usage  # last: nothing after it files usage for the account
            steps.append(("usage", once(lambda: remove_usage(account))))
        return steps

    def _cancel_tasks(self, account: str, user: str | None) -> int:
        count = 0
        for status in _ACTIVE:
            cursor: str | None = None
            while True:
                page = self.s.state.list_tasks(
                    account,
                    user_id=user,
                    status=status,
                    include_internal=True,
                    limit=200,
                    cursor=cursor,
                )
                for task in page.items:
                    self.s.state.update_task(
                        task.task_id, status=TaskStatus.CANCELLED, error="its owner was deleted"
                    )
                    count += 1
                cursor = page.next_cursor
                if cursor is None:
                    break
        return count

    def _sessions(self, account: str, user: str | None) -> int:
        users = (
            [user] if user is not None else [u.user_id for u in self.s.state.list_users(account)]
        )
        count = 0
        for uid in users:
            for rec in self.s.sessions.list_sessions(account, uid):
                if self.s.scheduler is not None:
                    self.s.scheduler.cancel(timer_name(account, uid, rec.session_id))
                count += self.s.sessions.delete_session(account, uid, rec.session_id)
        if user is None:  # sessions of users without a row (made in dev mode)
            count += self.s.sessions.delete_account_sessions(account)
        return count

    def _index(self, account: str, user: str | None) -> int:
        if user is not None:
            return self.s.index.delete_prefix(account, f"viking://user/{user}")
        return sum(
            self.s.index.delete_prefix(account, f"viking://{scope}")
            for scope in sorted(PUBLIC_SCOPES)
        )


class _Once:
    """A step that removes everything in one call: run once, then report nothing left."""

    def __init__(self, work: Callable[[], int]) -> None:
        self.work = work
        self.done = False

    def __call__(self) -> int:
        if self.done:
            return 0
        self.done = True
        return self.work()
