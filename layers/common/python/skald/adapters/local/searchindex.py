"""Embedded SearchIndex: records in SQLite (WAL) on disk; filtering and ranking in memory.

SQLite is the source of truth: `records` holds every IndexRecord, its vector as a float32 blob.
At open the records are loaded into columnar numpy arrays: the vector matrix, coded strings
(account, uri, parent, context_type, ...), numbers, flat (value, row) postings of ancestors and
tags, and BM25 term postings (see bm25.py for why BM25 is not FTS5's). Every filter is then a
vectorised boolean mask over rows, applied before ranking, so a filter never starves a top-k.

Rows are never edited in place: an upsert of an existing key deletes the old row and appends a
new one with a fresh rowid (from a monotonic counter), so rows stay in rowid order and postings
of a deleted row are just masked out. Tombstones are dropped, and the BM25 delta postings merged,
by a compaction that builds new arrays off to the side and swaps them in.

Concurrency: writers are serialised by a mutex and do their SQL inside a transaction; only the
COMMIT and the in-memory update run under the exclusive side of a readers-writer lock, so a
reader always sees SQLite and memory in the same state and never waits for SQL writes.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import json
import math
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from skald.adapters.local import bm25
from skald.domain.filter_tree import (
    MAX_TREE_DEPTH,
    RANGE_OPS,
    STRING_FIELDS,
    as_list,
    number_value,
    only_keys,
    string_value,
    tree_field,
)
from skald.domain.fusion import RRF_BEST, rrf_contribution
from skald.ports import IndexFilter, IndexHit, IndexQuery, IndexRecord

Mask = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
F32Array = npt.NDArray[np.float32]

SCHEMA_VERSION = 1



def _norm_uri(uri: str) -> str:
    """Canonical form for matching: no trailing slash, except on a bare scheme root."""
    while uri.endswith("/") and not uri.endswith("://"):
        uri = uri[:-1]
    return uri


def _norm_uris(uri: str) -> str:
    # The common case (no trailing slash) without a loop: this runs for every loaded URI.
    return _norm_uri(uri) if uri.endswith("/") else uri


# --------------------------------------------------------------------------------------------
# Small helpers: a readers-writer lock and a string interner.


class _RWLock:
    """Many readers or one writer; a waiting writer blocks new readers (no writer starvation).
    Not re-entrant: never take the read side twice in one thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class _Interner:
    """String <-> int code for one field. Code 0 is None (absent)."""

    def __init__(self) -> None:
        self.values: list[str | None] = [None]
        self.codes: dict[str | None, int] = {None: 0}
        self._sorted: tuple[int, list[str], IntArray] | None = None

    def add(self, value: str | None) -> int:
        code = self.codes.get(value)
        if code is None:
            code = len(self.values)
            self.codes[value] = code
            self.values.append(value)
        return code

    def add_many(self, values: list[str | None]) -> list[int]:
        codes = self.codes
        for v in set(values).difference(codes):
            codes[v] = len(self.values)
            self.values.append(v)
        return list(map(codes.__getitem__, values))

    def get(self, value: str | None) -> int | None:
        return self.codes.get(value)

    def lut(self, values: Iterable[str | None]) -> Mask:
        """Boolean lookup table over codes: True for the given values."""
        table = np.zeros(len(self.values), dtype=np.bool_)
        codes = [c for c in (self.codes.get(v) for v in values) if c is not None]
        if codes:
            table[codes] = True
        return table

    def prefix_lut(self, prefix: str) -> Mask:
        # A sorted view, rebuilt only when values were added since the last prefix query.
        view = self._sorted
        if view is None or view[0] != len(self.values):
            pairs = sorted((v, c) for c, v in enumerate(self.values) if v is not None)
            view = (
                len(self.values),
                [v for v, _ in pairs],
                np.array([c for _, c in pairs], dtype=np.int64),
            )
            self._sorted = view
        _, keys, codes = view
        lo = bisect.bisect_left(keys, prefix)
        hi = bisect.bisect_left(keys, prefix + "\U0010ffff")
        table = np.zeros(len(self.values), dtype=np.bool_)
        table[codes[lo:hi]] = True
        return table

    def remapped(self, used: IntArray) -> tuple[_Interner, npt.NDArray[np.int32]]:
        """A fresh interner holding only the `used` codes, and the old -> new code table."""
        new = _Interner()
        remap = np.zeros(len(self.values), dtype=np.int32)
        for code in used.tolist():
            remap[code] = new.add(self.values[code])
        return new, remap


