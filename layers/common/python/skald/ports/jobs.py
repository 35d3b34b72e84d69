"""Jobs: durable background work (semantic processing, memory extraction, auto-commit), the
queue that holds it, its dedup claims, counters and large payloads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Job:
    job_id: str
    queue: str
    kind: str
    payload: dict[str, Any]
    attempts: int  # deliveries so far, including this one
    dedup_key: str | None = None


@dataclass(frozen=True)
class Lease:
    job: Job
    receipt: str  # proves the lease; a stale receipt cannot ack or nack


@dataclass(frozen=True)
class QueueStats:
    pending: int  # waiting, including delayed retries
    inflight: int  # leased, not yet acked
    processed: int  # acked
    failed_attempts: int  # nacks
    dead: int  # dead-lettered


@dataclass(frozen=True)
class DeadLetter:
    job: Job
    error: str
    failed_at: float


@runtime_checkable
class JobQueue(Protocol):
    def enqueue(
        self,
        queue: str,
        kind: str,
        payload: dict[str, Any],
        *,
        dedup_key: str | None = None,
        delay_s: float = 0.0,
    ) -> str:
        """Returns the job id. A pending job with the same (queue, dedup_key) is not duplicated:
        its id is returned instead."""
        ...

    def lease(self, queue: str, *, max_jobs: int = 1, visibility_s: float = 60.0) -> list[Lease]:
        """Takes up to `max_jobs` visible jobs; they reappear after `visibility_s` unless acked."""
        ...

    def ack(self, lease: Lease) -> bool:
        """Done. False when the receipt is stale (the lease expired and the job moved on)."""
        ...

    def nack(self, lease: Lease, error: str) -> None:
        """Failed: retried with backoff, dead-lettered after the queue's max attempts."""
        ...

    def extend(self, lease: Lease, visibility_s: float) -> bool: ...

    def stats(self, queue: str) -> QueueStats: ...

    def depth(self, queue: str) -> int:
        """Jobs not done yet (waiting, delayed or in flight), cheaply. An approximation on
        SQS (its queue attributes). Back-pressure counts per account (AccountJobs)."""
        ...

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadLetter]: ...


@runtime_checkable
class AccountJobs(Protocol):
    """A queue that counts each account's jobs not done yet (waiting, delayed or running)
    over all its queues, cheaply: what per-account admission reads. A job's account is its
    payload's `account`; a job without one (a system sweep) counts for no account."""

    def depth_of(self, account_id: str) -> int: ...


@runtime_checkable
class AccountSettlement(Protocol):
    """A queue whose per-account counts a worker handed its jobs by an event source mapping
    (SQS -> Lambda) settles itself, as with SettleCounts: the mapping deletes the message, so
    ack() never runs. `mark` is the mark the queue put on the message when it counted the job
    (None: it was never counted, e.g. a schedule's message)."""

    def account_settled(self, account_id: str, mark: str | None) -> None: ...


@runtime_checkable
class AccountShares(Protocol):
    """A queue whose workers are handed jobs (SQS -> Lambda) and cap how many jobs of one
    account run at once on a queue: a slot per running job, held by `holder` (one worker
    invocation) until it is released or `hold_s` has passed (a crashed worker's slot
    expires)."""

    def take_slot(
        self, queue: str, account_id: str, holder: str, *, cap: int, hold_s: float
    ) -> bool:
        """True when `holder` now holds one of the account's `cap` slots on `queue` (or held
        it already); False when the others hold them all."""
        ...

    def release_slot(self, queue: str, account_id: str, holder: str) -> None: ...

    def defer(self, queue: str, record: dict[str, Any], delay_s: float) -> None:
        """Puts a handed job back for later without counting the delivery as an attempt: a
        copy of the message (a Lambda SQS event record), sent again after `delay_s`; the
        worker then reports the record done, so the mapping deletes the original."""
        ...


@runtime_checkable
class DedupClaims(Protocol):
    """A queue that holds a job's dedup claim until the job starts (SQS: a FIFO-less queue
    has no dedup of its own). lease() releases it for pulled jobs; a worker that is handed
    jobs (a Lambda event source mapping) calls mark_started itself."""

    def mark_started(self, job: Job) -> None: ...


@runtime_checkable
class TenantJobs(Protocol):
    """A queue that can drop the jobs of a removed account or user that are not running:
    waiting ones and dead letters (an SQS queue reaches its dead-letter queues only; its
    waiting messages are dropped by the workers as they arrive)."""

    def purge_tenant(
        self, account_id: str, user_id: str | None = None, *, limit: int = 1000
    ) -> int:
        """Removes up to `limit` such jobs (and their stored payloads); returns how many."""
        ...


@runtime_checkable
class SettleCounts(Protocol):
    """A queue whose counts of settled jobs are kept beside it (SQS: in DynamoDB). ack and
    nack count the jobs pulled by lease(); a worker handed its jobs by an event source mapping,
    which deletes or re-delivers each message itself, counts them with `count_settled` before
    the mapping does so: the count moves while the message is still in flight."""

    def count_settled(self, queue: str, outcome: str) -> None:
        """`outcome`: "processed" (done) or "failed_attempts" (failed, to retry or dead)."""
        ...


@runtime_checkable
class PayloadStore(Protocol):
    """A queue that sends large payloads by reference (SQS: over its message size they go to
    S3). A worker handed the raw message body resolves it and says when the job is done."""

    def open_payload(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """The payload itself (`payload` when it is not a reference); None when the stored
        one is gone."""
        ...

    def payload_done(self, payload: dict[str, Any]) -> None:
        """Removes a stored payload (best effort)."""
        ...
