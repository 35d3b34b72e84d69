"""JobWorkerPool.wait_idle reads approximate queue counts: one reading that misses a delayed
retry (SQS can count a message whose delay ends mid-read as neither delayed nor visible) must
not end the wait while the retry is still to run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from skald.adapters.local.jobqueue import SqliteJobQueue
from skald.adapters.local.workers import JobWorkerPool
from skald.ports import Job, QueueStats

Q = "q"


class OneBlindReading:
    """A queue whose stats() misses its pending jobs once, after the first failure."""

    def __init__(self, inner: SqliteJobQueue, failures: list[str]) -> None:
        self._inner = inner
        self._failures = failures
        self.blind_readings = 0

    def stats(self, queue: str) -> QueueStats:
        real = self._inner.stats(queue)
        if self._failures and not self.blind_readings and real.pending:
            self.blind_readings += 1
            return dataclasses.replace(real, pending=0, inflight=0)
        return real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_one_reading_that_misses_a_delayed_retry_does_not_end_the_wait(tmp_path: Path) -> None:
    inner = SqliteJobQueue(tmp_path / "q.db", max_attempts=3, backoff_base_s=0.3,
                           backoff_max_s=0.3)
    runs: list[str] = []
    failures: list[str] = []

    def flaky(job: Job) -> None:
        runs.append(job.job_id)
        if len(runs) == 1:
            failures.append(job.job_id)
            raise RuntimeError("first attempt fails")

    queue = OneBlindReading(inner, failures)
    try:
        inner.enqueue(Q, "k", {})
        with JobWorkerPool(queue, {"k": flaky}, queues=[Q],  # type: ignore[arg-type]
                           poll_interval_s=0.01) as pool:
            assert pool.wait_idle(10)
            assert queue.blind_readings == 1  # the wait did see the false idle reading
            assert len(runs) == 2  # and still waited for the retry
    finally:
        inner.close()