class _Multi:
    """A multi-valued field (ancestors, tags) as flat (value code, row) pairs."""

    def __init__(self) -> None:
        self.strs = _Interner()
        self.n = 0
        self.code = np.zeros(1024, dtype=np.int32)
        self.row = np.zeros(1024, dtype=np.int32)

    def add(self, rows: Sequence[int], values: Sequence[Sequence[str]]) -> None:
        codes = self.strs.add_many(list(chain.from_iterable(values)))
        owners = np.repeat(np.asarray(rows, dtype=np.int32), [len(v) for v in values])
        need = self.n + len(codes)
        if need > self.code.size:
            cap = max(need, self.code.size * 2)
            new_code = np.zeros(cap, dtype=np.int32)
            new_row = np.zeros(cap, dtype=np.int32)
            new_code[: self.n] = self.code[: self.n]
            new_row[: self.n] = self.row[: self.n]
            self.code, self.row = new_code, new_row
        self.code[self.n : need] = codes
        self.row[self.n : need] = owners
        self.n = need

    def rows_mask(self, lut: Mask, n_rows: int) -> Mask:
        """Rows having at least one value whose code is True in `lut` (dead rows included:
        the caller's mask removes them)."""
        hit = lut[self.code[: self.n]]
        out = np.zeros(n_rows, dtype=np.bool_)
        out[self.row[: self.n][hit]] = True
        return out

    def values_mask(self, values: Iterable[str], n_rows: int) -> Mask:
        return self.rows_mask(self.strs.lut(values), n_rows)

    def prefix_mask(self, prefix: str, n_rows: int) -> Mask:
        return self.rows_mask(self.strs.prefix_lut(prefix), n_rows)

    def compacted(self, row_map: IntArray) -> _Multi:
        rows = row_map[self.row[: self.n]]
        keep = rows >= 0
        codes = self.code[: self.n][keep]
        new = _Multi()
        new.strs, remap = self.strs.remapped(np.unique(codes))
        m = int(keep.sum())
        cap = max(1024, int(m * 1.25))
        new.code = np.zeros(cap, dtype=np.int32)
        new.row = np.zeros(cap, dtype=np.int32)
        new.code[:m] = remap[codes]
        new.row[:m] = rows[keep]
        new.n = m
        return new


# --------------------------------------------------------------------------------------------
# The in-memory columns.


class _Row(NamedTuple):
    """One record's index-relevant fields, decoded from SQLite or from an IndexRecord
    (a NamedTuple: opening builds one per stored record, and tuples are cheap)."""

    rid: int
    account: str
    uri: str
    level: int
    section: int
    context_type: str
    parent: str
    ancestors: list[str]
    tags: list[str]
    memory_type: str | None
    owner: str | None
    peer: str | None
    created_at: float
    updated_at: float
    vector: F32Array | None
    terms: list[str]  # distinct BM25 terms
    tfs: bytes  # their frequencies, little-endian uint16
    doclen: int


