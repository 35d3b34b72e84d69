"""JobWorkerPool over every JobQueue adapter."""

from __future__ import annotations

import threading
import time

import pytest

from skald.adapters.local.workers import JobWorkerPool
from skald.ports import Job, JobQueue
from tests.conformance.conftest import QueueBackend

Q = "semantic"


@pytest.fixture
def fast_queue(queue_backend: QueueBackend) -> JobQueue:
    tick = queue_backend.tick_s
    return queue_backend.open(max_attempts=3, backoff_base_s=tick / 10, backoff_max_s=tick / 5)


def test_runs_jobs_and_acks(fast_queue: JobQueue) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def handle(job: Job) -> None:
        with lock:
            seen.append(job.payload["i"])

    with JobWorkerPool(
        fast_queue, {"k": handle}, queues=[Q], threads=3, poll_interval_s=0.01
    ) as pool:
        for i in range(20):
            fast_queue.enqueue(Q, "k", {"i": i})
        assert pool.wait_idle(10)
    assert sorted(seen) == list(range(20))
    st = fast_queue.stats(Q)
    assert (st.pending, st.inflight, st.processed, st.failed_attempts, st.dead) == (0, 0, 20, 0, 0)


def test_serves_several_queues(fast_queue: JobQueue) -> None:
    seen: list[str] = []
    pool = JobWorkerPool(
        fast_queue,
        {"k": lambda job: seen.append(job.queue)},
        queues=["a", "b"],
        threads=1,
        poll_interval_s=0.01,
    )
    fast_queue.enqueue("a", "k", {})
    fast_queue.enqueue("b", "k", {})
    fast_queue.enqueue("c", "k", {})  # not one of the pool's queues
    pool.start()
    try:
        assert pool.wait_idle(10)
    finally:
        pool.stop()
    assert sorted(seen) == ["a", "b"]
    assert fast_queue.stats("c").pending == 1


def test_retries_until_success(fast_queue: JobQueue) -> None:
    calls: list[int] = []

    def flaky(job: Job) -> None:
        calls.append(job.attempts)
        if job.attempts < 3:
            raise RuntimeError(f"transient {job.attempts}")

    with JobWorkerPool(fast_queue, {"k": flaky}, queues=[Q], poll_interval_s=0.01) as pool:
        fast_queue.enqueue(Q, "k", {})
        assert pool.wait_idle(10)
    assert calls == [1, 2, 3]
    st = fast_queue.stats(Q)
    assert (st.processed, st.failed_attempts, st.dead) == (1, 2, 0)


def test_dead_letter_invokes_on_dead(fast_queue: JobQueue) -> None:
    dead: list[tuple[str, str]] = []

    def broken(job: Job) -> None:
        raise ValueError("cannot parse resource")

    pool = JobWorkerPool(fast_queue, {"k": broken}, queues=[Q], poll_interval_s=0.01)
    pool.on_dead(lambda job, error: dead.append((job.job_id, error)))
    job_id = fast_queue.enqueue(Q, "k", {"task_id": "t1"})
    with pool:
        assert pool.wait_idle(10)
    assert dead == [(job_id, "ValueError: cannot parse resource")]
    (letter,) = fast_queue.dead_letters(Q)
    assert letter.job.job_id == job_id
    assert letter.error == "ValueError: cannot parse resource"
    st = fast_queue.stats(Q)
    assert (st.processed, st.failed_attempts, st.dead) == (0, 3, 1)


def test_unknown_kind_is_nacked(fast_queue: JobQueue) -> None:
    dead: list[str] = []
    pool = JobWorkerPool(fast_queue, {}, queues=[Q], poll_interval_s=0.01)
    pool.on_dead(lambda job, error: dead.append(error))
    fast_queue.enqueue(Q, "mystery", {})
    with pool:
        assert pool.wait_idle(10)
    assert len(dead) == 1 and "mystery" in dead[0]
    assert fast_queue.stats(Q).dead == 1


def test_failing_dead_callback_does_not_kill_the_pool(fast_queue: JobQueue) -> None:
    ok: list[str] = []

    def explode(job: Job, error: str) -> None:
        raise RuntimeError("callback bug")

    pool = JobWorkerPool(
        fast_queue,
        {"ok": lambda job: ok.append(job.job_id)},
        queues=[Q],
        threads=1,
        poll_interval_s=0.01,
    )
    pool.on_dead(explode)
    fast_queue.enqueue(Q, "bad", {})
    with pool:
        assert pool.wait_idle(10)
        job_id = fast_queue.enqueue(Q, "ok", {})
        assert pool.wait_idle(10)
    assert ok == [job_id]


def test_wait_idle_times_out_while_busy(fast_queue: JobQueue) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow(job: Job) -> None:
        started.set()
        release.wait(10)

    with JobWorkerPool(fast_queue, {"k": slow}, queues=[Q], poll_interval_s=0.01) as pool:
        fast_queue.enqueue(Q, "k", {})
        assert started.wait(5)
        t0 = time.monotonic()
        assert pool.wait_idle(0.2) is False
        assert time.monotonic() - t0 >= 0.2
        release.set()
        assert pool.wait_idle(10) is True


def test_wait_idle_waits_for_follow_up_jobs(fast_queue: JobQueue) -> None:
    done: list[str] = []

    def parent(job: Job) -> None:
        fast_queue.enqueue(Q, "child", {})  # enqueued before the parent is acked
        done.append("parent")

    def child(job: Job) -> None:
        time.sleep(0.05)
        done.append("child")

    with JobWorkerPool(
        fast_queue, {"parent": parent, "child": child}, queues=[Q], poll_interval_s=0.01
    ) as pool:
        fast_queue.enqueue(Q, "parent", {})
        assert pool.wait_idle(10)
        assert done == ["parent", "child"]


