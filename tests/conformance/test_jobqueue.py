"""JobQueue conformance: every adapter, through the port only (local specifics at the end).

Durations are expressed in the backend's tick (QueueBackend.tick_s), so a backend with coarse
timers (SQS: whole seconds) runs the same suite, only slower.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
from skald.ports import AccountJobs, JobQueue, Lease, QueueStats
from tests.conformance.conftest import QueueBackend

T = TypeVar("T")
Q = "semantic"


def eventually(fn: Callable[[], T], timeout_s: float, interval_s: float = 0.01) -> T:
    """Polls until fn() is truthy (then returns it) or fails after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


def stats_tuple(st: QueueStats) -> tuple[int, int, int, int, int]:
    return (st.pending, st.inflight, st.processed, st.failed_attempts, st.dead)


def test_implements_port(job_queue: JobQueue) -> None:
    assert isinstance(job_queue, JobQueue)


# --------------------------------------------------------------------------------------------
# enqueue, lease, ack


def test_enqueue_lease_ack(job_queue: JobQueue) -> None:
    payload = {"uri": "viking://resources/日本", "n": [1, {"deep": None}], "ok": True}
    job_id = job_queue.enqueue(Q, "summarise", payload)
    assert isinstance(job_id, str) and job_id
    assert stats_tuple(job_queue.stats(Q)) == (1, 0, 0, 0, 0)
    leases = job_queue.lease(Q, visibility_s=30)
    assert len(leases) == 1
    lease = leases[0]
    assert lease.receipt
    job = lease.job
    assert (job.job_id, job.queue, job.kind, job.payload, job.attempts, job.dedup_key) == (
        job_id,
        Q,
        "summarise",
        payload,
        1,
        None,
    )
    assert stats_tuple(job_queue.stats(Q)) == (0, 1, 0, 0, 0)
    assert job_queue.lease(Q) == []  # nothing else visible
    assert job_queue.ack(lease) is True
    assert stats_tuple(job_queue.stats(Q)) == (0, 0, 1, 0, 0)
    assert job_queue.ack(lease) is False  # already done
    assert job_queue.lease(Q) == []


def test_empty_and_unknown_queues(job_queue: JobQueue) -> None:
    assert job_queue.lease("nothing-here") == []
    assert stats_tuple(job_queue.stats("nothing-here")) == (0, 0, 0, 0, 0)
    assert job_queue.dead_letters("nothing-here") == []


def test_fifo_and_max_jobs(job_queue: JobQueue) -> None:
    ids = [job_queue.enqueue(Q, "k", {"i": i}) for i in range(5)]
    first = job_queue.lease(Q, max_jobs=3)
    assert [lease.job.job_id for lease in first] == ids[:3]
    assert len({lease.receipt for lease in first}) == 3
    rest = job_queue.lease(Q, max_jobs=10)
    assert [lease.job.job_id for lease in rest] == ids[3:]
    for lease in first + rest:
        assert job_queue.ack(lease)
    assert job_queue.stats(Q).processed == 5


def test_queues_are_isolated(job_queue: JobQueue) -> None:
    a = job_queue.enqueue("a", "k", {})
    b = job_queue.enqueue("b", "k", {})
    leased_b = job_queue.lease("b")
    assert [lease.job.job_id for lease in leased_b] == [b]
    assert job_queue.stats("a").pending == 1
    assert [lease.job.job_id for lease in job_queue.lease("a")] == [a]
    job_queue.ack(leased_b[0])
    assert job_queue.stats("b").processed == 1
    assert job_queue.stats("a").processed == 0


def test_depth_counts_jobs_not_done(queue_backend: QueueBackend) -> None:
    q = queue_backend.open()
    assert q.depth(Q) == 0 and q.depth("nothing-here") == 0
    q.enqueue(Q, "k", {"i": 1})
    q.enqueue(Q, "k", {"i": 2}, delay_s=30 * queue_backend.tick_s)
    q.enqueue("a", "k", {})
    assert q.depth(Q) == 2  # waiting and delayed; other queues apart
    leases = q.lease(Q)
    assert q.depth(Q) == 2  # in flight still counts
    assert q.ack(leases[0])
    assert eventually(lambda: q.depth(Q) == 1, timeout_s=10 * queue_backend.tick_s)


