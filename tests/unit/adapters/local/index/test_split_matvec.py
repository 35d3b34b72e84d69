"""The embedded index's float32 scan (index_ranking.matvec): cut across the scan threads from
2 x SPLIT_PART_ROWS rows, the same scores as one product, and never stalled by a busy pool."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import ParamSpec, TypeVar

import numpy as np
import pytest

from skald.adapters.local.index import quant as index_quant
from skald.adapters.local.index import ranking as index_ranking

DIM = 384
_P = ParamSpec("_P")
_T = TypeVar("_T")


def _data(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(rows)
    matrix = rng.standard_normal((rows, DIM)).astype(np.float32)
    vector = rng.standard_normal(DIM).astype(np.float32)
    return matrix, vector


@pytest.fixture
def two_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_ranking, "scan_workers", lambda: 2)


@pytest.mark.parametrize("rows", [2 * index_ranking.SPLIT_PART_ROWS, 10_001])
def test_split_scan_scores_every_row_as_one_product(
    two_parts: None, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    matrix, vector = _data(rows)
    submitted: list[int] = []
    pool = index_quant.scan_pool()
    real_submit = pool.submit

    def counting_submit(fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        submitted.append(1)
        return real_submit(fn, *args, **kwargs)

    monkeypatch.setattr(pool, "submit", counting_submit)
    got = index_ranking.matvec(matrix, vector)
    assert submitted == [1]  # two parts: one on the pool, one on the caller
    assert got.dtype == np.float32 and got.shape == (rows,)
    np.testing.assert_allclose(got, matrix @ vector, rtol=1e-5, atol=1e-5)


def test_small_scan_stays_on_the_calling_thread(
    two_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pool() -> None:
        raise AssertionError("a small scan went to the pool")

    monkeypatch.setattr(index_ranking, "scan_pool", no_pool)
    matrix, vector = _data(2 * index_ranking.SPLIT_PART_ROWS - 1)
    np.testing.assert_allclose(
        index_ranking.matvec(matrix, vector), matrix @ vector, rtol=1e-5, atol=1e-5
    )


@pytest.fixture
def busy_pool() -> Iterator[None]:
    """Every scan thread held by another job until the test ends."""
    pool = index_quant.scan_pool()
    release = threading.Event()
    started = threading.Semaphore(0)

    def hold() -> None:
        started.release()
        release.wait(30)

    jobs = [pool.submit(hold) for _ in range(index_quant.scan_workers())]
    for _ in jobs:
        assert started.acquire(timeout=10)
    try:
        yield
    finally:
        release.set()
        for job in jobs:
            job.result(timeout=10)


def test_busy_pool_the_caller_scans_every_part(two_parts: None, busy_pool: None) -> None:
    matrix, vector = _data(10_000)
    out: list[np.ndarray] = []
    scan = threading.Thread(target=lambda: out.append(index_ranking.matvec(matrix, vector)))
    scan.start()
    # Waiting on the pool would last until busy_pool lets go (30 s): the caller does not wait.
    scan.join(timeout=10)
    assert not scan.is_alive(), "the scan waited for a busy pool"
    np.testing.assert_allclose(out[0], matrix @ vector, rtol=1e-5, atol=1e-5)
