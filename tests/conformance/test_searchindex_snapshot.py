"""The embedded compact index reopens from its columns snapshot (index_snapshot) and vector
sidecar instead of rebuilding every column from SQLite: the columns it gets are those a full
load gives, with the rows written and deleted since, and the snapshot is not taken when it is
too far behind, written for a replaced database file or another tokenizer, or unreadable."""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from skald.adapters.local.index import load as index_load
from skald.adapters.local.index import store as index_store
from skald.adapters.local.index.columns import Columns
from skald.adapters.local.index.searchindex import LocalSearchIndex
from skald.ports import IndexFilter, IndexQuery, IndexRecord

DIM = 16
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "river",
    "stone",
    "cloud",
    "ember",
    "harbor",
    "lantern",
    "meadow",
    "orbit",
]
F32 = npt.NDArray[np.float32]


def vectors(n: int, seed: int) -> F32:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    out: F32 = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    return out


def record(i: int, vec: F32, *, account: str = "acme", salt: str = "") -> IndexRecord:
    proj = f"p{i % 4}"
    parent = f"viking://resources/{proj}/d{i % 7}"
    words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 5)) + f" {salt}"
    return IndexRecord(
        account=account,
        uri=f"{parent}/f{i}.md",
        level=2 if i % 9 else 0,
        section=i % 2,
        context_type="memory" if i % 5 == 0 else "resource",
        parent=parent,
        ancestors=["viking://resources", f"viking://resources/{proj}", parent],
        text=words,
        tags=[f"t{i % 3}", "all"] if i % 2 else [],
        memory_type="events" if i % 5 == 0 else None,
        owner=f"u{i % 2}",
        created_at=1000.0 + i,
        updated_at=2000.0 + i,
        vector=vec.tolist(),
    )


def logical(cols: Columns) -> dict[int, tuple[Any, ...]]:
    """rowid -> every field the columns hold for a live row, decoded (vectors aside)."""
    inv = {i: t for t, i in cols.lex.terms.items()}
    postings: dict[int, dict[str, float]] = {}
    lex = cols.lex
    for tid in range(lex.n_base_terms):
        s, e = int(lex.b_off[tid]), int(lex.b_off[tid + 1])
        for r, tf in zip(lex.b_row[s:e].tolist(), lex.b_tf[s:e].tolist(), strict=True):
            postings.setdefault(r, {})[inv[tid]] = tf
    for t, r, tf in zip(
        lex.d_term[: lex.d_n].tolist(),
        lex.d_row[: lex.d_n].tolist(),
        lex.d_tf[: lex.d_n].tolist(),
        strict=True,
    ):
        postings.setdefault(r, {})[inv[t]] = tf
    multi: dict[str, dict[int, set[str | None]]] = {}
    for f, mv in cols.multi.items():
        per = multi.setdefault(f, {})
        for c, r in zip(mv.code[: mv.n].tolist(), mv.row[: mv.n].tolist(), strict=True):
            per.setdefault(r, set()).add(mv.strs.values[c])
    out: dict[int, tuple[Any, ...]] = {}
    for row in np.flatnonzero(cols.alive[: cols.n]).tolist():
        strs = tuple(cols.strs[f].values[int(cols.codes[f][row])] for f in sorted(cols.strs))
        key = cols.key_of(
            str(strs[0]),
            str(cols.strs["uri"].values[int(cols.codes["uri"][row])]),
            int(cols.level[row]),
            int(cols.section[row]),
        )
        out[int(cols.rid[row])] = (
            strs,
            int(cols.level[row]),
            int(cols.section[row]),
            float(cols.created[row]),
            float(cols.updated[row]),
            float(cols.doclen[row]),
            bool(cols.has_vec[row]),
            key == row,
            postings.get(row, {}),
            *(multi[f].get(row, set()) for f in sorted(multi)),
        )
    return out


def full_load(path: Path) -> Columns:
    """The columns read from SQLite row by row, as an index with no sidecar gets them."""
    conn = index_store.connect(path, readonly=False)
    try:
        return index_load.load_columns(conn, DIM, exact_rows=0, sidecar=None)
    finally:
        conn.close()


def assert_same_as_full_load(index: LocalSearchIndex, path: Path) -> None:
    ref = full_load(path)
    got = index._cols
    assert logical(got) == logical(ref)
    live = np.flatnonzero(got.alive[: got.n] & got.has_vec[: got.n])
    ref_rows = {int(r): i for i, r in enumerate(ref.rid[: ref.n].tolist())}
    mine = got.vectors.exact(live)
    theirs = ref.vectors.exact([ref_rows[int(r)] for r in got.rid[live].tolist()])
    assert np.allclose(mine, theirs, atol=1e-7)


def results(index: LocalSearchIndex, q: F32, text: str) -> list[list[tuple[str, float]]]:
    out = []
    for flt in (
        IndexFilter(),
        IndexFilter(scopes=["viking://resources/p1"]),
        IndexFilter(tags_all=["all"], context_types=["resource"]),
    ):
        for mode in ("dense", "lexical", "hybrid"):
            hits = index.search(
                IndexQuery(
                    account="acme", mode=mode, vector=q.tolist(), text=text, limit=15, filter=flt
                )
            )
            out.append([(h.record.uri, round(h.score, 5)) for h in hits])
    return out