class _Columns:
    """Columnar, append-only (plus tombstones) view of every record, in rowid order."""

    def __init__(self, dimension: int, capacity: int = 1024) -> None:
        self.dim = dimension
        self.n = 0
        self.dead = 0
        self.cap = max(capacity, 16)
        self.vec = np.zeros((self.cap, dimension), dtype=np.float32)
        self.rid = np.zeros(self.cap, dtype=np.int64)
        self.alive = np.zeros(self.cap, dtype=np.bool_)
        self.has_vec = np.zeros(self.cap, dtype=np.bool_)
        self.level = np.zeros(self.cap, dtype=np.int64)
        self.section = np.zeros(self.cap, dtype=np.int64)
        self.created = np.zeros(self.cap, dtype=np.float64)
        self.updated = np.zeros(self.cap, dtype=np.float64)
        self.doclen = np.zeros(self.cap, dtype=np.float32)
        self.strs = {f: _Interner() for f in ("account", *STRING_FIELDS)}
        self.codes = {f: np.zeros(self.cap, dtype=np.int32) for f in self.strs}
        self.multi = {"ancestors": _Multi(), "tags": _Multi()}
        self.lex = bm25.Postings()
        self.key_to_row: dict[tuple[int, int, int, int], int] = {}

    # ---- writes (callers hold the exclusive lock) ----

    def _grow(self, need: int) -> None:
        if need <= self.cap:
            return
        cap = max(need, self.cap * 2)
        n = self.n

        def grown(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
            b = np.zeros((cap, *a.shape[1:]), dtype=a.dtype)
            b[:n] = a[:n]
            return b

        self.vec, self.rid, self.alive = grown(self.vec), grown(self.rid), grown(self.alive)
        self.has_vec, self.level = grown(self.has_vec), grown(self.level)
        self.section, self.doclen = grown(self.section), grown(self.doclen)
        self.created, self.updated = grown(self.created), grown(self.updated)
        self.codes = {f: grown(a) for f, a in self.codes.items()}
        self.cap = cap

    def append(
        self,
        rows: Sequence[_Row],
        vectors: F32Array | None = None,
        has_vec: Mask | None = None,
    ) -> None:
        """Appends rows; their vectors come from `rows` or, in bulk, from `vectors`/`has_vec`."""
        if not rows:
            return
        s, e = self.n, self.n + len(rows)
        rids = np.array([r.rid for r in rows], dtype=np.int64)
        if (s and rids[0] <= self.rid[s - 1]) or np.any(np.diff(rids) <= 0):
            raise AssertionError("rows must be appended in increasing rowid order")
        self._grow(e)
        self.rid[s:e] = rids
        self.alive[s:e] = True
        self.level[s:e] = [r.level for r in rows]
        self.section[s:e] = [r.section for r in rows]
        self.created[s:e] = [r.created_at for r in rows]
        self.updated[s:e] = [r.updated_at for r in rows]
        self.doclen[s:e] = [r.doclen for r in rows]
        if vectors is not None and has_vec is not None:
            self.vec[s:e] = vectors
            self.has_vec[s:e] = has_vec
        else:
            with_vec = [i for i, r in enumerate(rows) if r.vector is not None]
            self.has_vec[s:e] = False
            if with_vec:
                self.vec[[s + i for i in with_vec]] = np.stack(
                    [rows[i].vector for i in with_vec]  # type: ignore[misc]
                )
                self.has_vec[[s + i for i in with_vec]] = True
        for f in ("account", "context_type", "memory_type", "owner", "peer"):
            self.codes[f][s:e] = self.strs[f].add_many([getattr(r, f) for r in rows])
        for f in ("uri", "parent"):
            values = [_norm_uris(getattr(r, f)) for r in rows]
            self.codes[f][s:e] = self.strs[f].add_many(values)  # type: ignore[arg-type]
        row_ids = range(s, e)
        self.multi["ancestors"].add(row_ids, [
            list(dict.fromkeys([a if a[-1:] != "/" else _norm_uri(a) for a in r.ancestors]))
            for r in rows
        ])
        self.multi["tags"].add(row_ids, [list(dict.fromkeys(r.tags)) for r in rows])
        self.lex.add(row_ids, [r.terms for r in rows], [r.tfs for r in rows])
        acct, uri = self.codes["account"], self.codes["uri"]
        for i, r in zip(row_ids, rows, strict=True):
            self.key_to_row[(int(acct[i]), int(uri[i]), r.level, r.section)] = i
        self.n = e

    def kill(self, rows: IntArray) -> None:
        rows = rows[self.alive[rows]]
        if rows.size == 0:
            return
        acct, uri = self.codes["account"], self.codes["uri"]
        for i in rows.tolist():
            key = (int(acct[i]), int(uri[i]), int(self.level[i]), int(self.section[i]))
            self.key_to_row.pop(key, None)
        self.alive[rows] = False
        self.has_vec[rows] = False
        self.dead += int(rows.size)

    def needs_compaction(self) -> bool:
        return self.dead > 1024 and self.dead * 4 > self.n

    def compacted(self) -> _Columns:
        """A copy without tombstones (row order, hence rowid order, kept), with merged BM25
        postings and fresh interners, so strings of deleted records do not pile up."""
        keep = np.flatnonzero(self.alive[: self.n])
        m = int(keep.size)
        new = _Columns(self.dim, capacity=max(1024, int(m * 1.25)))
        new.n = m
        for name in ("vec", "rid", "alive", "has_vec", "level", "section", "created",
                     "updated", "doclen"):
            getattr(new, name)[:m] = getattr(self, name)[keep]
        for f, interner in self.strs.items():
            old = self.codes[f][keep]
            new.strs[f], remap = interner.remapped(np.unique(old))
            new.codes[f][:m] = remap[old]
        row_map = np.full(self.n, -1, dtype=np.int64)
        row_map[keep] = np.arange(m, dtype=np.int64)
        new.multi = {f: mv.compacted(row_map) for f, mv in self.multi.items()}
        new.lex = self.lex.compacted(row_map)
        acct, uri = new.codes["account"][:m].tolist(), new.codes["uri"][:m].tolist()
        levels, sections = new.level[:m].tolist(), new.section[:m].tolist()
        new.key_to_row = {
            k: i for i, k in enumerate(zip(acct, uri, levels, sections, strict=True))
        }
        return new

    # ---- reads ----

    def key_of(self, account: str, uri: str, level: int, section: int) -> int | None:
        a, u = self.strs["account"].get(account), self.strs["uri"].get(_norm_uri(uri))
        if a is None or u is None:
            return None
        return self.key_to_row.get((a, u, level, section))

    def str_mask(self, field: str, values: Iterable[str | None]) -> Mask:
        return self.strs[field].lut(values)[self.codes[field][: self.n]]

    def str_prefix_mask(self, field: str, prefix: str) -> Mask:
        return self.strs[field].prefix_lut(prefix)[self.codes[field][: self.n]]

    def order_key(self, row: int) -> tuple[str, int, int]:
        uri = self.strs["uri"].values[int(self.codes["uri"][row])] or ""
        return (uri, int(self.level[row]), int(self.section[row]))

    def order_keys(self, rows: Sequence[int] | IntArray) -> list[tuple[str, int, int]]:
        """order_key of many rows with three fancy-indexing reads instead of a call per row
        (this runs on every query, for every ranked candidate)."""
        idx = np.asarray(rows, dtype=np.int64)
        values = self.strs["uri"].values
        uris = [values[c] or "" for c in self.codes["uri"][idx].tolist()]
        return list(zip(uris, self.level[idx].tolist(), self.section[idx].tolist(),
                        strict=True))


# --------------------------------------------------------------------------------------------
# SQLite.

_COLS = (
    "account, uri, level, section, context_type, parent, ancestors, text, abstract, vector, "
    "line_start, line_end, tags, memory_type, owner, peer, created_at, updated_at"
)
# Search hits carry no vector (as on OpenSearch): reading and converting 384 floats per hit
# was a tenth of a find's index time.
_HIT_COLS = _COLS.replace("vector", "NULL")
_LOAD_COLS = (
    "rid, account, uri, level, section, context_type, parent, ancestors, tags, memory_type, "
    "owner, peer, created_at, updated_at, vector, terms, tfs, doclen"
)
_SCHEMA = """CREATE TABLE IF NOT EXISTS records (
    -- AUTOINCREMENT: a rowid is never reused, so rows stay in rowid order in memory.
    rid INTEGER PRIMARY KEY AUTOINCREMENT,
    account TEXT NOT NULL,
    uri TEXT NOT NULL,
    level INTEGER NOT NULL,
    section INTEGER NOT NULL,
    context_type TEXT NOT NULL,
    parent TEXT NOT NULL,
    ancestors TEXT NOT NULL,
    text TEXT NOT NULL,
    abstract TEXT NOT NULL,
    vector BLOB,
    line_start INTEGER,
    line_end INTEGER,
    tags TEXT NOT NULL,
    memory_type TEXT,
    owner TEXT,
    peer TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    -- BM25 term counts of `text` (derived, so opening needs no re-tokenisation): distinct
    -- terms joined by spaces, their frequencies as little-endian uint16, the token count.
    terms TEXT NOT NULL,
    tfs BLOB NOT NULL,
    doclen INTEGER NOT NULL,
    UNIQUE (account, uri, level, section)
)"""


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    # Autocommit mode: the writer's transactions are explicit (BEGIN IMMEDIATE ... COMMIT).
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    if readonly:
        conn.execute("PRAGMA query_only = 1")
    return conn


# --------------------------------------------------------------------------------------------
# The index.


@dataclass
class _Prepared:
    record: IndexRecord
    vector: F32Array | None
    terms: list[str]
    tfs: bytes
    doclen: int


Ranked = list[tuple[int, float, float | None, float | None]]  # row, score, dense, lexical


class LocalSearchIndex:
    """SearchIndex over one SQLite file (WAL) with exact in-memory vector search and BM25.

    `path` is the database file (or a directory, which then holds `index.sqlite3`).
    `stemming` switches the Porter stemmer of the BM25 tokenizer (on by default)."""

    def __init__(self, path: Path, dimension: int, *, stemming: bool = True) -> None:
        if dimension < 1:
            raise ValueError("dimension must be >= 1")
        path = Path(path)
        if path.is_dir():
            path = path / "index.sqlite3"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._dim = dimension
        self._stemming = stemming
        _single_threaded_blas()
        self._rw = _RWLock()
        self._wlock = threading.Lock()
        self._idle_readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        self._w = _connect(path, readonly=False)
        self._conns.append(self._w)
        self._init_schema()
        self._cols = self._load()
        self._next_rid = self._max_rid() + 1

    # ---- lifecycle ----

    def _init_schema(self) -> None:
        w = self._w
        w.execute("PRAGMA journal_mode = WAL")
        # The index is derived and rebuildable: NORMAL keeps WAL commits cheap and atomic.
        w.execute("PRAGMA synchronous = NORMAL")
        w.execute("BEGIN IMMEDIATE")
        try:
            w.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            meta = dict(w.execute("SELECT key, value FROM meta").fetchall())
            if meta:
                if meta.get("schema_version") != str(SCHEMA_VERSION):
                    raise ValueError(f"{self._path}: unsupported index schema version")
                if meta.get("dimension") != str(self._dim):
                    raise ValueError(
                        f"{self._path} holds {meta.get('dimension')}-d vectors, not {self._dim}"
                        "-d: reindex into a new index after changing the embedding model"
                    )
            else:
                w.executemany(
                    "INSERT INTO meta(key, value) VALUES (?, ?)",
                    [("schema_version", str(SCHEMA_VERSION)), ("dimension", str(self._dim))],
                )
            w.execute(_SCHEMA)
            tokenizer = bm25.tokenizer_id(self._stemming)
            if meta.get("tokenizer", tokenizer) != tokenizer:
                self._retokenize()
            w.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('tokenizer', ?)",
                      (tokenizer,))
            w.execute("COMMIT")
        except BaseException:
            w.execute("ROLLBACK")
            raise

    def _retokenize(self) -> None:
        """Recomputes the persisted BM25 term counts (the tokenizer changed)."""
        w = self._w
        cur = w.execute("SELECT rid, text FROM records")
        while chunk := cur.fetchmany(4096):
            updates = []
            for rid, text in chunk:
                terms, tfs, doclen = bm25.term_counts(text, self._stemming)
                updates.append((" ".join(terms), tfs, doclen, rid))
            w.executemany("UPDATE records SET terms = ?, tfs = ?, doclen = ? WHERE rid = ?",
                          updates)

    def close(self) -> None:
        with self._wlock, self._rw.write():
            if self._closed:
                return
            self._closed = True
            with self._conns_lock:
                for conn in self._conns:
                    conn.close()
                self._conns.clear()

    def __enter__(self) -> LocalSearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the search index is closed")

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        # A pool rather than thread-locals: connections never outlive close(), whatever thread.
        self._check_open()
        try:
            conn = self._idle_readers.get_nowait()
        except queue.Empty:
            conn = _connect(self._path, readonly=True)
            with self._conns_lock:
                self._conns.append(conn)
        try:
            yield conn
        finally:
            self._idle_readers.put(conn)

    def _max_rid(self) -> int:
        seq = self._w.execute("SELECT seq FROM sqlite_sequence WHERE name = 'records'").fetchone()
        top = self._w.execute("SELECT COALESCE(MAX(rid), 0) FROM records").fetchone()
        return max(int(seq[0]) if seq else 0, int(top[0]))

    def _load(self) -> _Columns:
        total = int(self._w.execute("SELECT COUNT(*) FROM records").fetchone()[0])
        cols = _Columns(self._dim, capacity=max(1024, int(total * 1.25)))
        cur = self._w.execute(f"SELECT {_LOAD_COLS} FROM records ORDER BY rid")
        size = self._dim * 4
        while chunk := cur.fetchmany(8192):
            # JSON lists in bulk too: one parse per chunk rather than two per row.
            ancestors = json.loads("[" + ",".join(r[7] for r in chunk) + "]")
            tags = json.loads("[" + ",".join(r[8] for r in chunk) + "]")
            # Vectors in bulk: one join and one frombuffer instead of an array per row.
            blobs = [r[14] for r in chunk]
            has = np.array([b is not None and len(b) == size for b in blobs], dtype=np.bool_)
            mat = np.zeros((len(chunk), self._dim), dtype=np.float32)
            if has.any():
                joined = b"".join(b for b, h in zip(blobs, has.tolist(), strict=True) if h)
                mat[has] = np.frombuffer(joined, dtype=np.float32).reshape(-1, self._dim)
            # Positional: _LOAD_COLS lists the columns in _Row's field order.
            rows = [
                _Row._make((*r[:7], anc, tg, *r[9:14], None,
                            r[15].split(" ") if r[15] else [], r[16], r[17]))
                for r, anc, tg in zip(chunk, ancestors, tags, strict=True)
            ]
            cols.append(rows, mat, has)
        # Everything went into the BM25 delta: merge it into the compact CSR form.
        cols.lex = cols.lex.compacted()
        return cols

    # ---- writes ----

    def _prepare(self, rec: IndexRecord) -> _Prepared:
        """Validation, normalisation and tokenisation, done before taking any lock."""
        if not rec.account or not rec.uri:
            raise ValueError("IndexRecord.account and IndexRecord.uri are required")
        vec: F32Array | None = None
        if rec.vector is not None:
            arr = np.asarray(rec.vector, dtype=np.float32)
            if arr.shape != (self._dim,):
                raise ValueError(
                    f"{rec.uri}: vector has {arr.size} dimensions, the index {self._dim}"
                )
            norm = float(np.linalg.norm(arr))
            if not math.isfinite(norm):
                raise ValueError(f"{rec.uri}: vector is not finite")
            # Stored normalised so a dot product is the cosine; a zero vector cannot rank.
            vec = (arr / np.float32(norm)).astype(np.float32) if norm > 0 else None
        terms, tfs, doclen = bm25.term_counts(rec.text or "", self._stemming)
        return _Prepared(rec, vec, terms, tfs, doclen)

    @staticmethod
    def _sql_values(rid: int, p: _Prepared) -> tuple[Any, ...]:
        r = p.record
        return (
            rid, r.account, r.uri, int(r.level), int(r.section), r.context_type, r.parent,
            json.dumps(list(r.ancestors)), r.text or "", r.abstract or "",
            None if p.vector is None else p.vector.tobytes(), r.line_start, r.line_end,
            json.dumps(list(r.tags)), r.memory_type, r.owner, r.peer, float(r.created_at),
            float(r.updated_at), " ".join(p.terms), p.tfs, p.doclen,
        )

    @staticmethod
    def _as_row(rid: int, p: _Prepared) -> _Row:
        r = p.record
        return _Row(
            rid=rid, account=r.account, uri=r.uri, level=int(r.level), section=int(r.section),
            context_type=r.context_type, parent=r.parent, ancestors=list(r.ancestors),
            tags=list(r.tags), memory_type=r.memory_type, owner=r.owner, peer=r.peer,
            created_at=float(r.created_at), updated_at=float(r.updated_at), vector=p.vector,
            terms=p.terms, tfs=p.tfs, doclen=p.doclen,
        )

    def _write(self, kill_rows: IntArray, upserts: Sequence[_Prepared]) -> None:
        """One atomic change: delete `kill_rows`, then insert `upserts` (unique keys),
        replacing the rows holding their keys. The caller holds self._wlock."""
        self._check_open()
        cols = self._cols
        kill = set(kill_rows.tolist())
        for p in upserts:
            r = p.record
            row = cols.key_of(r.account, r.uri, int(r.level), int(r.section))
            if row is not None:
                kill.add(row)
        kill_arr = np.array(sorted(kill), dtype=np.int64)
        rid = self._next_rid
        new_rows = [self._as_row(rid + i, p) for i, p in enumerate(upserts)]
        w = self._w
        w.execute("BEGIN IMMEDIATE")
        try:
            if kill_arr.size:
                w.executemany(
                    "DELETE FROM records WHERE rid = ?", [(x,) for x in cols.rid[kill_arr].tolist()]
                )
            if upserts:
                w.executemany(
                    f"INSERT INTO records(rid, {_COLS}, terms, tfs, doclen) "
                    f"VALUES ({', '.join('?' * 22)})",
                    [self._sql_values(rid + i, p) for i, p in enumerate(upserts)],
                )
        except BaseException:
            w.execute("ROLLBACK")
            raise
        with self._rw.write():
            try:
                w.execute("COMMIT")
            except BaseException:
                w.execute("ROLLBACK")
                raise
            self._next_rid = rid + len(upserts)
            try:
                cols.kill(kill_arr)
                cols.append(new_rows)
            except BaseException:
                # Memory no longer mirrors SQLite: rebuild it from the source of truth.
                self._cols = self._load()
                raise
        # Compaction reads `cols` while searches go on; only the swap excludes them.
        if cols.needs_compaction():
            fresh = cols.compacted()
            with self._rw.write():
                self._cols = fresh
        elif cols.lex.needs_merge():
            merged = cols.lex.compacted()
            with self._rw.write():
                cols.lex = merged

    def upsert(self, records: Sequence[IndexRecord]) -> None:
        if not records:
            return
        latest: dict[tuple[str, str, int, int], _Prepared] = {}
        for rec in records:  # the last record of a key wins
            latest[(rec.account, rec.uri, int(rec.level), int(rec.section))] = self._prepare(rec)
        with self._wlock:
            self._write(np.zeros(0, dtype=np.int64), list(latest.values()))

    def _account_rows(self, account: str, extra: Mask) -> IntArray:
        cols = self._cols
        code = cols.strs["account"].get(account)
        if code is None:
            return np.zeros(0, dtype=np.int64)
        mask = cols.alive[: cols.n] & (cols.codes["account"][: cols.n] == code) & extra
        return np.flatnonzero(mask).astype(np.int64)

    def delete_uris(self, account: str, uris: Sequence[str]) -> int:
        if not uris:
            return 0
        with self._wlock:
            uri_mask = self._cols.str_mask("uri", [_norm_uri(u) for u in uris])
            rows = self._account_rows(account, uri_mask)
            if rows.size:
                self._write(rows, [])
            return int(rows.size)

    def delete_prefix(self, account: str, prefix: str) -> int:
        with self._wlock:
            rows = self._account_rows(account, self._scope_mask(self._cols, [prefix]))
            if rows.size:
                self._write(rows, [])
            return int(rows.size)

    def replace_sections(
        self, account: str, uri: str, level: int, records: Sequence[IndexRecord]
    ) -> None:
        self.replace_many(account, {(uri, level): records})

    def replace_many(
        self, account: str, sets: Mapping[tuple[str, int], Sequence[IndexRecord]]
    ) -> None:
        latest: dict[tuple[str, int, int], _Prepared] = {}
        for (uri, level), records in sets.items():
            for rec in records:
                if rec.account != account or rec.uri != uri or int(rec.level) != int(level):
                    raise ValueError("replace_sections: every record must have the given "
                                     "account, uri and level")
                latest[(_norm_uri(uri), int(level), int(rec.section))] = self._prepare(rec)
        wanted = {(_norm_uri(uri), int(level)) for uri, level in sets}
        if not wanted:
            return
        with self._wlock:
            cols = self._cols
            rows = self._account_rows(
                account, cols.str_mask("uri", sorted({u for u, _ in wanted})))
            values, codes = cols.strs["uri"].values, cols.codes["uri"]
            stale = [r for r in rows.tolist()
                     if (values[codes[r]], int(cols.level[r])) in wanted]
            self._write(np.asarray(stale, dtype=np.int64), list(latest.values()))

    # ---- reads ----

    def get(self, account: str, uri: str) -> list[IndexRecord]:
        with self._rw.read(), self._reader() as conn:
            rows = conn.execute(
                f"SELECT {_COLS} FROM records WHERE account = ? AND uri = ? "
                "ORDER BY level, section",
                (account, uri),
            ).fetchall()
        return [_record(r) for r in rows]

    def count(self, account: str, flt: IndexFilter | None = None) -> int:
        with self._rw.read():
            self._check_open()
            masks = self._filter_mask(self._cols, account, flt or IndexFilter())
            return 0 if masks is None else int(masks[0].sum())

    def search(self, query: IndexQuery) -> list[IndexHit]:
        mode = query.mode
        if mode not in ("dense", "lexical", "hybrid"):
            raise ValueError(f"unknown search mode {mode!r}: expected dense, lexical or hybrid")
        if query.limit < 0:
            raise ValueError("limit must be >= 0")
        qvec: F32Array | None = None
        if mode in ("dense", "hybrid"):
            if query.vector is None and query.vector_source is None:
                raise ValueError(f"{mode} search needs a query vector")
            if mode == "dense" or query.vector is not None:
                qvec = self._unit_query(query)
        terms: list[str] = []
        if mode in ("lexical", "hybrid"):
            if query.text is None:
                raise ValueError(f"{mode} search needs a query text")
            terms = bm25.query_terms(query.text, self._stemming)

        with self._rw.read():
            self._check_open()
            cols = self._cols
            # Validate the filter even when nothing can match, so a bad one always fails.
            masks = self._filter_mask(cols, query.account, query.filter)
            if masks is None or query.limit == 0:
                return []
            mask, base = masks
            if not mask.any():
                return []
            with self._reader() as conn:
                read: dict[int, IndexRecord] = {}

                def prefetch(rows: list[int]) -> None:
                    read.update(_hydrate(conn, [int(cols.rid[r]) for r in rows]))

                ranked = self._rank(cols, mask, base, query, qvec, terms, prefetch)
                if query.score_threshold is not None:
                    ranked = [h for h in ranked if h[1] >= query.score_threshold]
                rids = [int(cols.rid[h[0]]) for h in ranked]
                read.update(_hydrate(conn, [rid for rid in rids if rid not in read]))
        return [
            IndexHit(read[rid], score, dense, lexical)
            for (_, score, dense, lexical), rid in zip(ranked, rids, strict=True)
            if rid in read
        ]

    def _unit_query(self, query: IndexQuery) -> F32Array:
        raw = query.dense_vector()
        if raw is None:
            raise ValueError("the search needs a query vector")
        qvec = np.asarray(raw, dtype=np.float32)
        if qvec.shape != (self._dim,):
            raise ValueError(f"query vector has {qvec.size} dimensions, the index {self._dim}")
        norm = float(np.linalg.norm(qvec))
        if not math.isfinite(norm) or norm == 0.0:
            raise ValueError("query vector is zero or not finite")
        unit: F32Array = qvec / np.float32(norm)
        return unit

    # ---- ranking ----

    def _rank(
        self,
        cols: _Columns,
        mask: Mask,
        base: Mask,
        query: IndexQuery,
        qvec: F32Array | None,
        terms: list[str],
        prefetch: Callable[[list[int]], None],
    ) -> Ranked:
        limit = query.limit
        if query.mode == "dense":
            assert qvec is not None
            rows, scores = _dense_top(cols, mask, qvec, limit)
            return [(r, s, s, None) for r, s in zip(rows, scores, strict=True)]
        if query.mode == "lexical":
            rows, scores = _lexical_top(cols, mask, base, terms, limit)
            return [(r, s, None, s) for r, s in zip(rows, scores, strict=True)]
        # Hybrid: reciprocal rank fusion of both rankings, each over every record passing
        # the filter, down to the candidate depth. The keyword side first: a query vector
        # still being embedded is awaited only now.
        depth = max(limit * 4, 50)
        l_rows, l_scores = _lexical_top(cols, mask, base, terms, depth)
        if qvec is None:
            # The model is still running: read the keyword side's best rows meanwhile, most
            # of which the fused top keeps.
            prefetch(l_rows[:limit])
            qvec = self._unit_query(query)
        d_rows, d_scores = _dense_top(cols, mask, qvec, depth)
        fused: dict[int, float] = {}
        for ranking in (d_rows, l_rows):
            for rank, row in enumerate(ranking, start=1):
                fused[row] = fused.get(row, 0.0) + rrf_contribution(rank)
        if not fused:
            return []
        dense_known = dict(zip(d_rows, d_scores, strict=True))
        lexical_known = dict(zip(l_rows, l_scores, strict=True))
        missing = [r for r in fused if r not in dense_known and bool(cols.has_vec[r])]
        if missing:
            sims = np.clip(_matvec(cols.vec[missing], qvec), -1.0, 1.0)
            dense_known.update(zip(missing, sims.tolist(), strict=True))
        candidates = list(fused)
        keys = dict(zip(candidates, cols.order_keys(candidates), strict=True))
        order = sorted(candidates, key=lambda r: (-fused[r], keys[r]))[:limit]
        return [
            (r, min(fused[r] / RRF_BEST, 1.0), dense_known.get(r), lexical_known.get(r))
            for r in order
        ]

    # ---- filters ----

    @staticmethod
    def _scope_mask(cols: _Columns, scopes: Sequence[str]) -> Mask:
        n = cols.n
        norm = [_norm_uri(s) for s in scopes]
        if any(s.endswith("://") for s in norm):
            return np.ones(n, dtype=np.bool_)  # a scheme root scopes everything
        return cols.str_mask("uri", norm) | cols.multi["ancestors"].values_mask(norm, n)

    def _filter_mask(
        self, cols: _Columns, account: str, f: IndexFilter
    ) -> tuple[Mask, Mask] | None:
        """(rows of `account` passing `f`, live rows of `account`); None for an account
        without rows. Raises ValueError on a malformed filter."""
        if f.time_field not in ("updated_at", "created_at"):
            raise ValueError(f"time_field must be updated_at or created_at, not {f.time_field!r}")
        tree = _tree_mask(cols, f.tree, 0) if f.tree is not None else None
        code = cols.strs["account"].get(account)
        if code is None:
            return None
        n = cols.n
        base: Mask = cols.alive[:n] & (cols.codes["account"][:n] == code)
        mask = base.copy()
        if f.scopes:
            mask &= self._scope_mask(cols, as_list(f.scopes))
        if f.exclude_scopes:
            mask &= ~self._scope_mask(cols, as_list(f.exclude_scopes))
        if f.context_types is not None:
            mask &= cols.str_mask("context_type", as_list(f.context_types))
        if f.levels is not None:
            levels = [f.levels] if isinstance(f.levels, int) else list(f.levels)
            mask &= np.isin(cols.level[:n], np.asarray(levels, dtype=np.int64))
        for tag in as_list(f.tags_all):
            mask &= cols.multi["tags"].values_mask([tag], n)
        times = cols.updated if f.time_field == "updated_at" else cols.created
        if f.since is not None:
            mask &= times[:n] >= float(f.since)
        if f.until is not None:
            mask &= times[:n] <= float(f.until)
        if tree is not None:
            mask &= tree
        return mask, base


