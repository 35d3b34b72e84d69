"""A wait for idle queues reads them one after another: a job that queues its follow-up on a
queue already read, and is acked before its own queue is read, must not end the wait while the
follow-up is still to run (a fetched page's task was seen `running` after such a wait)."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
from skald.adapters.local.workers import JobWorkerPool
from skald.catalog import JOB_FETCH, JOB_SEMANTIC, QUEUE_FETCH, QUEUE_SEMANTIC
from skald.domain.ops.quiescence import wait_quiet
from skald.ports import QueueStats
from skald.services.ingest.processing import wait_idle


class HandOverWhileRead:
    """The leased fetch job queues its semantic follow-up and is acked the first time the
    fetch queue's counts are read, i.e. after the semantic queue was read."""

    def __init__(self, inner: SqliteJobQueue) -> None:
        self._inner = inner
        inner.enqueue(QUEUE_FETCH, JOB_FETCH, {"url": "http://example.test/hop"})
        [self._lease] = inner.lease(QUEUE_FETCH, visibility_s=60)
        self.handed_over = False

    def stats(self, queue: str) -> QueueStats:
        if queue == QUEUE_FETCH and not self.handed_over:
            self._inner.enqueue(QUEUE_SEMANTIC, JOB_SEMANTIC, {"task_id": "t"})
            assert self._inner.ack(self._lease)
            self.handed_over = True
        return self._inner.stats(queue)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture()
def inner(tmp_path: Path) -> Any:
    q = SqliteJobQueue(tmp_path / "q.db")
    yield q
    q.close()


def _run_follow_up(q: SqliteJobQueue) -> None:
    [lease] = q.lease(QUEUE_SEMANTIC, visibility_s=60)
    assert lease.job.payload == {"task_id": "t"}
    assert q.ack(lease)


def test_the_servers_wait_does_not_end_while_a_handed_over_job_is_pending(
    inner: SqliteJobQueue,
) -> None:
    queue = HandOverWhileRead(inner)
    assert wait_idle(queue, 0.3) is False
    assert queue.handed_over and inner.stats(QUEUE_SEMANTIC).pending == 1
    _run_follow_up(inner)
    assert wait_idle(queue, 5) is True


def test_a_pools_wait_does_not_end_while_a_handed_over_job_is_pending(
    inner: SqliteJobQueue,
) -> None:
    queue = HandOverWhileRead(inner)
    pool = JobWorkerPool(queue, {}, queues=[QUEUE_SEMANTIC, QUEUE_FETCH], poll_interval_s=0.01)
    assert pool.wait_idle(0.3) is False
    assert queue.handed_over and inner.stats(QUEUE_SEMANTIC).pending == 1
    _run_follow_up(inner)
    assert pool.wait_idle(5) is True


class Script:
    def __init__(self, readings: list[Hashable | None]) -> None:
        self.readings = list(readings)
        self.calls = 0

    def __call__(self) -> Hashable | None:
        self.calls += 1
        return self.readings.pop(0)  # IndexError: read past the script


def _wait(script: Script, timeout_s: float) -> bool:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    return wait_quiet(script, timeout_s, clock=lambda: now[0], sleep=sleep)


def test_two_quiet_readings_with_the_same_mark_end_the_wait() -> None:
    script = Script([None, (1, 0), (1, 0)])
    assert _wait(script, 10) is True and script.calls == 3


def test_a_job_settled_between_two_quiet_readings_asks_for_another() -> None:
    script = Script([(1, 0), (2, 0), (2, 0)])
    assert _wait(script, 10) is True and script.calls == 3


def test_a_busy_reading_between_quiet_ones_starts_over() -> None:
    script = Script([(1, 0), None, (1, 0), (1, 0)])
    assert _wait(script, 10) is True and script.calls == 4


def test_a_wait_of_zero_on_idle_queues_confirms_and_answers_true() -> None:
    script = Script([(0,), (0,)])
    assert _wait(script, 0) is True


def test_a_wait_of_zero_on_busy_queues_answers_false_after_one_reading() -> None:
    script = Script([None])
    assert _wait(script, 0) is False and script.calls == 1


def test_quiet_readings_that_keep_changing_end_at_the_deadline() -> None:
    script = Script([(i,) for i in range(100)])
    assert _wait(script, 1) is False