@pytest.fixture
def built(tmp_path: Path) -> Iterator[tuple[Path, F32]]:
    """An index of 1,200 records opened once, so its generation (vectors + columns) exists."""
    path = tmp_path / "index.db"
    vecs = vectors(1600, seed=3)
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        index.upsert([record(i, v) for i, v in enumerate(vecs[:1200])])
        index.upsert([record(i, v, account="other") for i, v in enumerate(vecs[:50])])
    with LocalSearchIndex(path, DIM, exact_rows=0):
        pass
    yield path, vecs


def generation(path: Path) -> list[str]:
    return sorted(p.name for p in index_load.sidecar_path(path).iterdir())


def reopened(path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalSearchIndex:
    """The index opened with the row-by-row load of the columns refused."""

    def refuse(*_: object) -> None:
        raise AssertionError("the columns were rebuilt row by row")

    with monkeypatch.context() as m:
        m.setattr(index_load, "_load_rows", refuse)
        return LocalSearchIndex(path, DIM, exact_rows=0)


def test_reopen_takes_the_columns_from_the_snapshot(
    built: tuple[Path, F32], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, vecs = built
    assert any(n.endswith(".columns.npz") for n in generation(path))
    expected_results = None
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        expected_results = results(index, vecs[7], "river stone")
    with reopened(path, monkeypatch) as index:
        assert_same_as_full_load(index, path)
        assert results(index, vecs[7], "river stone") == expected_results
        assert index.head("acme", "viking://resources/p1/d1/f1.md") is not None
        # the key map came back too: a delete by URI finds its rows
        assert index.delete_uris("acme", ["viking://resources/p1/d1/f1.md"]) == 1
        assert index.count("other") == 50


def test_rows_written_and_deleted_since_the_snapshot_are_applied(
    built: tuple[Path, F32], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, vecs = built
    first = generation(path)
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        index.upsert([record(i, v) for i, v in enumerate(vecs[1200:1300], start=1200)])
        index.upsert([record(i, vecs[1500 + i], salt="changed") for i in range(40)])
        index.delete_uris(
            "acme", [f"viking://resources/p{i % 4}/d{i % 7}/f{i}.md" for i in range(100, 130)]
        )
        index.delete_prefix("other", "viking://resources/p2")
        expected = results(index, vecs[1210], "changed river")
    with reopened(path, monkeypatch) as index:
        assert generation(path) == first  # reused, not rewritten
        assert index._cols.dead == 40 + 30 + 12  # replaced, deleted, the other account's p2
        assert_same_as_full_load(index, path)
        assert results(index, vecs[1210], "changed river") == expected
        # and it keeps taking writes
        index.upsert([record(2000, vecs[0], salt="later")])
        assert [
            h.record.uri
            for h in index.search(IndexQuery(account="acme", mode="lexical", text="later", limit=5))
        ] == ["viking://resources/p0/d5/f2000.md"]


def test_a_snapshot_too_far_behind_is_renewed_from_itself_and_the_rows_since(
    built: tuple[Path, F32], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, vecs = built
    first = generation(path)
    monkeypatch.setattr(index_load, "SNAPSHOT_DELTA_ROWS", 0)  # an eighth of the rows, then
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        index.upsert([record(i, v) for i, v in enumerate(vecs[1200:], start=1200)])
        index.upsert([record(i, vecs[1500 + i], salt="changed") for i in range(20)])
        expected = results(index, vecs[1300], "changed meadow")
    with reopened(path, monkeypatch) as index:
        second = generation(path)
        assert second != first and len(second) == len(first)  # one generation, a new one
        assert index._cols.dead == 0 and index._cols.lex.d_n == 0
        assert_same_as_full_load(index, path)
        assert results(index, vecs[1300], "changed meadow") == expected
    with reopened(path, monkeypatch) as index:
        assert index._cols.dead == 0 and generation(path) == second
        for proj in ("p0", "p1"):  # half the rows
            index.delete_prefix("acme", f"viking://resources/{proj}")
        expected = results(index, vecs[1301], "river")
    with reopened(path, monkeypatch) as index:
        assert generation(path) != second
        assert index._cols.dead == 0
        assert_same_as_full_load(index, path)
        assert results(index, vecs[1301], "river") == expected


def test_a_replaced_database_file_does_not_take_the_old_generation(built: tuple[Path, F32]) -> None:
    path, _ = built
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    # The same number of records written in the same order: the same rowids, other content.
    other = vectors(1600, seed=99)
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        index.upsert([record(i, v, salt="second") for i, v in enumerate(other[:1200])])
        index.upsert([record(i, v, account="other") for i, v in enumerate(other[:50])])
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        assert_same_as_full_load(index, path)
        top = index.search(
            IndexQuery(account="acme", mode="dense", vector=other[11].tolist(), limit=1)
        )
        assert top[0].record.uri == "viking://resources/p3/d4/f11.md"
        assert round(top[0].score, 5) == 1.0


def test_another_tokenizer_rebuilds_the_columns(built: tuple[Path, F32]) -> None:
    path, _ = built
    with LocalSearchIndex(path, DIM, exact_rows=0, stemming=False) as index:
        assert_same_as_full_load(index, path)
        assert "river" in index._cols.lex.terms
        got = {
            h.record.uri
            for h in index.search(
                IndexQuery(account="acme", mode="lexical", text="lanterns", limit=50)
            )
        }
        assert got == set()  # unstemmed: "lanterns" is not "lantern"
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:  # and back
        assert index.search(IndexQuery(account="acme", mode="lexical", text="lanterns", limit=5))


def test_an_unreadable_snapshot_is_rebuilt(
    built: tuple[Path, F32], caplog: pytest.LogCaptureFixture
) -> None:
    path, _ = built
    snap = next(index_load.sidecar_path(path).glob("*.columns.npz"))
    snap.write_bytes(snap.read_bytes()[:1000])
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        assert_same_as_full_load(index, path)
    assert "unreadable" in caplog.text or "rebuilding" in caplog.text
    assert snap.stat().st_size > 1000  # written again


def test_a_sidecar_folder_that_cannot_be_written_leaves_the_index_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "index.db"
    index_load.sidecar_path(path).write_text("a file where the folder would be")
    vecs = vectors(300, seed=5)
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        index.upsert([record(i, v) for i, v in enumerate(vecs)])
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        assert_same_as_full_load(index, path)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] == 300
    conn.close()


def lose_last_rows(path: Path, count: int) -> int:
    """What a power cut (or a restored copy) does: the database goes back before its last
    rows, their rowids free again. Returns the last rowid it still has."""
    conn = sqlite3.connect(path)
    last = int(conn.execute("SELECT MAX(rid) FROM records").fetchone()[0]) - count
    conn.execute("DELETE FROM records WHERE rid > ?", (last,))
    conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'records'", (last,))
    conn.commit()
    conn.close()
    return last


def test_rows_the_database_lost_are_dropped_and_their_rowids_not_reused(
    built: tuple[Path, F32], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, vecs = built
    lose_last_rows(path, 5)
    with reopened(path, monkeypatch) as index:
        assert index._cols.dead == 5
        index.upsert([record(3000 + i, vecs[1300 + i], salt="after") for i in range(8)])
    with reopened(path, monkeypatch) as index:
        assert_same_as_full_load(index, path)


def test_a_snapshot_whose_rowids_now_hold_other_records_is_rebuilt(built: tuple[Path, F32]) -> None:
    path, vecs = built
    last = lose_last_rows(path, 5)
    # another writer (a copy of the file elsewhere) gave the freed rowids to new records
    conn = index_store.connect(path, readonly=False)
    conn.execute("BEGIN IMMEDIATE")
    index_store.insert(
        conn,
        last + 1,
        [
            index_store.prepare(record(3000 + i, vecs[1300 + i], salt="other"), DIM, True)
            for i in range(8)
        ],
    )
    conn.execute("COMMIT")
    conn.close()
    with LocalSearchIndex(path, DIM, exact_rows=0) as index:
        assert_same_as_full_load(index, path)


def test_a_disk_too_full_for_the_vectors_leaves_the_index_opening(
    built: tuple[Path, F32], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path, _ = built
    sidecar = index_load.sidecar_path(path)
    for ok in sidecar.glob("*.ok"):
        ok.unlink()  # the open rebuilds the generation

    def full(*_: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", full)  # the os module the sidecar calls
        index = LocalSearchIndex(path, DIM, exact_rows=0)
    with index:
        assert_same_as_full_load(index, path)
    assert "No space left on device" in caplog.text
    assert not list(sidecar.glob("*.ok")) and not list(sidecar.glob("*f32.npy.tmp*"))


def test_a_generation_is_on_the_disk_before_its_marker(
    built: tuple[Path, F32], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a power cut, an `.ok` marker must never vouch for a file whose data did not reach
    the disk: each file is flushed before the marker is written, and the folder after it."""
    path, _ = built
    sidecar = index_load.sidecar_path(path)
    for ok in sidecar.glob("*.ok"):
        ok.unlink()  # the open rebuilds the generation
    flushed: list[tuple[str, bool]] = []  # (path flushed, a marker existed then)
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        flushed.append((os.readlink(f"/proc/self/fd/{fd}"), any(sidecar.glob("*.ok"))))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    with LocalSearchIndex(path, DIM, exact_rows=0):
        pass
    (key,) = [p.name.removesuffix(".ok") for p in sidecar.glob("*.ok")]
    for suffix in ("faiss", "has.npy", "err.npy", "f32.npy", "columns.npz"):
        before = [marked for p, marked in flushed if Path(p).name.startswith(f"{key}.{suffix}.tmp")]
        assert before == [False], (suffix, flushed)
    assert (str(sidecar), True) in flushed  # the marker's own entry
