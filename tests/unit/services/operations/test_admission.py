"""Back-pressure per account: an account is admitted below its limit of jobs in flight and
refused at it with Retry-After and the limit named, while another account is still admitted;
the count and the limit are cached per account."""

from __future__ import annotations

from pathlib import Path

import pytest

from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
from skald.domain.errors import ResourceExhausted
from skald.services.operations.admission import Admission


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_account_has_its_own_bound_and_cache(tmp_path: Path) -> None:
    queue = SqliteJobQueue(tmp_path / "q.db")
    clock = Clock()
    limits = {"big": 3, "small": 1}
    reads: list[str] = []

    def limit_of(account: str) -> int | None:
        reads.append(account)
        return limits.get(account)

    admission = Admission(queue, limit_of=limit_of, cache_s=2.0, retry_after_s=9, clock=clock)
    admission.admit("big")
    for i in range(2):
        queue.enqueue("semantic", "k", {"account": "big", "i": i})
    queue.enqueue("memory", "k", {"account": "big"})
    queue.enqueue("semantic", "k", {})  # a system job counts for no account
    admission.admit("big")  # the cached count (0) is still fresh
    assert admission.fresh("big") and not admission.fresh("small")
    clock.now = 2.5
    assert not admission.fresh("big")
    with pytest.raises(ResourceExhausted) as exc:
        admission.admit("big")
    assert exc.value.retry_after_s == 9
    assert exc.value.details == {
        "limit": "jobs_in_flight",
        "value": 3,
        "current": 3,
        "retry_after_s": 9,
    }
    # Another account is not held back by this one's backlog.
    admission.admit("small")
    admission.admit("nolimit")  # None: no limit
    assert reads == ["big", "big", "small", "nolimit"]
    for lease in queue.lease("semantic", max_jobs=2):
        queue.ack(lease)
    clock.now = 5.0
    admission.admit("big")


def test_zero_limit_never_refuses(tmp_path: Path) -> None:
    queue = SqliteJobQueue(tmp_path / "q.db")
    queue.enqueue("semantic", "k", {"account": "a"})
    admission = Admission(queue, limit_of=lambda _a: 0, cache_s=0, retry_after_s=1)
    admission.admit("a")


def test_a_queue_without_per_account_counts_admits_everything() -> None:
    admission = Admission(object(), limit_of=lambda _a: 1, cache_s=0, retry_after_s=1)  # type: ignore[arg-type]
    assert admission.fresh("a")
    admission.admit("a")
