"""The embedded index's compact vector column (8-bit codes, exact float32 re-scoring): its
dense top k is the float32 top k, with filters, after upserts, deletes and compaction, and
after reopening (from the vector sidecar and the rows written since)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from skald.adapters.local.index import load as index_load
from skald.adapters.local.index import quant as index_quant
from skald.adapters.local.index.quant import CompactVectors, DenseVectors
from skald.adapters.local.index.searchindex import LocalSearchIndex
from skald.ports import IndexFilter, IndexQuery, IndexRecord

DIM = 32
ACCT = "acme"
F32 = npt.NDArray[np.float32]


def unit(x: F32) -> F32:
    out: F32 = (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)
    return out


def clustered(n: int, seed: int, spread: float = 0.08) -> F32:
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((20, DIM)).astype(np.float32))
    picks = rng.integers(0, len(centres), n)
    return unit(centres[picks] + spread * rng.standard_normal((n, DIM)).astype(np.float32))


def record(i: int, vec: F32, *, project: str | None = None) -> IndexRecord:
    proj = project or f"p{i % 3}"
    parent = f"viking://resources/{proj}"
    return IndexRecord(
        account=ACCT,
        uri=f"{parent}/f{i}.md",
        level=2,
        context_type="memory" if i % 5 == 0 else "resource",
        parent=parent,
        ancestors=["viking://resources", parent],
        text=f"doc {i}",
        vector=vec.tolist(),
    )


def dense(
    index: LocalSearchIndex, q: F32, k: int = 10, flt: IndexFilter | None = None
) -> list[tuple[str, float]]:
    hits = index.search(
        IndexQuery(
            account=ACCT, mode="dense", vector=q.tolist(), limit=k, filter=flt or IndexFilter()
        )
    )
    return [(h.record.uri, h.score) for h in hits]


def assert_same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> None:
    assert [u for u, _ in a] == [u for u, _ in b]
    assert np.allclose([s for _, s in a], [s for _, s in b], atol=1e-6)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[LocalSearchIndex, LocalSearchIndex]]:
    """The same records in a compact index and in a float32 one."""
    compact = LocalSearchIndex(tmp_path / "compact", DIM, exact_rows=0)
    exact = LocalSearchIndex(tmp_path / "exact", DIM, exact_rows=10**9)
    yield compact, exact
    compact.close()
    exact.close()


def upsert_both(
    pair: tuple[LocalSearchIndex, LocalSearchIndex], records: list[IndexRecord]
) -> None:
    for index in pair:
        index.upsert(records)


def test_compact_top_k_equals_float32_top_k(
    pair: tuple[LocalSearchIndex, LocalSearchIndex],
) -> None:
    vecs = clustered(3000, seed=1)
    upsert_both(pair, [record(i, v) for i, v in enumerate(vecs)])
    compact, exact = pair
    assert isinstance(compact._cols.vectors, CompactVectors)
    assert isinstance(exact._cols.vectors, DenseVectors)
    queries = unit(
        vecs[::97]
        + 0.05 * np.random.default_rng(2).standard_normal((len(vecs[::97]), DIM)).astype(np.float32)
    )
    for q in queries:
        got = dense(compact, q, k=10)
        assert_same(got, dense(exact, q, k=10))
        # ... and the brute-force cosine top 10
        sims = vecs @ q
        assert [u for u, _ in got] == [
            f"viking://resources/p{i % 3}/f{i}.md" for i in np.argsort(-sims)[:10]
        ]


def test_hybrid_reads_the_vectors_of_kept_keyword_rows_only(
    pair: tuple[LocalSearchIndex, LocalSearchIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 60 keyword matches far from the query vector, below 100 closer records: the dense side
    # (50 deep for 5 hits) ranks none of them, fusion keeps a few. Only those few need their
    # cosine, each a float32 read in a compact column.
    rng = np.random.default_rng(8)
    q = unit(rng.standard_normal(DIM).astype(np.float32))
    near = unit(q + 0.3 * rng.standard_normal((100, DIM)).astype(np.float32))
    far = unit(-q + 0.3 * rng.standard_normal((60, DIM)).astype(np.float32))
    records = [record(i, v) for i, v in enumerate(near)]
    records += [replace(record(100 + i, v), text=f"zeppelin hangar {i}") for i, v in enumerate(far)]
    upsert_both(pair, records)
    read: list[int] = []
    kinds: list[type[CompactVectors] | type[DenseVectors]] = [CompactVectors, DenseVectors]
    for index, kind in zip(pair, kinds, strict=True):
        real = kind.exact

        def counted(self: Any, rows: Any, real: Any = real) -> F32:
            read.append(len(rows))
            out: F32 = real(self, rows)
            return out

        monkeypatch.setattr(kind, "exact", counted)
        read.clear()
        hits = index.search(
            IndexQuery(
                account=ACCT,
                mode="hybrid",
                vector=q.tolist(),
                text="zeppelin hangar",
                limit=5,
                filter=IndexFilter(),
            )
        )
        kept = [h for h in hits if "zeppelin" in h.record.text]
        assert kept and all(h.dense_score is not None for h in hits)
        assert read[-1] == len(kept), read  # the last read: the kept keyword rows only


def test_rows_closer_than_the_quantisation_step_rank_exactly(
    pair: tuple[LocalSearchIndex, LocalSearchIndex],
) -> None:
    # 1,200 vectors differing far below one 8-bit step: their codes tie, only the error
    # margin's re-scoring orders them.
    rng = np.random.default_rng(3)
    base = unit(rng.standard_normal(DIM).astype(np.float32))
    vecs = unit(base + 2e-4 * rng.standard_normal((1200, DIM)).astype(np.float32))
    upsert_both(pair, [record(i, v) for i, v in enumerate(vecs)])
    compact, exact = pair
    for q in unit(base + 1e-3 * rng.standard_normal((5, DIM)).astype(np.float32)):
        assert_same(dense(compact, q, k=10), dense(exact, q, k=10))


def test_filters_apply_before_ranking(pair: tuple[LocalSearchIndex, LocalSearchIndex]) -> None:
    vecs = clustered(2000, seed=4)
    upsert_both(pair, [record(i, v) for i, v in enumerate(vecs)])
    compact, exact = pair
    filters = [
        IndexFilter(scopes=["viking://resources/p1"]),
        IndexFilter(context_types=["memory"]),
        IndexFilter(scopes=["viking://resources/p2"], context_types=["memory"]),
    ]
    for flt in filters:
        for q in vecs[:200:40]:
            got = dense(compact, q, k=10, flt=flt)
            assert len(got) == 10
            assert_same(got, dense(exact, q, k=10, flt=flt))
    # a filter keeping fewer rows than k
    only = IndexFilter(scopes=["viking://resources/p1/f1.md"])
    assert [u for u, _ in dense(compact, vecs[0], flt=only)] == ["viking://resources/p1/f1.md"]


def test_upserts_deletes_and_compaction_stay_exact(
    pair: tuple[LocalSearchIndex, LocalSearchIndex],
) -> None:
    vecs = clustered(4500, seed=5)
    upsert_both(pair, [record(i, v) for i, v in enumerate(vecs)])
    compact, exact = pair
    target = unit(np.random.default_rng(6).standard_normal(DIM).astype(np.float32))
    # An upsert replaces a record's vector: it now matches the query exactly.
    upsert_both(pair, [record(7, target)])
    [(uri, score)] = dense(compact, target, k=1)
    assert uri == "viking://resources/p1/f7.md" and score == pytest.approx(1.0)
    # Deleting most of a project kills rows; enough of them trigger a compaction.
    gone = [f"viking://resources/p0/f{i}.md" for i in range(0, 4500, 3) if i != 1500]
    for index in pair:
        assert index.delete_uris(ACCT, gone) == len(gone)
    assert compact._cols.dead == 0  # compacted
    for q in vecs[::150]:
        got = dense(compact, q, k=10)
        assert not any(u in gone for u, _ in got)
        assert_same(got, dense(exact, q, k=10))
    # New records after the compaction go on ranking exactly.
    more = clustered(500, seed=7)
    upsert_both(pair, [record(5000 + i, v, project="new") for i, v in enumerate(more)])
    for q in more[::50]:
        assert_same(dense(compact, q, k=10), dense(exact, q, k=10))


def test_reopen_uses_the_sidecar_with_the_rows_written_since(tmp_path: Path) -> None:
    vecs = clustered(2500, seed=8)
    path = tmp_path / "compact.db"
    exact = LocalSearchIndex(tmp_path / "exact", DIM, exact_rows=10**9)
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        index.upsert([record(i, v) for i, v in enumerate(vecs[:2000])])
    exact.upsert([record(i, v) for i, v in enumerate(vecs[:2000])])
    sidecar = index_load.sidecar_path(path)
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:  # builds the sidecar
        first = sorted(p.name for p in sidecar.iterdir())
        assert any(name.endswith(".ok") for name in first)
        for q in vecs[:2000:200]:
            assert_same(dense(index, q), dense(exact, q))
        # written after the sidecar: held in memory until the next open
        index.upsert([record(i, v) for i, v in enumerate(vecs[2000:], start=2000)])
        index.delete_uris(ACCT, ["viking://resources/p0/f3.md"])
    exact.upsert([record(i, v) for i, v in enumerate(vecs[2000:], start=2000)])
    exact.delete_uris(ACCT, ["viking://resources/p0/f3.md"])
    # Reused with the rows written since read from SQLite (test_searchindex_snapshot.py has
    # the generation rebuilt once it falls too far behind).
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        assert sorted(p.name for p in sidecar.iterdir()) == first
        for q in vecs[::250]:
            assert_same(dense(index, q), dense(exact, q))
    exact.close()


def test_an_index_growing_past_exact_rows_turns_compact(tmp_path: Path) -> None:
    vecs = clustered(400, seed=9)
    with LocalSearchIndex(tmp_path / "grow", DIM, exact_rows=300) as index:
        index.upsert([record(i, v) for i, v in enumerate(vecs[:300])])
        assert isinstance(index._cols.vectors, DenseVectors)
        before = dense(index, vecs[5])
        index.upsert([record(i, v) for i, v in enumerate(vecs[300:], start=300)])
        assert isinstance(index._cols.vectors, CompactVectors)
        after = dense(index, vecs[5])
        sims = vecs @ vecs[5]
        assert [u for u, _ in after] == [
            f"viking://resources/p{i % 3}/f{i}.md" for i in np.argsort(-sims)[:10]
        ]
        assert after[0] == before[0]


@pytest.mark.parametrize("workers", [2, 3])
def test_a_scan_split_across_cores_gives_the_same_top_k(
    pair: tuple[LocalSearchIndex, LocalSearchIndex], workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Large indexes scan one id range per core and merge: forced here at 2,500 rows, with
    # filters, and with as many parts as the range holds rows of the filtered project only.
    monkeypatch.setattr(index_quant, "SPLIT_ROWS", 0)
    monkeypatch.setattr(index_quant, "scan_workers", lambda: workers)
    vecs = clustered(2500, seed=7)
    # In two writes: the first fills the base codes, the second goes to the tail; both split.
    upsert_both(pair, [record(i, v) for i, v in enumerate(vecs[:1700])])
    upsert_both(pair, [record(i, v) for i, v in enumerate(vecs[1700:], start=1700)])
    compact, exact = pair
    col = compact._cols.vectors
    assert isinstance(col, CompactVectors) and col.tail.ntotal == 800
    rng = np.random.default_rng(8)
    for q in unit(
        vecs[::211] + 0.05 * rng.standard_normal((len(vecs[::211]), DIM)).astype(np.float32)
    ):
        for flt in (None, IndexFilter(scopes=["viking://resources/p1"])):
            assert_same(dense(compact, q, k=10, flt=flt), dense(exact, q, k=10, flt=flt))
            assert_same(dense(compact, q, k=400, flt=flt), dense(exact, q, k=400, flt=flt))


def reopened_with_generation(path: Path, vecs: F32) -> LocalSearchIndex:
    """A compact index of `vecs` whose second open took its generation from the sidecar."""
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        index.upsert([record(i, v) for i, v in enumerate(vecs)])
    LocalSearchIndex(path, DIM, exact_rows=0).close()  # writes the generation
    return LocalSearchIndex(path, DIM, exact_rows=0)


def test_rows_written_after_the_open_leave_the_base_codes_and_memory_alone(tmp_path: Path) -> None:
    """Rows written to an opened index go to a second, small code index (the base is never
    grown, which would copy all of it) and their float32 vectors to an unnamed scratch file
    beside the sidecar, not to memory; ranking stays exact across both."""
    vecs = clustered(3000, seed=11)
    path = tmp_path / "compact.db"
    exact = LocalSearchIndex(tmp_path / "exact", DIM, exact_rows=10**9)
    exact.upsert([record(i, v) for i, v in enumerate(vecs)])
    sidecar = index_load.sidecar_path(path)
    with reopened_with_generation(path, vecs[:2000]) as index:
        col = index._cols.vectors
        assert isinstance(col, CompactVectors)
        base, files = col.index, sorted(p.name for p in sidecar.iterdir())
        for start in (2000, 2500):
            index.upsert(
                [record(i, v) for i, v in enumerate(vecs[start : start + 500], start=start)]
            )
        index.delete_uris(ACCT, ["viking://resources/p1/f2401.md"])
        col = index._cols.vectors
        assert isinstance(col, CompactVectors)
        assert col.index is base and base.ntotal == 2000 and col.tail.ntotal == 1000
        assert col.source.spill is not None and col.source.spill.shape == (1000, DIM)
        assert col.source.tail.size == 0  # nothing of theirs in memory
        assert sorted(p.name for p in sidecar.iterdir()) == files  # the scratch has no name
        exact.delete_uris(ACCT, ["viking://resources/p1/f2401.md"])
        for q in vecs[::150]:
            assert_same(dense(index, q), dense(exact, q))
            assert_same(dense(index, q, k=200), dense(exact, q, k=200))
    assert sorted(p.name for p in sidecar.iterdir()) == files
    exact.close()


def test_a_full_disk_keeps_new_vectors_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    vecs = clustered(2600, seed=12)
    exact = LocalSearchIndex(tmp_path / "exact", DIM, exact_rows=10**9)
    exact.upsert([record(i, v) for i, v in enumerate(vecs)])
    with reopened_with_generation(tmp_path / "compact.db", vecs[:2000]) as index:
        index.upsert([record(i, v) for i, v in enumerate(vecs[2000:2300], start=2000)])

        def full(fd: int, data: object, offset: int) -> int:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "pwrite", full)  # the os module the index calls
        index.upsert([record(i, v) for i, v in enumerate(vecs[2300:], start=2300)])
        col = index._cols.vectors
        assert isinstance(col, CompactVectors)
        assert col.source.spill is None and col.source.ntail == 600
        assert "No space left on device" in caplog.text
        for q in vecs[::130]:
            assert_same(dense(index, q, k=20), dense(exact, q, k=20))
    exact.close()
