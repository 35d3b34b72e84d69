"""Loading the embedded index's in-memory columns at open: from the sidecar folder's
generation (the vector sidecar of quant.py and the columns snapshot of snapshot.py) plus
the rows written since, or, without a generation of this database's history, from SQLite
record by record, writing a new generation.

SQLite (store.py) stays the source of truth: a generation is only ever a faster way to the
columns a full load would give (tests/conformance/test_searchindex_snapshot.py compares them).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from skald.adapters.heap import release_freed_memory
from skald.adapters.local.index import quant as index_quant
from skald.adapters.local.index import sidecar as index_sidecar
from skald.adapters.local.index import snapshot as index_snapshot
from skald.adapters.local.index.columns import (
    Columns,
    F32Array,
    IntArray,
    Mask,
    Row,
    norm_uris,
)
from skald.adapters.local.index.quant import EXACT_ROWS

_LOAD_COLS = (
    "rid, account, uri, level, section, context_type, parent, ancestors, tags, memory_type, "
    "owner, peer, created_at, updated_at, vector, terms, tfs, doclen"
)

# A snapshot is reused with the rows added since read from SQLite while they number at most
# this many or an eighth of its rows (re-read and re-encoded at every open, their float32
# vectors in the scratch file, as a running server keeps the rows written to it); beyond, or
# with over a quarter of its rows deleted, the open writes a new generation from it and those
# rows (_renewed).
SNAPSHOT_DELTA_ROWS = 65_536


def load_columns(
    w: sqlite3.Connection,
    dimension: int,
    *,
    exact_rows: int = EXACT_ROWS,
    sidecar: Path | None = None,
) -> Columns:
    """Every stored record, in rowid order, as in-memory columns. Above `exact_rows` records
    the vectors are held compact (quant.py) and the columns and vectors come from the
    `sidecar` folder's generation (snapshot.py) plus the rows written since (renewing the
    generation when those are many); without a generation of this database's history they
    are rebuilt from SQLite, row by row, and a new generation written."""
    w.execute("BEGIN")  # one snapshot of the database for every pass
    try:
        identity = _identity(w, dimension)
        cols = (
            _from_snapshot(w, dimension, exact_rows, sidecar, identity)
            if sidecar is not None
            else None
        )
        if cols is None:
            cols = _load_rows(w, dimension, exact_rows)
            # Everything went into the BM25 delta: merge it into the compact CSR form.
            cols.lex = cols.lex.compacted()
            # Asked only here: importing faiss would cost a small index memory for nothing.
            if cols.n > exact_rows and index_quant.available():
                _load_compact(w, cols, sidecar, identity)
            else:
                _load_dense(w, cols)
    finally:
        w.execute("COMMIT")
    cols.scratch = sidecar
    release_freed_memory()
    return cols


def _identity(w: sqlite3.Connection, dimension: int) -> dict[str, str]:
    meta = dict(w.execute("SELECT key, value FROM meta").fetchall())
    return {
        "instance": str(meta.get("instance")),
        "tokenizer": str(meta.get("tokenizer")),
        "dimension": str(dimension),
    }


def _from_snapshot(
    w: sqlite3.Connection, dimension: int, exact_rows: int, sidecar: Path, identity: dict[str, str]
) -> Columns | None:
    """The current generation's columns and vectors, its rows deleted since killed and the
    rows added since appended (or a new generation written from them, when they are many);
    None when there is no generation of this database's history to start from."""
    key = index_sidecar.current_key(sidecar)
    if key is None:
        return None
    # Unordered, then sorted here: SQLite reads them from the (small) key index instead of
    # walking the whole table, several times faster on a large index.
    rids = np.sort(
        np.fromiter((r for (r,) in w.execute("SELECT rid FROM records")), dtype=np.int64)
    )
    if rids.size <= exact_rows or not index_quant.available():
        return None
    capacity = int(rids.size * 1.25)
    cols = index_snapshot.load(
        index_snapshot.path_of(sidecar, key), identity, dimension, exact_rows, capacity
    )
    if cols is None or cols.n == 0:
        return None
    held = cols.rid[: cols.n]
    added = rids[rids > held[-1]]
    kept = rids[: rids.size - added.size]
    at = np.searchsorted(held, kept)  # (kept <= held[-1]: every position is in range)
    if not np.array_equal(held[at], kept):
        return None  # rows the snapshot never saw below its last rowid: not this history
    if not _rows_agree(w, cols, at[-16:]):
        return None
    found = index_sidecar.load_sidecar(sidecar, key, dimension, cols.cap)
    if found is None or found[1].size != cols.n:
        return None
    last = int(held[-1])
    behind = added.size > max(SNAPSHOT_DELTA_ROWS, cols.n // 8) or (cols.n - kept.size) * 4 > cols.n
    cols.set_vectors(*found)
    alive = np.zeros(cols.n, dtype=np.bool_)
    alive[at] = True
    cols.kill(np.flatnonzero(~alive))
    if behind:
        # Only the float32 rows are read from here on: the codes go before the compaction
        # copies the columns, and the uncompacted columns right after it.
        found[0].drop_codes()
        found = None
        cols = cols.compacted()
        return _renewed(w, cols, sidecar, last, identity)
    cur = w.execute(f"SELECT {_LOAD_COLS} FROM records WHERE rid > ? ORDER BY rid", (last,))
    while chunk := cur.fetchmany(8192):
        cols.append(_rows(chunk, dimension))
    return cols


def _renewed(
    w: sqlite3.Connection, cols: Columns, sidecar: Path, last: int, identity: dict[str, str]
) -> Columns:
    """A new generation from a snapshot's live rows (`cols`, compacted; their float32 vectors
    read from its file) and the rows added since (rowids above `last`, from SQLite), its
    quantiser trained afresh: far cheaper than rebuilding every column row by row."""
    held = cols.n
    cur = w.execute(
        f"SELECT {_LOAD_COLS.replace('vector', 'NULL')} FROM records WHERE rid > ? ORDER BY rid",
        (last,),
    )
    while chunk := cur.fetchmany(8192):
        cols.append(_rows(chunk, cols.dim), vectors_later=True)
    cols.lex = cols.lex.compacted()
    old = cols.vectors

    def chunks() -> Iterator[tuple[int, F32Array, Mask]]:
        for s in range(0, held, 65_536):
            e = min(held, s + 65_536)
            has = cols.has_vec[s:e].copy()
            mat = np.zeros((e - s, cols.dim), dtype=np.float32)
            if has.any():
                mat[has] = old.exact(s + np.flatnonzero(has))
            yield s, mat, has
        yield from _vector_chunks(w, cols, held)

    try:
        _write_generation(cols, sidecar, identity, chunks())
    finally:
        old.close()  # the old generation's float32 file
    return cols


def _rows_agree(w: sqlite3.Connection, cols: Columns, rows: IntArray) -> bool:
    """Whether SQLite holds the snapshot's content at the rowids of `rows`. A database that
    lost its last transactions (power cut, a restored copy) reuses their rowids for other
    records, and those are then its highest rowids up to the snapshot's last: checking the
    last few kept rows finds it."""
    rids = cols.rid[rows].tolist()
    stored = {
        int(r[0]): (r[1], norm_uris(r[2]), int(r[3]), int(r[4]), float(r[5]))
        for r in w.execute(
            "SELECT rid, account, uri, level, section, updated_at FROM records "
            f"WHERE rid IN ({','.join('?' * len(rids))})",
            rids,
        )
    }
    account, uri = cols.strs["account"].values, cols.strs["uri"].values
    return all(
        stored.get(rid)
        == (
            account[int(cols.codes["account"][row])],
            uri[int(cols.codes["uri"][row])],
            int(cols.level[row]),
            int(cols.section[row]),
            float(cols.updated[row]),
        )
        for rid, row in zip(rids, rows.tolist(), strict=True)
    )


def _load_rows(w: sqlite3.Connection, dimension: int, exact_rows: int) -> Columns:
    """Every record but its vector."""
    total = int(w.execute("SELECT COUNT(*) FROM records").fetchone()[0])
    cols = Columns(dimension, capacity=max(1024, int(total * 1.25)), exact_rows=exact_rows)
    cur = w.execute(f"SELECT {_LOAD_COLS.replace('vector', 'NULL')} FROM records ORDER BY rid")
    while chunk := cur.fetchmany(8192):
        cols.append(_rows(chunk, dimension), vectors_later=True)
    return cols


def _rows(chunk: list[Any], dimension: int) -> list[Row]:
    """Rows of `_LOAD_COLS` tuples."""
    # JSON lists in bulk too: one parse per chunk rather than two per row.
    ancestors = json.loads("[" + ",".join(r[7] for r in chunk) + "]")
    tags = json.loads("[" + ",".join(r[8] for r in chunk) + "]")
    size = dimension * 4
    # Positional: _LOAD_COLS lists the columns in Row's field order.
    return [
        Row._make(
            (
                *r[:7],
                anc,
                tg,
                *r[9:14],
                np.frombuffer(r[14], dtype=np.float32)
                if r[14] is not None and len(r[14]) == size
                else None,
                r[15].split(" ") if r[15] else [],
                r[16],
                r[17],
            )
        )
        for r, anc, tg in zip(chunk, ancestors, tags, strict=True)
    ]


def _vector_chunks(
    w: sqlite3.Connection, cols: Columns, first: int = 0
) -> Iterator[tuple[int, F32Array, Mask]]:
    """(first row, vectors, has-vector) of the stored records of rows `first`.., in rowid
    order."""
    dimension, size, s = cols.dim, cols.dim * 4, first
    if first >= cols.n:
        return
    cur = w.execute(
        "SELECT rid, vector FROM records WHERE rid >= ? ORDER BY rid", (int(cols.rid[first]),)
    )
    while chunk := cur.fetchmany(8192):
        if int(chunk[0][0]) != int(cols.rid[s]):
            raise RuntimeError("the index changed while it was being loaded")
        # Vectors in bulk: one join and one frombuffer instead of an array per row.
        blobs = [r[1] for r in chunk]
        has = np.array([b is not None and len(b) == size for b in blobs], dtype=np.bool_)
        mat = np.zeros((len(chunk), dimension), dtype=np.float32)
        if has.any():
            joined = b"".join(b for b, h in zip(blobs, has.tolist(), strict=True) if h)
            mat[has] = np.frombuffer(joined, dtype=np.float32).reshape(-1, dimension)
        yield s, mat, has
        s += len(chunk)


def _load_dense(w: sqlite3.Connection, cols: Columns) -> None:
    for s, mat, has in _vector_chunks(w, cols):
        cols.put_vectors(s, mat, has)


def _load_compact(
    w: sqlite3.Connection, cols: Columns, sidecar: Path | None, identity: dict[str, str]
) -> None:
    """The compact vector column of rows loaded without vectors, from the sidecar generation
    of exactly these rows or built from SQLite; the generation gets the columns snapshot."""
    key = index_sidecar.sidecar_key(cols.rid[: cols.n])
    if sidecar is not None:
        # Only a generation written from this database: the same rowids in a file that was
        # replaced would be other records.
        found = (
            index_sidecar.load_sidecar(sidecar, key, cols.dim, cols.cap)
            if index_snapshot.matches(index_snapshot.path_of(sidecar, key), identity)
            else None
        )
        if found is not None:
            cols.set_vectors(*found)
            return
    _write_generation(cols, sidecar, identity, _vector_chunks(w, cols), key)


def _write_generation(
    cols: Columns,
    sidecar: Path | None,
    identity: dict[str, str],
    chunks: Iterator[tuple[int, F32Array, Mask]],
    key: str | None = None,
) -> None:
    """Installs the compact vector column built from `chunks` (every row's float32 vector,
    in row order) and writes it, with the columns snapshot, as the sidecar's generation
    (`key`: the rows' sidecar_key, when the caller has it)."""
    key = key or index_sidecar.sidecar_key(cols.rid[: cols.n])
    writer = index_sidecar.SidecarWriter(sidecar, key, cols.n, cols.dim)
    if sidecar is not None and writer.on_disk:
        # Before the vectors: publishing them marks the generation complete.
        index_snapshot.save(index_snapshot.path_of(sidecar, key), cols, identity)
    for s, mat, has in chunks:
        writer.put(s, mat, has)
    cols.set_vectors(writer.finish(cols.cap), writer.has)


def sidecar_path(path: Path) -> Path:
    """The folder of the vector sidecar of the index file `path`."""
    return path.with_name(path.name + ".vectors")