def test_delayed_enqueue(queue_backend: QueueBackend) -> None:
    q = queue_backend.open()
    tick = queue_backend.tick_s
    job_id = q.enqueue(Q, "k", {}, delay_s=3 * tick)
    assert q.lease(Q) == []
    assert q.stats(Q).pending == 1  # delayed jobs count as pending
    leases = eventually(lambda: q.lease(Q), timeout_s=30 * tick)
    assert leases[0].job.job_id == job_id


# --------------------------------------------------------------------------------------------
# visibility and receipts


@pytest.mark.local_only(
    reason="moto accepts any receipt handle a message ever had, so the "
    "stale-receipt checks cannot run against it; the SQS adapter's "
    "handling of real SQS's stale-receipt error is tested with "
    "botocore's Stubber in test_aws_adapters.py"
)
def test_visibility_timeout_expiry_and_stale_receipt(queue_backend: QueueBackend) -> None:
    q = queue_backend.open()
    tick = queue_backend.tick_s
    job_id = q.enqueue(Q, "k", {"x": 1})
    (old,) = q.lease(Q, visibility_s=2 * tick)
    assert q.lease(Q, visibility_s=2 * tick) == []
    (new,) = eventually(lambda: q.lease(Q, visibility_s=30 * tick), timeout_s=30 * tick)
    assert new.job.job_id == job_id
    assert new.job.attempts == 2
    assert new.job.payload == {"x": 1}
    assert new.receipt != old.receipt
    # the stale receipt can no longer settle or extend the job
    assert q.ack(old) is False
    assert q.extend(old, 60) is False
    q.nack(old, "too late")
    assert stats_tuple(q.stats(Q)) == (0, 1, 0, 0, 0)
    assert q.ack(new) is True
    assert stats_tuple(q.stats(Q)) == (0, 0, 1, 0, 0)


def test_extend_keeps_the_job_invisible(queue_backend: QueueBackend) -> None:
    q = queue_backend.open()
    tick = queue_backend.tick_s
    q.enqueue(Q, "k", {})
    (lease,) = q.lease(Q, visibility_s=2 * tick)
    assert q.extend(lease, 30 * tick) is True
    time.sleep(4 * tick)
    assert q.lease(Q) == []
    assert q.stats(Q).inflight == 1
    assert q.ack(lease) is True


def test_expired_lease_counts_as_pending(queue_backend: QueueBackend) -> None:
    q = queue_backend.open()
    tick = queue_backend.tick_s
    q.enqueue(Q, "k", {})
    q.lease(Q, visibility_s=tick)
    eventually(lambda: q.stats(Q).pending == 1, timeout_s=30 * tick)
    assert q.stats(Q).inflight == 0


