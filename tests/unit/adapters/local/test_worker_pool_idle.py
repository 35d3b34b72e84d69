"""An idle JobWorkerPool: wait_idle reads approximate queue counts (one reading that misses a
delayed retry, as SQS can count a message whose delay ends mid-read as neither delayed nor
visible, must not end the wait while the retry is still to run); idle threads poll less and
less, and wake at once for an enqueue or stop()."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
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
    inner = SqliteJobQueue(tmp_path / "q.db", max_attempts=3, backoff_base_s=0.3, backoff_max_s=0.3)
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
        with JobWorkerPool(queue, {"k": flaky}, queues=[Q], poll_interval_s=0.01) as pool:
            assert pool.wait_idle(10)
            assert queue.blind_readings == 1  # the wait did see the false idle reading
            assert len(runs) == 2  # and still waited for the retry
    finally:
        inner.close()


class CountedLeases:
    """A queue that counts the lease calls made on it."""

    def __init__(self, inner: SqliteJobQueue) -> None:
        self._inner = inner
        self.leases = 0

    def lease(self, queue: str, **kw: Any) -> Any:
        self.leases += 1
        return self._inner.lease(queue, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_an_idle_pool_polls_less_and_less(tmp_path: Path) -> None:
    inner = SqliteJobQueue(tmp_path / "q.db")
    queue = CountedLeases(inner)
    try:
        with JobWorkerPool(
            queue,
            {"k": lambda job: None},
            queues=[Q],
            threads=1,
            poll_interval_s=0.01,
            idle_poll_max_s=0.2,
        ):
            time.sleep(1.0)  # 0.01 + 0.02 + ... reaches the 0.2 s cap within 0.4 s
            before = queue.leases
            time.sleep(1.0)
            idle_passes = queue.leases - before
    finally:
        inner.close()
    assert 3 <= idle_passes <= 8  # every 0.2 s; polling every 0.01 s would make ~100


def test_an_enqueue_wakes_an_idle_pool_at_once(tmp_path: Path) -> None:
    queue = SqliteJobQueue(tmp_path / "q.db")
    done = threading.Event()
    try:
        with JobWorkerPool(
            queue,
            {"k": lambda job: done.set()},
            queues=[Q],
            threads=2,
            poll_interval_s=0.01,
            idle_poll_max_s=10,
        ) as pool:
            time.sleep(3.0)  # each thread now sleeps ~2.6 s between its polls
            started = time.monotonic()
            queue.enqueue(Q, "k", {})
            assert done.wait(10)
            took = time.monotonic() - started
            stopping = time.monotonic()
            pool.stop()
            stopped_in = time.monotonic() - stopping
    finally:
        queue.close()
    assert took < 0.5, took  # without the wake: up to the ~2.6 s of the sleep under way
    assert stopped_in < 1.0, stopped_in  # stop() wakes idle threads too