# --------------------------------------------------------------------------------------------
# Ranking helpers (read-only over a _Columns snapshot).


def _top(cols: _Columns, rows: IntArray, scores: FloatArray, k: int) -> tuple[
    list[int], list[float]
]:
    """Best k of (rows, scores), ties broken by (uri, level, section)."""
    if k <= 0 or rows.size == 0:
        return [], []
    if rows.size > k:
        part = np.argpartition(-scores, k - 1)[:k]
        kth = scores[part].min()
        # Rows tied with the k-th compete on (uri, level, section), so the cut is
        # deterministic; nsmallest keeps that cheap even when thousands tie.
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)
        need = k - above.size
        if tied.size > need:
            keys = cols.order_keys(rows[tied])
            best = heapq.nsmallest(need, range(tied.size), key=keys.__getitem__)
            tied = tied[best]
        sel = np.concatenate([above, tied])
        rows, scores = rows[sel], scores[sel]
    row_list, score_list = rows.tolist(), scores.tolist()
    keys = cols.order_keys(row_list)
    order = sorted(range(len(row_list)), key=lambda i: (-score_list[i], keys[i]))[:k]
    return [row_list[i] for i in order], [score_list[i] for i in order]


def _dense_top(cols: _Columns, mask: Mask, qvec: F32Array, k: int) -> tuple[
    list[int], list[float]
]:
    n = cols.n
    idx = np.flatnonzero(mask & cols.has_vec[:n])
    if idx.size == 0:
        return [], []
    # Gathering rows copies them: only worth it when the filter keeps few of them.
    sims = _matvec(cols.vec[idx], qvec) if idx.size * 3 < n else _matvec(cols.vec[:n], qvec)[idx]
    return _top(cols, idx, np.clip(sims.astype(np.float64), -1.0, 1.0), k)