def test_concurrent_leases_never_share_a_job(job_queue: JobQueue) -> None:
    ids = {job_queue.enqueue(Q, "k", {"i": i}) for i in range(40)}
    got: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def drain() -> None:
        barrier.wait()
        while True:
            leases = job_queue.lease(Q, max_jobs=2, visibility_s=60)
            if not leases:
                return
            for lease in leases:
                assert job_queue.ack(lease)
                with lock:
                    got.append(lease.job.job_id)

    threads = [threading.Thread(target=drain) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(ids)
    assert job_queue.stats(Q).processed == 40


# --------------------------------------------------------------------------------------------
# failures


def test_nack_retries_with_backoff(queue_backend: QueueBackend) -> None:
    tick = queue_backend.tick_s
    q = queue_backend.open(max_attempts=5, backoff_base_s=3 * tick, backoff_max_s=60 * tick)
    job_id = q.enqueue(Q, "k", {"p": 1})
    (first,) = q.lease(Q)
    q.nack(first, "boom 1")
    assert stats_tuple(q.stats(Q)) == (1, 0, 0, 1, 0)  # a delayed retry is pending
    assert q.lease(Q) == []  # not before the backoff
    (second,) = eventually(lambda: q.lease(Q), timeout_s=30 * tick)
    assert second.job.job_id == job_id
    assert second.job.attempts == 2
    assert second.job.payload == {"p": 1}
    assert q.ack(first) is False
    assert q.ack(second) is True
    assert stats_tuple(q.stats(Q)) == (0, 0, 1, 1, 0)
    assert q.dead_letters(Q) == []


def test_dead_letter_after_max_attempts(queue_backend: QueueBackend) -> None:
    tick = queue_backend.tick_s
    q = queue_backend.open(max_attempts=3, backoff_base_s=tick / 4, backoff_max_s=tick / 2)
    job_id = q.enqueue(Q, "extract", {"session": "s1"}, dedup_key="s1")
    for attempt in range(1, 4):
        (lease,) = eventually(lambda: q.lease(Q), timeout_s=30 * tick)
        assert lease.job.attempts == attempt
        q.nack(lease, f"error {attempt}")
    time.sleep(tick)
    assert q.lease(Q) == []
    assert stats_tuple(q.stats(Q)) == (0, 0, 0, 3, 1)
    (dead,) = q.dead_letters(Q)
    assert dead.job.job_id == job_id
    assert dead.job.kind == "extract"
    assert dead.job.payload == {"session": "s1"}
    assert dead.job.dedup_key == "s1"
    assert dead.job.attempts == 3
    assert dead.error == "error 3"
    assert dead.failed_at > 0
    # a dead job does not absorb a new enqueue with its dedup key
    assert q.enqueue(Q, "extract", {"session": "s1"}, dedup_key="s1") != job_id


def test_dead_letters_newest_first_and_limited(queue_backend: QueueBackend) -> None:
    q = queue_backend.open(max_attempts=1)
    for i in range(3):
        q.enqueue(Q, "k", {"i": i})
        (lease,) = q.lease(Q)
        q.nack(lease, f"e{i}")
        time.sleep(0.01)
    assert [d.error for d in q.dead_letters(Q)] == ["e2", "e1", "e0"]
    assert [d.error for d in q.dead_letters(Q, limit=2)] == ["e2", "e1"]
    assert q.stats(Q).dead == 3


# --------------------------------------------------------------------------------------------
# dedup


def test_dedup_while_pending(job_queue: JobQueue) -> None:
    first = job_queue.enqueue(Q, "summarise", {"v": 1}, dedup_key="dir:/a")
    assert job_queue.enqueue(Q, "summarise", {"v": 2}, dedup_key="dir:/a") == first
    other_key = job_queue.enqueue(Q, "summarise", {"v": 3}, dedup_key="dir:/b")
    other_queue = job_queue.enqueue("elsewhere", "summarise", {"v": 4}, dedup_key="dir:/a")
    no_key = [job_queue.enqueue(Q, "summarise", {"v": 5}) for _ in range(2)]
    assert len({first, other_key, other_queue, *no_key}) == 5
    assert job_queue.stats(Q).pending == 4
    leases = job_queue.lease(Q, max_jobs=10)
    assert [lease.job.job_id for lease in leases] == [first, other_key, *no_key]
    assert leases[0].job.payload == {"v": 1}  # the pending job keeps its payload
    assert leases[0].job.dedup_key == "dir:/a"


def test_dedup_does_not_absorb_into_a_leased_job(job_queue: JobQueue) -> None:
    first = job_queue.enqueue(Q, "k", {"v": 1}, dedup_key="d")
    (lease,) = job_queue.lease(Q)
    # a change that arrives while the job runs must be processed again afterwards
    second = job_queue.enqueue(Q, "k", {"v": 2}, dedup_key="d")
    assert second != first
    assert job_queue.enqueue(Q, "k", {"v": 3}, dedup_key="d") == second
    assert job_queue.ack(lease)
    (again,) = job_queue.lease(Q)
    assert again.job.job_id == second and again.job.payload == {"v": 2}
    assert job_queue.ack(again)
    assert job_queue.enqueue(Q, "k", {"v": 4}, dedup_key="d") not in (first, second)


def test_dedup_does_not_absorb_into_a_failed_retry(queue_backend: QueueBackend) -> None:
    q = queue_backend.open(backoff_base_s=60, backoff_max_s=60)
    first = q.enqueue(Q, "k", {"v": 1}, dedup_key="d")
    (lease,) = q.lease(Q)
    q.nack(lease, "boom")  # pending again, waiting for its retry
    second = q.enqueue(Q, "k", {"v": 2}, dedup_key="d")
    assert second != first
    assert q.enqueue(Q, "k", {"v": 3}, dedup_key="d") == second
    (fresh,) = q.lease(Q)
    assert fresh.job.job_id == second and fresh.job.attempts == 1


# --------------------------------------------------------------------------------------------
# durability


def test_jobs_survive_reopening(queue_backend: QueueBackend) -> None:
    tick = queue_backend.tick_s
    q1 = queue_backend.open()
    kept = q1.enqueue(Q, "k", {"keep": True})
    inflight = q1.enqueue(Q, "k", {"inflight": True})
    q1.lease(Q, visibility_s=2 * tick)  # leases `kept`
    (lease,) = q1.lease(Q, visibility_s=2 * tick)
    assert lease.job.job_id == inflight
    close = getattr(q1, "close", None)
    if callable(close):
        close()
    q2 = queue_backend.open()
    st = q2.stats(Q)
    assert st.pending + st.inflight == 2
    # the leases taken before reopening expire and the jobs come back
    leases: list[Lease] = []

    def collect() -> bool:
        leases.extend(q2.lease(Q, max_jobs=2))
        return len(leases) == 2

    eventually(collect, timeout_s=60 * tick)
    assert {lease.job.job_id for lease in leases} == {kept, inflight}
    assert all(lease.job.attempts == 2 for lease in leases)
    q3 = queue_backend.open()
    assert q3.ack(leases[0]) is True  # receipts are durable too
    assert q3.stats(Q).processed == 1


# --------------------------------------------------------------------------------------------
# fairness: per-account counts (AccountJobs)


def test_depth_of_counts_an_accounts_jobs_until_done_or_dead(queue_backend: QueueBackend) -> None:
    queue = queue_backend.open(max_attempts=1)
    assert isinstance(queue, AccountJobs)
    for i in range(2):
        queue.enqueue(Q, "k", {"account": "acme", "i": i})
    queue.enqueue("elsewhere", "k", {"account": "acme"})
    queue.enqueue(Q, "k", {"account": "other"})
    queue.enqueue(Q, "k", {})  # a system job: no account's
    assert (queue.depth_of("acme"), queue.depth_of("other"), queue.depth_of("none")) == (3, 1, 0)
    done = 0
    while done < 3:
        leases = queue.lease(Q, max_jobs=10, visibility_s=30)
        assert leases
        for lease in leases:
            if lease.job.payload.get("i") == 0:
                queue.nack(lease, "boom")  # out of attempts: dead-lettered
            else:
                assert queue.ack(lease)
            done += 1 if lease.job.payload.get("account") else 0
    assert (queue.depth_of("acme"), queue.depth_of("other")) == (1, 0)
    [memory] = queue.lease("elsewhere")
    assert queue.depth_of("acme") == 1  # running still counts
    assert queue.ack(memory)
    assert queue.depth_of("acme") == 0


# --------------------------------------------------------------------------------------------
# local adapter specifics (injectable clock)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_local_backoff_schedule(tmp_path: Path) -> None:
    clock = FakeClock()
    q = SqliteJobQueue(
        tmp_path / "q.db", max_attempts=10, backoff_base_s=1.0, backoff_max_s=5.0, clock=clock
    )
    q.enqueue(Q, "k", {})
    (lease,) = q.lease(Q)
    for expected in (1.0, 2.0, 4.0, 5.0, 5.0):  # base * 2**(attempts-1), capped
        q.nack(lease, "x")
        nacked_at = clock.now
        clock.now = nacked_at + expected - 0.01
        assert q.lease(Q) == []
        clock.now = nacked_at + expected
        (lease,) = q.lease(Q)
    assert lease.job.attempts == 6
    assert q.backoff_s(1) == 1.0 and q.backoff_s(3) == 4.0 and q.backoff_s(1000) == 5.0
    q.close()


def test_local_expired_last_lease_is_dead_lettered(tmp_path: Path) -> None:
    clock = FakeClock()
    q = SqliteJobQueue(tmp_path / "q.db", max_attempts=2, clock=clock)
    q.enqueue(Q, "k", {})
    (l1,) = q.lease(Q, visibility_s=10)
    clock.now += 11
    (l2,) = q.lease(Q, visibility_s=10)
    assert l2.job.attempts == 2
    q.nack(l1, "stale")  # no-op
    clock.now += 11
    assert q.lease(Q) == []  # delivering a third time would exceed max_attempts
    st = q.stats(Q)
    assert (st.pending, st.inflight, st.dead, st.failed_attempts) == (0, 0, 1, 0)
    (dead,) = q.dead_letters(Q)
    assert "lease expired" in dead.error
    assert q.ack(l2) is False
    q.close()


def test_local_nack_outcome_and_done_pruning(tmp_path: Path) -> None:
    q = SqliteJobQueue(tmp_path / "q.db", max_attempts=2, backoff_base_s=0.0, done_retention=3)
    q.enqueue(Q, "k", {})
    (lease,) = q.lease(Q)
    assert q.nack_outcome(lease, "e1") == "pending"
    assert q.nack_outcome(lease, "again") is None  # stale
    (lease,) = q.lease(Q)
    assert q.nack_outcome(lease, "e2") == "dead"
    for i in range(10):
        q.enqueue(Q, "k", {"i": i})
        (lease,) = q.lease(Q)
        q.ack(lease)
    assert q.prune_done() == 7
    assert q.stats(Q).processed == 10  # counters survive pruning
    assert q.stats(Q).dead == 1
    q.close()


def _drain_order(q: SqliteJobQueue, max_jobs: int = 1) -> list[str]:
    order: list[str] = []
    while leases := q.lease(Q, max_jobs=max_jobs):
        for lease in leases:
            order.append(f"{lease.job.payload.get('account', '-')}{lease.job.payload['i']}")
            assert q.ack(lease)
    return order


def test_local_lease_serves_accounts_round_robin(tmp_path: Path) -> None:
    """Each account's jobs in order, the accounts in turn (least recently served first, new
    ones in the order they came), a system job as an account of its own; a newcomer is served
    next, whatever waits."""
    q = SqliteJobQueue(tmp_path / "q.db")
    for account, n in (("a", 5), ("b", 2), ("c", 1)):
        for i in range(n):
            q.enqueue(Q, "k", {"account": account, "i": i})
    q.enqueue(Q, "k", {"i": 0})
    first = q.lease(Q)
    assert first[0].job.payload == {"account": "a", "i": 0}
    q.ack(first[0])
    q.enqueue(Q, "k", {"account": "d", "i": 0})  # arrives behind a backlog
    assert _drain_order(q) == ["b0", "c0", "-0", "d0", "a1", "b1", "a2", "a3", "a4"]


def test_local_lease_batches_take_turns_across_accounts(tmp_path: Path) -> None:
    q = SqliteJobQueue(tmp_path / "q.db")
    for i in range(5):
        q.enqueue(Q, "k", {"account": "a", "i": i})
    for i in range(2):
        q.enqueue(Q, "k", {"account": "b", "i": i})
    assert _drain_order(q, max_jobs=4) == ["a0", "b0", "a1", "b1", "a2", "a3", "a4"]


def test_local_a_retry_waits_its_turn_and_invisible_jobs_are_skipped(tmp_path: Path) -> None:
    clock = FakeClock()
    q = SqliteJobQueue(tmp_path / "q.db", clock=clock, backoff_base_s=10.0)
    q.enqueue(Q, "k", {"account": "a", "i": 0})
    q.enqueue(Q, "k", {"account": "a", "i": 1})
    q.enqueue(Q, "k", {"account": "b", "i": 0}, delay_s=5)
    [a0] = q.lease(Q)
    q.nack(a0, "boom")  # back in 10 s
    assert [x.job.payload["i"] for x in q.lease(Q, max_jobs=5)] == [1]
    clock.now += 11
    assert sorted(str(x.job.payload) for x in q.lease(Q, max_jobs=5)) == [
        "{'account': 'a', 'i': 0}",
        "{'account': 'b', 'i': 0}",
    ]


def test_local_queue_of_an_earlier_release_gets_its_accounts(tmp_path: Path) -> None:
    """A queue.db written before jobs kept their account: the migration reads it from each
    waiting job's payload."""
    from skald.adapters.local.sqlite.db import SqliteDb
    from skald.adapters.local.sqlite.jobqueue import _QUEUE_MIGRATIONS

    path = tmp_path / "q.db"
    old = SqliteDb(path)
    old.ensure_schema("jobqueue", _QUEUE_MIGRATIONS[:1])
    with old.write() as conn:
        for n, payload in enumerate(('{"account": "a"}', '{"account": "a"}', '{"x": 1}')):
            conn.execute(
                "INSERT INTO jobs (job_id, queue, kind, payload, status, visible_at,"
                " enqueued_at, updated_at) VALUES (?, ?, 'k', ?, 'pending', 0, 0, 0)",
                (f"j{n}", Q, payload),
            )
    old.close()
    q = SqliteJobQueue(path)
    assert (q.depth_of("a"), q.depth_of("")) == (2, 1)
    assert len(q.lease(Q, max_jobs=5)) == 3
