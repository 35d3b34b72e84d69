"""Scheduling semantic processing (parse, summarise, embed, index, refresh sidecars) as durable
jobs, each tracked by a task the client can poll or wait for."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from skald import catalog
from skald.catalog import JOB_SEMANTIC as JOB_SEMANTIC
from skald.catalog import QUEUE_AUTOCOMMIT as QUEUE_AUTOCOMMIT
from skald.catalog import QUEUE_MEMORY as QUEUE_MEMORY
from skald.catalog import QUEUE_SEMANTIC as QUEUE_SEMANTIC
from skald.domain.access.identity import Identity
from skald.domain.access.visibility import sees_user
from skald.domain.errors import DeadlineExceeded, InvalidArgument
from skald.domain.ops.quiescence import settle_mark, wait_quiet
from skald.ports import JobQueue, Task
from skald.services.fs.entries import FsChange
from skald.services.tasks import FINAL, TaskService

log = logging.getLogger("skald.processing")

QUEUES = tuple(q.name for q in catalog.QUEUES)


@dataclass(frozen=True, slots=True)
class FailedJob:
    """A dead-lettered job, listed to those who may see it: its error names URIs."""

    job_id: str
    kind: str
    error: str


@dataclass(frozen=True, slots=True)
class QueueCounters:
    """One queue's counters (global: they name nothing) and the caller's failed jobs."""

    processed: int
    requeue_count: int
    error_count: int
    pending: int
    in_progress: int
    errors: list[FailedJob]


# Every queue's counters by its wire label (OpenViking's observer names).
QueueStatus = dict[str, QueueCounters]
# Each queue's name in queue status: a wire name (OpenViking's observer labels)
QUEUE_LABELS = {q.name: q.wire_label for q in catalog.QUEUES}
PROCESSING_MODES = ("semantic_and_vectors", "vectors_only")


def check_processing_mode(mode: str) -> str:
    if mode not in PROCESSING_MODES:
        raise InvalidArgument(f"Invalid processing_mode '{mode}': {' or '.join(PROCESSING_MODES)}")
    return mode


def identity_payload(identity: Identity) -> dict[str, Any]:
    """Whose job it is. The user's generation lets a worker drop the job if the user is
    removed before it runs (services/tenancy/gate.py)."""
    out = {"account": identity.account_id, "user": identity.user_id, "role": identity.role}
    if identity.generation is not None:
        out["generation"] = identity.generation
    return out


def identity_from_payload(payload: dict[str, Any]) -> Identity:
    generation = payload.get("generation")
    return Identity(
        payload["account"],
        payload["user"],
        payload.get("role", "user"),
        generation=generation if isinstance(generation, str) else None,
    )


class ProcessingScheduler:
    """`forget(account, uris)`: drops the index records of removed paths and hides the
    summaries above them (services/ingest/forgetting.py), returning how many records went; None
    in an entry point that may not delete index records, where the queued job alone removes
    them."""

    def __init__(
        self,
        queue: JobQueue,
        tasks: TaskService,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        forget: Callable[[str, list[str]], int] | None = None,
    ) -> None:
        self.queue = queue
        self.tasks = tasks
        self.clock = clock
        self.sleep = sleep
        self.forget = forget

    def submit(
        self,
        identity: Identity,
        change: FsChange,
        *,
        task_type: str,
        resource_id: str | None = None,
        internal: bool = False,
        forget: bool = True,
    ) -> Task:
        """Queues the processing of `change`. Paths it removed leave the index first, so a
        search after the answer no longer finds them (`forget=False`: a reindex, whose paths
        stay and are only rebuilt); the task's meta says how many records went
        (`removed_records`). Forgotten before the job is queued: a job done first would see
        its refreshed summaries hidden again."""
        meta: dict[str, Any] = {
            "files": len(change.written),
            "removed": len(change.removed),
            "processing_mode": change.processing_mode,
        }
        if forget and change.removed and self.forget is not None:
            try:
                meta["removed_records"] = self.forget(identity.account_id, change.removed)
            except Exception:
                # The paths are gone already: the job still removes their records (as when
                # nothing forgets here), and the answer says they are only queued.
                log.exception(
                    "the index records of %d removed path(s) are left to their job",
                    len(change.removed),
                )
        task = self.tasks.create(
            identity, task_type, resource_id=resource_id, internal=internal, meta=meta
        )
        payload = {"task_id": task.task_id, **identity_payload(identity), **asdict(change)}
        try:
            self.queue.enqueue(QUEUE_SEMANTIC, JOB_SEMANTIC, payload)
        except Exception as exc:
            # No job will ever end the task (e.g. a payload the queue cannot carry): say so.
            self.tasks.fail(task.task_id, f"its processing could not be queued: {exc}")
            raise
        return task

    def follow(self, identity: Identity, task_id: str, change: FsChange) -> None:
        """Queues the processing of `change` under an existing task (a fetched source: the
        task the client got when it asked), which that processing completes."""
        payload = {"task_id": task_id, **identity_payload(identity), **asdict(change)}
        self.queue.enqueue(QUEUE_SEMANTIC, JOB_SEMANTIC, payload)

    def wait_task(self, identity: Identity, task_id: str, timeout_s: float) -> Task:
        deadline = self.clock() + timeout_s
        delay = 0.005
        while True:
            task = self.tasks.get(identity, task_id)
            if task.status in FINAL:
                return task
            if self.clock() >= deadline:
                raise DeadlineExceeded(
                    f"Task {task_id} did not finish within {timeout_s:.0f}s", {"task_id": task_id}
                )
            self.sleep(delay)
            delay = min(delay * 2, 0.1)

    def queue_status(self, identity: Identity | None = None) -> QueueStatus:
        """Counters of every queue and its latest dead-lettered jobs. With an `identity`, only
        the dead letters of jobs it may see are listed: their errors name URIs."""
        out: QueueStatus = {}
        for q in catalog.QUEUES:
            name = q.name
            stats = self.queue.stats(name)
            errors = [
                FailedJob(d.job.job_id, d.job.kind, d.error)
                for d in self.queue.dead_letters(name, limit=20)
                if identity is None
                or sees_user(
                    identity,
                    str(d.job.payload.get("account", "")),
                    str(d.job.payload.get("user", "")),
                )
            ]
            out[q.wire_label] = QueueCounters(
                processed=stats.processed,
                requeue_count=stats.failed_attempts,
                error_count=stats.dead,
                pending=stats.pending,
                in_progress=stats.inflight,
                errors=errors,
            )
        return out


def wait_idle(
    queue: JobQueue,
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    busy_elsewhere: Callable[[], bool] | None = None,
) -> bool:
    """Blocks until every queue has nothing pending or in flight and `busy_elsewhere` (work
    that has not reached a queue yet, e.g. a half-done commit) says no; False on timeout.
    Idle means idle at one instant (`domain.ops.quiescence`), not each queue at its own."""

    def reading() -> tuple[int, ...] | None:
        mark = settle_mark(queue.stats(q.name) for q in catalog.QUEUES)
        if mark is None or busy_elsewhere is not None and busy_elsewhere():
            return None
        return mark

    return wait_quiet(reading, timeout_s, clock=clock, sleep=sleep)


def check_wait_timeout(timeout_s: float) -> float:
    if not math.isfinite(timeout_s) or timeout_s < 0:
        raise InvalidArgument(f"timeout must be a number of seconds >= 0, got {timeout_s}")
    return timeout_s


def drained(idle: bool, status: QueueStatus, timeout_s: float) -> QueueStatus:
    """The queue counters of a wait that saw every queue drain (`idle`). A wait that ran out
    of time is an error, never an answer: a client that took it for done would search for what
    is not indexed yet (OpenViking's wait has no limit; this one answers within `timeout_s`)."""
    if idle:
        return status
    pending = sum(v.pending for v in status.values())
    running = sum(v.in_progress for v in status.values())
    raise DeadlineExceeded(
        f"processing did not finish within {timeout_s:g}s ({pending} jobs pending, "
        f"{running} in progress); it goes on: wait again to see it done",
        {"timeout_s": timeout_s, "pending": pending, "in_progress": running},
    )