_blas_limited = False


def _single_threaded_blas() -> None:
    """Caps numpy's BLAS at one thread for the whole process, once. A query's similarities
    are a matrix-vector product: memory-bound, so extra BLAS threads gain little, and when
    the cores are busy (other requests, the embedder) waking them costs a scheduler
    timeslice (measured 6.6 ms instead of 1.2 ms at 10k rows). Requests are the unit of
    parallelism here."""
    global _blas_limited
    if not _blas_limited:
        threadpool_limits(limits=1, user_api="blas")
        _blas_limited = True


def _matvec(matrix: F32Array, vector: F32Array) -> F32Array:
    # BLAS sgemv on one thread: 2.5x faster than einsum at 2k rows, 2x at 10k; level with it
    # where the product is bound by memory bandwidth (100k rows).
    out: F32Array = matrix @ vector
    return out


def _lexical_top(cols: _Columns, mask: Mask, base: Mask, terms: list[str], k: int) -> tuple[
    list[int], list[float]
]:
    if not terms:
        return [], []
    raw = bm25.bm25_scores(cols.lex, terms, cols.doclen[: cols.n], base, mask)
    idx = np.flatnonzero(raw > 0.0)
    hits = raw[idx]
    return _top(cols, idx, hits / (hits + 1.0), k)


