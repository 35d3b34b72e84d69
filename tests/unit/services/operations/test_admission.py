"""Back-pressure: admitted below the bound, refused at it with Retry-After, depth cached."""

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


def test_admission_bound_and_cache(tmp_path: Path) -> None:
    queue = SqliteJobQueue(tmp_path / "q.db")
    clock = Clock()
    admission = Admission(
        queue, ("semantic", "memory"), limit=3, cache_s=2.0, retry_after_s=9, clock=clock
    )
    admission.admit()
    for i in range(2):
        queue.enqueue("semantic", "k", {"i": i})
    queue.enqueue("memory", "k", {})
    admission.admit()  # the cached depth (0) is still fresh
    assert admission.fresh()
    clock.now = 2.5
    assert not admission.fresh()
    with pytest.raises(ResourceExhausted) as exc:
        admission.admit()
    assert exc.value.retry_after_s == 9
    assert exc.value.details == {"queued_jobs": 3, "limit": 3, "retry_after_s": 9}
    for lease in queue.lease("semantic", max_jobs=2):
        queue.ack(lease)
    clock.now = 5.0
    admission.admit()


def test_zero_limit_never_refuses(tmp_path: Path) -> None:
    queue = SqliteJobQueue(tmp_path / "q.db")
    queue.enqueue("semantic", "k", {})
    admission = Admission(queue, ("semantic",), limit=0, cache_s=0, retry_after_s=1)
    assert admission.fresh()
    admission.admit()