def test_stop_lets_the_running_job_finish(fast_queue: JobQueue) -> None:
    started = threading.Event()
    finished: list[bool] = []

    def slow(job: Job) -> None:
        started.set()
        time.sleep(0.2)
        finished.append(True)

    pool = JobWorkerPool(fast_queue, {"k": slow}, queues=[Q], threads=1, poll_interval_s=0.01)
    pool.start()
    fast_queue.enqueue(Q, "k", {})
    assert started.wait(5)
    pool.stop()
    assert finished == [True]
    assert not pool.running
    st = fast_queue.stats(Q)
    assert (st.processed, st.inflight) == (1, 0)
    # jobs enqueued after stop stay queued
    fast_queue.enqueue(Q, "k", {})
    time.sleep(0.05)
    assert fast_queue.stats(Q).pending == 1


def test_long_job_is_not_delivered_twice(queue_backend: QueueBackend) -> None:
    tick = queue_backend.tick_s
    q = queue_backend.open(max_attempts=3, backoff_base_s=tick / 10, backoff_max_s=tick / 5)
    calls: list[int] = []

    def long(job: Job) -> None:
        calls.append(job.attempts)
        time.sleep(12 * tick)  # well past the visibility timeout: the heartbeat extends it

    # Beats every visibility/3: a lease lapses only if two beats in a row are late. With a
    # 0.3 s lease (the local tick) one slow commit on a busy CI disk once made that happen.
    with JobWorkerPool(
        q, {"k": long}, queues=[Q], threads=2, visibility_s=5 * tick, poll_interval_s=0.01
    ) as pool:
        q.enqueue(Q, "k", {})
        assert pool.wait_idle(60 * tick)
    assert calls == [1]
    st = q.stats(Q)
    assert (st.processed, st.failed_attempts) == (1, 0)


def test_start_twice_is_an_error(fast_queue: JobQueue) -> None:
    pool = JobWorkerPool(fast_queue, {}, queues=[Q], poll_interval_s=0.01)
    pool.start()
    try:
        with pytest.raises(RuntimeError):
            pool.start()
    finally:
        pool.stop()
    pool.start()  # restartable after a stop
    pool.stop()


def test_batch_handler_takes_waiting_jobs_together(fast_queue: JobQueue) -> None:
    batches: list[list[int]] = []
    singles: list[int] = []

    def batch(jobs: list[Job]) -> list[str | None]:
        batches.append([j.payload["i"] for j in jobs])
        return [None] * len(jobs)

    for i in range(6):
        fast_queue.enqueue(Q, "k", {"i": i})  # all waiting before the pool starts
    pool = JobWorkerPool(
        fast_queue,
        {"k": lambda job: singles.append(job.payload["i"])},
        queues=[Q],
        threads=1,
        poll_interval_s=0.01,
        batch_handlers={"k": batch},
        batch_sizes={Q: 4},
    )
    with pool:
        assert pool.wait_idle(10)
    assert sorted([*(i for b in batches for i in b), *singles]) == list(range(6))
    assert max(len(b) for b in batches) == 4  # leased together, at most the batch size
    assert fast_queue.stats(Q).processed == 6


def test_batch_outcomes_settle_each_job_on_its_own(fast_queue: JobQueue) -> None:
    attempts: dict[int, int] = {}
    dead: list[tuple[int, str]] = []

    def batch(jobs: list[Job]) -> list[str | None]:
        out: list[str | None] = []
        for j in jobs:
            attempts[j.payload["i"]] = j.attempts
            out.append("poison" if j.payload["i"] == 1 else None)
        return out

    for i in range(3):
        fast_queue.enqueue(Q, "k", {"i": i})
    pool = JobWorkerPool(
        fast_queue,
        {"k": lambda job: None},
        queues=[Q],
        threads=1,
        poll_interval_s=0.01,
        batch_handlers={"k": batch},
        batch_sizes={Q: 8},
    )
    pool.on_dead(lambda job, error: dead.append((job.payload["i"], error)))
    with pool:
        assert pool.wait_idle(10)
    st = fast_queue.stats(Q)
    assert (st.processed, st.dead) == (2, 1)
    assert dead == [(1, "poison")]
    assert attempts[0] == 1 and attempts[2] == 1 and attempts[1] == 3  # only 1 was retried


def test_a_raising_batch_handler_fails_every_job_of_the_batch(fast_queue: JobQueue) -> None:
    calls: list[int] = []

    def batch(jobs: list[Job]) -> list[str | None]:
        calls.append(len(jobs))
        if len(calls) == 1:
            raise RuntimeError("store unavailable")
        return [None] * len(jobs)

    for i in range(2):
        fast_queue.enqueue(Q, "k", {"i": i})
    pool = JobWorkerPool(
        fast_queue,
        {"k": lambda job: None},
        queues=[Q],
        threads=1,
        poll_interval_s=0.01,
        batch_handlers={"k": batch},
        batch_sizes={Q: 8},
    )
    with pool:
        assert pool.wait_idle(10)
    st = fast_queue.stats(Q)
    assert (st.processed, st.failed_attempts, st.dead) == (2, 2, 0)


def test_batch_sizes_must_be_positive(fast_queue: JobQueue) -> None:
    with pytest.raises(ValueError):
        JobWorkerPool(fast_queue, {}, queues=[Q], batch_sizes={Q: 0})