def _hydrate(conn: sqlite3.Connection, rids: list[int]) -> dict[int, IndexRecord]:
    """rid -> record for the rids still present."""
    if not rids:
        return {}
    return {
        int(r[0]): _record(r[1:])
        for r in conn.execute(
            f"SELECT rid, {_HIT_COLS} FROM records WHERE rid IN ({','.join('?' * len(rids))})",
            rids
        )
    }


@functools.lru_cache(maxsize=4096)
def _json_strings(raw: str) -> tuple[str, ...]:
    # Siblings share their ancestors and most records share a few tag sets: decode each once.
    return tuple(json.loads(raw))


def _record(r: Sequence[Any]) -> IndexRecord:
    blob = r[9]
    return IndexRecord(
        account=r[0], uri=r[1], level=int(r[2]), section=int(r[3]), context_type=r[4],
        parent=r[5], ancestors=list(_json_strings(r[6])), text=r[7], abstract=r[8],
        vector=None if blob is None else np.frombuffer(blob, dtype=np.float32).tolist(),
        line_start=r[10], line_end=r[11], tags=list(_json_strings(r[12])), memory_type=r[13],
        owner=r[14], peer=r[15], created_at=float(r[16]), updated_at=float(r[17]),
    )


# --------------------------------------------------------------------------------------------
# The metadata filter tree.


def _tree_mask(cols: _Columns, node: Any, depth: int) -> Mask:
    if depth > MAX_TREE_DEPTH:
        raise ValueError(f"filter nests deeper than {MAX_TREE_DEPTH} levels")
    if not isinstance(node, dict):
        raise ValueError(f"filter node must be an object, got {type(node).__name__}")
    op = node.get("op")
    n = cols.n
    if op in ("and", "or"):
        only_keys(node, {"op", "conds"})
        conds = node.get("conds")
        if not isinstance(conds, list) or not conds:
            raise ValueError(f"filter op {op!r} needs a non-empty 'conds' list")
        out = _tree_mask(cols, conds[0], depth + 1).copy()
        for cond in conds[1:]:
            if op == "and":
                out &= _tree_mask(cols, cond, depth + 1)
            else:
                out |= _tree_mask(cols, cond, depth + 1)
        return out
    if op in ("must", "must_not"):
        only_keys(node, {"op", "field", "conds"})
        field_ = tree_field(node)
        values = node.get("conds")
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise ValueError(f"filter op {op!r} needs a non-empty 'conds' list")
        hit = _values_mask(cols, field_, values)
        return hit if op == "must" else ~hit
    if op == "range":
        field_ = tree_field(node)
        bounds = {k: v for k, v in node.items() if k not in ("op", "field")}
        if not bounds or set(bounds) - set(RANGE_OPS):
            raise ValueError(
                f"filter op 'range' takes one or more of {', '.join(RANGE_OPS)}, "
                f"got {sorted(bounds) or 'none'}"
            )
        col = _numeric_column(cols, field_)
        out = np.ones(n, dtype=np.bool_)
        for key, raw in bounds.items():
            v = number_value(raw, field_)
            if key == "gte":
                out &= col >= v
            elif key == "gt":
                out &= col > v
            elif key == "lte":
                out &= col <= v
            else:
                out &= col < v
        return out
    if op == "prefix":
        only_keys(node, {"op", "field", "prefix"})
        field_ = tree_field(node)
        prefix = node.get("prefix")
        if not isinstance(prefix, str):
            raise ValueError("filter op 'prefix' needs a string 'prefix'")
        if field_ == "tags":
            return cols.multi["tags"].prefix_mask(prefix, n)
        if field_ in STRING_FIELDS:
            return cols.str_prefix_mask(field_, prefix)
        raise ValueError(f"filter op 'prefix' does not apply to the numeric field {field_!r}")
    raise ValueError(
        f"unknown filter op {op!r}: expected and, or, must, must_not, range or prefix"
    )


def _values_mask(cols: _Columns, field_: str, values: list[Any]) -> Mask:
    n = cols.n
    if field_ == "tags":
        return cols.multi["tags"].values_mask([string_value(v, field_) for v in values], n)
    if field_ in STRING_FIELDS:
        strs = [string_value(v, field_) for v in values]
        if field_ in ("uri", "parent"):
            strs = [_norm_uri(s) for s in strs]
        return cols.str_mask(field_, strs)
    col = _numeric_column(cols, field_)
    return np.isin(col, np.array([number_value(v, field_) for v in values], dtype=np.float64))


def _numeric_column(cols: _Columns, field_: str) -> npt.NDArray[Any]:
    n = cols.n
    if field_ == "level":
        return cols.level[:n]
    if field_ == "created_at":
        return cols.created[:n]
    if field_ == "updated_at":
        return cols.updated[:n]
    raise ValueError(f"filter op 'range' needs a numeric field, not {field_!r}")









