"""Embedded SearchIndex: SQLite (records + FTS5 BM25) on disk, exact vector search in memory.

SQLite is the source of truth: `records` holds every IndexRecord (vector as a float32 blob) and
an external-content FTS5 table indexes `text`. At open everything but the text is loaded into
columnar numpy arrays (vectors, coded strings, numbers, flattened ancestor and tag postings), so
every filter becomes a vectorised boolean mask over rows and is applied before ranking.

Rows are appended in SQLite rowid order (rowids come from our own monotonic counter), which lets
FTS5 rowids map to rows with one searchsorted. Deletes leave tombstones; compaction rewrites the
arrays once tombstones pile up.

Concurrency: writers are serialised by a mutex and do their SQL inside a transaction; only the
COMMIT and the in-memory update run under the exclusive side of a readers-writer lock, so a
reader always sees SQLite and memory in the same state and readers never wait on SQL writes.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import queue
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from skald.ports import IndexFilter, IndexHit, IndexQuery, IndexRecord

Mask = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

SCHEMA_VERSION = 1
# Porter stemming on top of unicode61: measured on LoCoMo (questions -> evidence turns) it finds
# more evidence turns than plain unicode61 (see the project notes); diacritics folded both ways.
DEFAULT_TOKENIZER = "porter unicode61 remove_diacritics 2"
RRF_K = 60
_MAX_QUERY_TOKENS = 64
_MAX_TREE_DEPTH = 32
# Query tokens: runs of letters/digits. FTS5's unicode61 also splits on "_" and punctuation;
# each token is quoted, so FTS5 re-tokenises it as a phrase and no query syntax ever leaks in.
_TOKEN_RE = re.compile(r"[^\W_]+")

_STR_FIELDS = ("uri", "parent", "context_type", "memory_type", "owner", "peer")
_NUM_FIELDS = ("level", "created_at", "updated_at")
_TREE_FIELDS = frozenset((*_STR_FIELDS, *_NUM_FIELDS, "tags"))
_RANGE_OPS = ("gte", "gt", "lte", "lt")


def _norm_uri(uri: str) -> str:
    """Canonical form for matching: no trailing slash, except on a bare scheme root."""
    while uri.endswith("/") and not uri.endswith("://"):
        uri = uri[:-1]
    return uri


def _acct_token(account: str) -> str:
    # Account ids hold "." "@" "-", which FTS5 would split; a hex digest is one token.
    return "acct" + hashlib.sha256(account.encode("utf-8")).hexdigest()[:24]


def match_expression(text: str) -> str | None:
    """FTS5 MATCH text for free user text: its tokens, each quoted, OR-ed. None when empty."""
    seen: dict[str, None] = {}
    for tok in _TOKEN_RE.findall(text.lower()):
        seen.setdefault(tok, None)
        if len(seen) >= _MAX_QUERY_TOKENS:
            break
    if not seen:
        return None
    return " OR ".join('"' + tok.replace('"', '""') + '"' for tok in seen)


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

    def get(self, value: str | None) -> int | None:
        return self.codes.get(value)

    def lut(self, values: Sequence[str | None]) -> Mask:
        """Boolean lookup table over codes: True for the given values."""
        table = np.zeros(len(self.values), dtype=np.bool_)
        codes = [c for c in (self.codes.get(v) for v in values) if c is not None]
        if codes:
            table[codes] = True
        return table

    def prefix_lut(self, prefix: str) -> Mask:
        # A sorted view, rebuilt only when values were added since the last prefix query.
        if self._sorted is None or self._sorted[0] != len(self.values):
            pairs = sorted((v, c) for c, v in enumerate(self.values) if v is not None)
            self._sorted = (
                len(self.values),
                [v for v, _ in pairs],
                np.array([c for _, c in pairs], dtype=np.int64),
            )
        _, keys, codes = self._sorted
        lo = bisect.bisect_left(keys, prefix)
        hi = bisect.bisect_left(keys, prefix + "\U0010ffff")
        table = np.zeros(len(self.values), dtype=np.bool_)
        table[codes[lo:hi]] = True
        return table


# --------------------------------------------------------------------------------------------
# The in-memory columns.


@dataclass
class _Row:
    """One record's index-relevant fields, decoded from SQLite or from an IndexRecord."""

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
    vector: npt.NDArray[np.float32] | None


class _Columns:
    """Columnar, append-only (plus tombstones) view of every record, ordered by rid."""

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
        self.strs = {f: _Interner() for f in ("account", *_STR_FIELDS)}
        self.codes = {f: np.zeros(self.cap, dtype=np.int32) for f in self.strs}
        # Multi-valued fields as flat postings (code, row, live): a filter is one vector compare.
        self.multi = {f: _Postings() for f in ("ancestors", "tags")}
        self.key_to_row: dict[tuple[int, int, int, int], int] = {}

    # ---- writes (callers hold the exclusive lock) ----

    def _grow(self, need: int) -> None:
        if need <= self.cap:
            return
        cap = max(need, self.cap * 2)

        def grown(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
            b = np.zeros((cap, *a.shape[1:]), dtype=a.dtype)
            b[: self.n] = a[: self.n]
            return b

        self.vec, self.rid, self.alive, self.has_vec = (
            grown(self.vec), grown(self.rid), grown(self.alive), grown(self.has_vec)
        )
        self.level, self.section = grown(self.level), grown(self.section)
        self.created, self.updated = grown(self.created), grown(self.updated)
        self.codes = {f: grown(a) for f, a in self.codes.items()}
        self.cap = cap

    def key_of(self, account: str, uri: str, level: int, section: int) -> int | None:
        a, u = self.strs["account"].get(account), self.strs["uri"].get(_norm_uri(uri))
        if a is None or u is None:
            return None
        return self.key_to_row.get((a, u, level, section))

    def _set(self, i: int, row: _Row) -> None:
        self.rid[i] = row.rid
        self.alive[i] = True
        self.level[i] = row.level
        self.section[i] = row.section
        self.created[i] = row.created_at
        self.updated[i] = row.updated_at
        if row.vector is None:
            self.has_vec[i] = False
            self.vec[i] = 0.0
        else:
            self.has_vec[i] = True
            self.vec[i] = row.vector
        strs, codes = self.strs, self.codes
        codes["account"][i] = strs["account"].add(row.account)
        codes["uri"][i] = strs["uri"].add(_norm_uri(row.uri))
        codes["parent"][i] = strs["parent"].add(_norm_uri(row.parent))
        codes["context_type"][i] = strs["context_type"].add(row.context_type)
        codes["memory_type"][i] = strs["memory_type"].add(row.memory_type)
        codes["owner"][i] = strs["owner"].add(row.owner)
        codes["peer"][i] = strs["peer"].add(row.peer)
        self.multi["ancestors"].add(i, {_norm_uri(a) for a in row.ancestors})
        self.multi["tags"].add(i, set(row.tags))

    def append(self, rows: Sequence[_Row]) -> None:
        self._grow(self.n + len(rows))
        for row in rows:
            if self.n and row.rid <= self.rid[self.n - 1]:
                raise AssertionError("rows must be appended in increasing rid order")
            i = self.n
            self.n += 1
            self._set(i, row)
            key = (
                int(self.codes["account"][i]), int(self.codes["uri"][i]), row.level, row.section
            )
            self.key_to_row[key] = i

    def replace(self, i: int, row: _Row) -> None:
        """Overwrites row i in place (same key and rid: an upsert of an existing record)."""
        for postings in self.multi.values():
            postings.drop_rows(np.array([i], dtype=np.int64))
        self._set(i, row)

    def kill(self, rows: IntArray) -> None:
        rows = rows[self.alive[rows]]
        if rows.size == 0:
            return
        for i in rows.tolist():
            key = (
                int(self.codes["account"][i]), int(self.codes["uri"][i]),
                int(self.level[i]), int(self.section[i]),
            )
            self.key_to_row.pop(key, None)
        self.alive[rows] = False
        self.has_vec[rows] = False
        for postings in self.multi.values():
            postings.drop_rows(rows)
        self.dead += int(rows.size)

    def needs_compaction(self) -> bool:
        dead_postings = any(p.dead > max(4096, p.n // 2) for p in self.multi.values())
        return (self.dead > 1024 and self.dead * 4 > self.n) or dead_postings

    def compacted(self) -> _Columns:
        """A copy without tombstones (row order, hence rid order, kept) and with fresh interners
        so strings of deleted records do not accumulate."""
        keep = np.flatnonzero(self.alive[: self.n])
        new = _Columns(self.dim, capacity=max(1024, int(keep.size * 1.25)))
        m = int(keep.size)
        new.n = m
        new.vec[:m] = self.vec[keep]
        new.rid[:m] = self.rid[keep]
        new.alive[:m] = True
        new.has_vec[:m] = self.has_vec[keep]
        new.level[:m] = self.level[keep]
        new.section[:m] = self.section[keep]
        new.created[:m] = self.created[keep]
        new.updated[:m] = self.updated[keep]
        for f, interner in self.strs.items():
            old = self.codes[f][keep]
            used = np.unique(old)
            remap = np.zeros(len(interner.values), dtype=np.int32)
            for code in used.tolist():
                remap[code] = new.strs[f].add(interner.values[code])
            new.codes[f][:m] = remap[old]
        row_map = np.full(self.n, -1, dtype=np.int64)
        row_map[keep] = np.arange(m, dtype=np.int64)
        for f, postings in self.multi.items():
            new.multi[f] = postings.compacted(row_map)
        acct, uri = new.codes["account"], new.codes["uri"]
        new.key_to_row = {
            (int(a), int(u), int(lv), int(s)): i
            for i, (a, u, lv, s) in enumerate(
                zip(acct[:m], uri[:m], new.level[:m], new.section[:m], strict=True)
            )
        }
        return new

    # ---- reads ----

    def str_mask(self, field: str, values: Sequence[str | None]) -> Mask:
        return self.strs[field].lut(values)[self.codes[field][: self.n]]

    def str_prefix_mask(self, field: str, prefix: str) -> Mask:
        return self.strs[field].prefix_lut(prefix)[self.codes[field][: self.n]]

    def order_key(self, row: int) -> tuple[str, int, int]:
        uri = self.strs["uri"].values[int(self.codes["uri"][row])] or ""
        return (uri, int(self.level[row]), int(self.section[row]))


class _Postings:
    """Flat (value code, row) pairs of a multi-valued field, with a liveness flag."""

    def __init__(self) -> None:
        self.strs = _Interner()
        self.n = 0
        self.dead = 0
        self.code = np.zeros(256, dtype=np.int32)
        self.row = np.zeros(256, dtype=np.int64)
        self.live = np.zeros(256, dtype=np.bool_)

    def add(self, row: int, values: set[str]) -> None:
        if not values:
            return
        need = self.n + len(values)
        if need > self.code.size:
            cap = max(need, self.code.size * 2)
            for name in ("code", "row", "live"):
                old = getattr(self, name)
                new = np.zeros(cap, dtype=old.dtype)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
        for v in sorted(values):
            self.code[self.n] = self.strs.add(v)
            self.row[self.n] = row
            self.live[self.n] = True
            self.n += 1

    def drop_rows(self, rows: IntArray) -> None:
        hit = np.isin(self.row[: self.n], rows) & self.live[: self.n]
        self.dead += int(hit.sum())
        self.live[: self.n][hit] = False

    def rows_mask(self, lut: Mask, n_rows: int) -> Mask:
        """Rows having at least one value whose code is True in `lut`."""
        hit = lut[self.code[: self.n]] & self.live[: self.n]
        out = np.zeros(n_rows, dtype=np.bool_)
        out[self.row[: self.n][hit]] = True
        return out

    def values_mask(self, values: Sequence[str], n_rows: int) -> Mask:
        return self.rows_mask(self.strs.lut(values), n_rows)

    def prefix_mask(self, prefix: str, n_rows: int) -> Mask:
        return self.rows_mask(self.strs.prefix_lut(prefix), n_rows)

    def compacted(self, row_map: IntArray) -> _Postings:
        keep = np.flatnonzero(self.live[: self.n])
        new = _Postings()
        old_codes = self.code[keep]
        remap = np.zeros(len(self.strs.values), dtype=np.int32)
        for code in np.unique(old_codes).tolist():
            remap[code] = new.strs.add(self.strs.values[code])
        m = int(keep.size)
        cap = max(256, int(m * 1.25))
        new.code = np.zeros(cap, dtype=np.int32)
        new.row = np.zeros(cap, dtype=np.int64)
        new.live = np.zeros(cap, dtype=np.bool_)
        new.code[:m] = remap[old_codes]
        new.row[:m] = row_map[self.row[keep]]
        new.live[:m] = True
        new.n = m
        return new


# --------------------------------------------------------------------------------------------
# SQLite schema.

_COLS = (
    "account, uri, level, section, context_type, parent, ancestors, text, abstract, vector, "
    "line_start, line_end, tags, memory_type, owner, peer, created_at, updated_at"
)
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS records (
        rid INTEGER PRIMARY KEY AUTOINCREMENT,
        account TEXT NOT NULL,
        acct_tok TEXT NOT NULL,
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
        UNIQUE (account, uri, level, section)
    )""",
    # External-content FTS5 kept in sync by triggers: the text is stored once, in `records`.
    """CREATE TRIGGER IF NOT EXISTS records_ai AFTER INSERT ON records BEGIN
        INSERT INTO fts(rowid, text, acct_tok) VALUES (new.rid, new.text, new.acct_tok);
    END""",
    """CREATE TRIGGER IF NOT EXISTS records_ad AFTER DELETE ON records BEGIN
        INSERT INTO fts(fts, rowid, text, acct_tok)
        VALUES ('delete', old.rid, old.text, old.acct_tok);
    END""",
    """CREATE TRIGGER IF NOT EXISTS records_au AFTER UPDATE OF text, acct_tok ON records
    WHEN old.text IS NOT new.text OR old.acct_tok IS NOT new.acct_tok BEGIN
        INSERT INTO fts(fts, rowid, text, acct_tok)
        VALUES ('delete', old.rid, old.text, old.acct_tok);
        INSERT INTO fts(rowid, text, acct_tok) VALUES (new.rid, new.text, new.acct_tok);
    END""",
)


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    # Autocommit mode: transactions are explicit (BEGIN IMMEDIATE ... COMMIT) in the writer.
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA cache_size = -32000")
    if readonly:
        conn.execute("PRAGMA query_only = 1")
    return conn


# --------------------------------------------------------------------------------------------
# The index.


@dataclass
class _Prepared:
    record: IndexRecord
    vector: npt.NDArray[np.float32] | None


class LocalSearchIndex:
    """SearchIndex over one SQLite file (WAL) with exact in-memory vector search."""

    def __init__(
        self, path: Path, dimension: int, *, tokenizer: str = DEFAULT_TOKENIZER
    ) -> None:
        if dimension < 1:
            raise ValueError("dimension must be >= 1")
        path = Path(path)
        if path.is_dir():
            path = path / "index.sqlite3"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._dim = dimension
        self._rw = _RWLock()
        self._wlock = threading.Lock()
        self._readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all_conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        self._w = _connect(path, readonly=False)
        self._all_conns.append(self._w)
        self._init_schema(tokenizer)
        self._cols = self._load()
        self._next_rid = self._max_rid() + 1

    # ---- lifecycle ----

    def _init_schema(self, tokenizer: str) -> None:
        w = self._w
        w.execute("PRAGMA journal_mode = WAL")
        # The index is derived and rebuildable: WAL + NORMAL keeps commits cheap, still atomic.
        w.execute("PRAGMA synchronous = NORMAL")
        w.execute("BEGIN IMMEDIATE")
        try:
            w.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            meta = dict(w.execute("SELECT key, value FROM meta").fetchall())
            if meta:
                if int(meta.get("schema_version", "0")) != SCHEMA_VERSION:
                    raise ValueError(f"{self._path}: unsupported index schema version")
                if int(meta["dimension"]) != self._dim:
                    raise ValueError(
                        f"{self._path} holds {meta['dimension']}-d vectors, not {self._dim}-d: "
                        "reindex into a new index after changing the embedding model"
                    )
            else:
                # FTS5 must exist before the triggers that write into it.
                w.execute(
                    "CREATE VIRTUAL TABLE fts USING fts5(text, acct_tok, content='records', "
                    f"content_rowid='rid', tokenize='{tokenizer}')"
                )
                # Rank by BM25 over `text` only: the account token column weighs nothing.
                w.execute("INSERT INTO fts(fts, rank) VALUES ('rank', 'bm25(1.0, 0.0)')")
                w.executemany(
                    "INSERT INTO meta(key, value) VALUES (?, ?)",
                    [
                        ("schema_version", str(SCHEMA_VERSION)),
                        ("dimension", str(self._dim)),
                        ("tokenizer", tokenizer),
                    ],
                )
            for stmt in _SCHEMA:
                w.execute(stmt)
            w.execute("COMMIT")
        except BaseException:
            w.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._wlock, self._rw.write():
            if self._closed:
                return
            self._closed = True
            with self._conns_lock:
                for conn in self._all_conns:
                    conn.close()
                self._all_conns.clear()

    def __enter__(self) -> LocalSearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        if self._closed:
            raise RuntimeError("the search index is closed")
        try:
            conn = self._readers.get_nowait()
        except queue.Empty:
            conn = _connect(self._path, readonly=True)
            with self._conns_lock:
                self._all_conns.append(conn)
        try:
            yield conn
        finally:
            self._readers.put(conn)

    def _max_rid(self) -> int:
        row = self._w.execute("SELECT seq FROM sqlite_sequence WHERE name = 'records'").fetchone()
        top = self._w.execute("SELECT COALESCE(MAX(rid), 0) FROM records").fetchone()
        return max(int(row[0]) if row else 0, int(top[0]))

    def _load(self) -> _Columns:
        total = int(self._w.execute("SELECT COUNT(*) FROM records").fetchone()[0])
        cols = _Columns(self._dim, capacity=max(1024, int(total * 1.25)))
        cur = self._w.execute(
            "SELECT rid, account, uri, level, section, context_type, parent, ancestors, tags, "
            "memory_type, owner, peer, created_at, updated_at, vector FROM records ORDER BY rid"
        )
        while True:
            chunk = cur.fetchmany(4096)
            if not chunk:
                break
            cols.append([self._row_from_sql(r) for r in chunk])
        return cols

    def _row_from_sql(self, r: Sequence[Any]) -> _Row:
        blob = r[14]
        vec = None if blob is None else np.frombuffer(blob, dtype=np.float32)
        if vec is not None and vec.size != self._dim:
            vec = None
        return _Row(
            rid=int(r[0]), account=r[1], uri=r[2], level=int(r[3]), section=int(r[4]),
            context_type=r[5], parent=r[6], ancestors=json.loads(r[7]), tags=json.loads(r[8]),
            memory_type=r[9], owner=r[10], peer=r[11], created_at=float(r[12]),
            updated_at=float(r[13]), vector=vec,
        )

    # ---- writes ----

    def _prepare(self, rec: IndexRecord) -> _Prepared:
        if not rec.account:
            raise ValueError("IndexRecord.account is required")
        if not rec.uri:
            raise ValueError("IndexRecord.uri is required")
        vec: npt.NDArray[np.float32] | None = None
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
            vec = (arr / norm).astype(np.float32) if norm > 0 else None
        return _Prepared(rec, vec)

    def _sql_values(self, p: _Prepared) -> tuple[Any, ...]:
        r = p.record
        return (
            r.account, _acct_token(r.account), r.uri, int(r.level), int(r.section),
            r.context_type, r.parent, json.dumps(list(r.ancestors)), r.text or "",
            r.abstract or "", None if p.vector is None else p.vector.tobytes(),
            r.line_start, r.line_end, json.dumps(list(r.tags)), r.memory_type, r.owner, r.peer,
            float(r.created_at), float(r.updated_at),
        )

    @staticmethod
    def _as_row(rid: int, p: _Prepared) -> _Row:
        r = p.record
        return _Row(
            rid=rid, account=r.account, uri=r.uri, level=int(r.level), section=int(r.section),
            context_type=r.context_type, parent=r.parent, ancestors=list(r.ancestors),
            tags=list(r.tags), memory_type=r.memory_type, owner=r.owner, peer=r.peer,
            created_at=float(r.created_at), updated_at=float(r.updated_at), vector=p.vector,
        )

    def _write(
        self,
        kill_rows: IntArray,
        upserts: Sequence[_Prepared],
    ) -> None:
        """One atomic change: delete `kill_rows`, then upsert `upserts` (keys unique).
        Caller holds self._wlock."""
        if self._closed:
            raise RuntimeError("the search index is closed")
        cols = self._cols
        w = self._w
        kill_set = set(kill_rows.tolist())
        updates: list[tuple[int, _Row]] = []
        inserts: list[_Row] = []
        next_rid = self._next_rid
        w.execute("BEGIN IMMEDIATE")
        try:
            if kill_rows.size:
                rids = cols.rid[kill_rows].tolist()
                w.executemany("DELETE FROM records WHERE rid = ?", [(r,) for r in rids])
            upd_params: list[tuple[Any, ...]] = []
            ins_params: list[tuple[Any, ...]] = []
            for p in upserts:
                r = p.record
                row = cols.key_of(r.account, r.uri, int(r.level), int(r.section))
                if row is not None and row not in kill_set:
                    rid = int(cols.rid[row])
                    updates.append((row, self._as_row(rid, p)))
                    upd_params.append((*self._sql_values(p), rid))
                else:
                    rid = next_rid
                    next_rid += 1
                    inserts.append(self._as_row(rid, p))
                    ins_params.append((rid, *self._sql_values(p)))
            if upd_params:
                w.executemany(
                    "UPDATE records SET account=?, acct_tok=?, uri=?, level=?, section=?, "
                    "context_type=?, parent=?, ancestors=?, text=?, abstract=?, vector=?, "
                    "line_start=?, line_end=?, tags=?, memory_type=?, owner=?, peer=?, "
                    "created_at=?, updated_at=? WHERE rid=?",
                    upd_params,
                )
            if ins_params:
                w.executemany(
                    "INSERT INTO records(rid, account, acct_tok, uri, level, section, "
                    "context_type, parent, ancestors, text, abstract, vector, line_start, "
                    "line_end, tags, memory_type, owner, peer, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    ins_params,
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
            self._next_rid = next_rid
            try:
                cols.kill(kill_rows)
                for row, new in updates:
                    cols.replace(row, new)
                cols.append(inserts)
                if cols.needs_compaction():
                    self._cols = cols.compacted()
            except BaseException:
                # Memory no longer mirrors SQLite: rebuild it from the source of truth.
                self._cols = self._load()
                raise

    def upsert(self, records: Sequence[IndexRecord]) -> None:
        if not records:
            return
        latest: dict[tuple[str, str, int, int], _Prepared] = {}
        for rec in records:
            latest[(rec.account, rec.uri, int(rec.level), int(rec.section))] = self._prepare(rec)
        with self._wlock:
            self._write(np.zeros(0, dtype=np.int64), list(latest.values()))

    def _rows_where(self, account: str, extra: Mask | None) -> IntArray:
        cols = self._cols
        code = cols.strs["account"].get(account)
        if code is None:
            return np.zeros(0, dtype=np.int64)
        mask = cols.alive[: cols.n] & (cols.codes["account"][: cols.n] == code)
        if extra is not None:
            mask &= extra
        return np.flatnonzero(mask).astype(np.int64)

    def delete_uris(self, account: str, uris: Sequence[str]) -> int:
        if not uris:
            return 0
        with self._wlock:
            cols = self._cols
            rows = self._rows_where(account, cols.str_mask("uri", [_norm_uri(u) for u in uris]))
            if rows.size:
                self._write(rows, [])
            return int(rows.size)

    def delete_prefix(self, account: str, prefix: str) -> int:
        with self._wlock:
            rows = self._rows_where(account, self._scope_mask(self._cols, [prefix]))
            if rows.size:
                self._write(rows, [])
            return int(rows.size)

    def replace_sections(
        self, account: str, uri: str, level: int, records: Sequence[IndexRecord]
    ) -> None:
        latest: dict[int, _Prepared] = {}
        for rec in records:
            if rec.account != account or rec.uri != uri or int(rec.level) != int(level):
                raise ValueError(
                    "replace_sections: every record must have the given account, uri and level"
                )
            latest[int(rec.section)] = self._prepare(rec)
        with self._wlock:
            cols = self._cols
            same = cols.str_mask("uri", [_norm_uri(uri)]) & (cols.level[: cols.n] == int(level))
            self._write(self._rows_where(account, same), list(latest.values()))

    # ---- reads ----

    def get(self, account: str, uri: str) -> list[IndexRecord]:
        with self._rw.read(), self._reader() as conn:
            rows = conn.execute(
                f"SELECT {_COLS} FROM records WHERE account = ? AND uri = ? "
                "ORDER BY level, section",
                (account, uri),
            ).fetchall()
        return [self._record(r) for r in rows]

    def count(self, account: str, flt: IndexFilter | None = None) -> int:
        with self._rw.read():
            mask = self._filter_mask(self._cols, account, flt or IndexFilter())
            return 0 if mask is None else int(mask.sum())

    def search(self, query: IndexQuery) -> list[IndexHit]:
        mode = query.mode
        if mode not in ("dense", "lexical", "hybrid"):
            raise ValueError(f"unknown search mode {mode!r} (dense, lexical or hybrid)")
        if query.limit < 0:
            raise ValueError("limit must be >= 0")
        qvec: npt.NDArray[np.float32] | None = None
        if mode in ("dense", "hybrid"):
            if query.vector is None:
                raise ValueError(f"{mode} search needs a query vector")
            qvec = np.asarray(query.vector, dtype=np.float32)
            if qvec.shape != (self._dim,):
                raise ValueError(f"query vector has {qvec.size} dimensions, the index {self._dim}")
            norm = float(np.linalg.norm(qvec))
            if not math.isfinite(norm) or norm == 0.0:
                raise ValueError("query vector is zero or not finite")
            qvec = qvec / np.float32(norm)
        expr: str | None = None
        if mode in ("lexical", "hybrid"):
            if query.text is None:
                raise ValueError(f"{mode} search needs a query text")
            expr = match_expression(query.text)
            if expr is not None:
                expr = f'acct_tok : "{_acct_token(query.account)}" AND text : ({expr})'
        if query.limit == 0:
            # Still validate the filter so a bad one fails the same way at any limit.
            with self._rw.read():
                self._filter_mask(self._cols, query.account, query.filter)
            return []

        with self._rw.read():
            cols = self._cols
            mask = self._filter_mask(cols, query.account, query.filter)
            if mask is None or not mask.any():
                return []
            with self._reader() as conn:
                ranked = self._rank(conn, cols, mask, query, qvec, expr)
                threshold = query.score_threshold
                if threshold is not None:
                    ranked = [h for h in ranked if h[1] >= threshold]
                records = self._hydrate(conn, [int(cols.rid[row]) for row, *_ in ranked])
        hits: list[IndexHit] = []
        for (_, score, dense, lexical), rec in zip(ranked, records, strict=True):
            if rec is not None:
                hits.append(IndexHit(rec, score, dense, lexical))
        return hits

    # ---- ranking ----

    def _rank(
        self,
        conn: sqlite3.Connection,
        cols: _Columns,
        mask: Mask,
        query: IndexQuery,
        qvec: npt.NDArray[np.float32] | None,
        expr: str | None,
    ) -> list[tuple[int, float, float | None, float | None]]:
        limit = query.limit
        if query.mode == "dense":
            assert qvec is not None
            rows, scores = self._dense_top(cols, mask, qvec, limit)
            return [(r, s, s, None) for r, s in zip(rows, scores, strict=True)]
        if query.mode == "lexical":
            rows, scores = self._lexical_top(conn, cols, mask, expr, limit)
            return [(r, s, None, s) for r, s in zip(rows, scores, strict=True)]
        assert qvec is not None
        depth = max(limit * 4, 50)
        d_rows, d_scores = self._dense_top(cols, mask, qvec, depth)
        l_rows, l_scores = self._lexical_top(conn, cols, mask, expr, depth)
        fused: dict[int, float] = {}
        for ranking in (d_rows, l_rows):
            for rank, row in enumerate(ranking, start=1):
                fused[row] = fused.get(row, 0.0) + 1.0 / (RRF_K + rank)
        if not fused:
            return []
        best = 2.0 / (RRF_K + 1)  # rank 1 in both lists
        dense_known = dict(zip(d_rows, d_scores, strict=True))
        lexical_known = dict(zip(l_rows, l_scores, strict=True))
        missing = [r for r in fused if r not in dense_known and bool(cols.has_vec[r])]
        if missing:
            sims = np.clip(cols.vec[missing] @ qvec, -1.0, 1.0)
            dense_known.update(zip(missing, (float(s) for s in sims), strict=True))
        order = sorted(fused, key=lambda r: (-fused[r], cols.order_key(r)))[:limit]
        return [
            (r, min(fused[r] / best, 1.0), dense_known.get(r), lexical_known.get(r))
            for r in order
        ]

    @staticmethod
    def _top(cols: _Columns, rows: IntArray, scores: FloatArray, k: int) -> tuple[
        list[int], list[float]
    ]:
        """Best k of (rows, scores), ties broken by (uri, level, section)."""
        if rows.size > k:
            part = np.argpartition(-scores, k - 1)[:k]
            kth = scores[part].min()
            # Keep every row tied with the k-th so the cut below is deterministic.
            sel = np.flatnonzero(scores >= kth)
            rows, scores = rows[sel], scores[sel]
        pairs = sorted(
            zip(rows.tolist(), scores.tolist(), strict=True),
            key=lambda p: (-p[1], cols.order_key(p[0])),
        )[:k]
        return [p[0] for p in pairs], [float(p[1]) for p in pairs]

    def _dense_top(
        self, cols: _Columns, mask: Mask, qvec: npt.NDArray[np.float32], k: int
    ) -> tuple[list[int], list[float]]:
        n = cols.n
        idx = np.flatnonzero(mask & cols.has_vec[:n])
        if idx.size == 0:
            return [], []
        # Gathering rows copies them: worth it only when the filter keeps few of them.
        sims = cols.vec[idx] @ qvec if idx.size * 3 < n else (cols.vec[:n] @ qvec)[idx]
        scores = np.clip(sims.astype(np.float64), -1.0, 1.0)
        return self._top(cols, idx.astype(np.int64), scores, k)

    def _lexical_top(
        self, conn: sqlite3.Connection, cols: _Columns, mask: Mask, expr: str | None, k: int
    ) -> tuple[list[int], list[float]]:
        if expr is None:
            return [], []
        n = cols.n
        rids_sorted = cols.rid[:n]
        got_rows: list[IntArray] = []
        got_scores: list[FloatArray] = []
        have = 0
        kth = -math.inf
        cur = conn.execute("SELECT rowid, rank FROM fts WHERE fts MATCH ? ORDER BY rank", (expr,))
        try:
            batch = max(64, k * 4)
            while True:
                chunk = cur.fetchmany(batch)
                if not chunk:
                    break
                batch = min(batch * 4, 65536)
                arr = np.array(chunk, dtype=np.float64)
                rids = arr[:, 0].astype(np.int64)
                bm25 = -arr[:, 1]  # FTS5's bm25() is negative: better matches are lower
                pos = np.searchsorted(rids_sorted, rids)
                pos_c = np.minimum(pos, max(n - 1, 0))
                ok = (pos < n) & (rids_sorted[pos_c] == rids) & mask[pos_c]
                if ok.any():
                    got_rows.append(pos_c[ok].astype(np.int64))
                    got_scores.append(bm25[ok])
                    have += int(ok.sum())
                    if have >= k and kth == -math.inf:
                        kth = float(np.sort(np.concatenate(got_scores))[::-1][k - 1])
                # Rows arrive best first: once past the k-th score, nothing can enter the top k
                # (rows tied with it are still read, for a deterministic tie-break).
                if have >= k and float(bm25[-1]) < kth:
                    break
        finally:
            cur.close()
        if not got_rows:
            return [], []
        rows = np.concatenate(got_rows)
        raw = np.concatenate(got_scores)
        scores = raw / (raw + 1.0)
        return self._top(cols, rows, scores, k)

    # ---- filters ----

    def _scope_mask(self, cols: _Columns, scopes: Sequence[str]) -> Mask:
        n = cols.n
        norm = [_norm_uri(s) for s in scopes]
        if any(s.endswith("://") for s in norm):
            # A scheme root scopes everything.
            return np.ones(n, dtype=np.bool_)
        return cols.str_mask("uri", norm) | cols.multi["ancestors"].values_mask(norm, n)

    def _filter_mask(self, cols: _Columns, account: str, f: IndexFilter) -> Mask | None:
        """Rows of `account` passing `f`; None when the account has no rows at all."""
        if f.time_field not in ("updated_at", "created_at"):
            raise ValueError(f"time_field must be updated_at or created_at, not {f.time_field!r}")
        tree_mask = self._tree_mask(cols, f.tree, 0) if f.tree is not None else None
        code = cols.strs["account"].get(account)
        if code is None:
            return None
        n = cols.n
        mask: Mask = cols.alive[:n] & (cols.codes["account"][:n] == code)
        if f.scopes:
            mask &= self._scope_mask(cols, f.scopes)
        if f.exclude_scopes:
            mask &= ~self._scope_mask(cols, f.exclude_scopes)
        if f.context_types is not None:
            mask &= cols.str_mask("context_type", list(f.context_types))
        if f.levels is not None:
            mask &= np.isin(cols.level[:n], np.asarray(list(f.levels), dtype=np.int64))
        for tag in f.tags_all:
            mask &= cols.multi["tags"].values_mask([tag], n)
        times = cols.updated if f.time_field == "updated_at" else cols.created
        if f.since is not None:
            mask &= times[:n] >= float(f.since)
        if f.until is not None:
            mask &= times[:n] <= float(f.until)
        if tree_mask is not None:
            mask &= tree_mask
        return mask

    def _tree_mask(self, cols: _Columns, node: Any, depth: int) -> Mask:
        if depth > _MAX_TREE_DEPTH:
            raise ValueError(f"filter nests deeper than {_MAX_TREE_DEPTH} levels")
        if not isinstance(node, dict):
            raise ValueError(f"filter node must be an object, got {type(node).__name__}")
        op = node.get("op")
        n = cols.n
        if op in ("and", "or"):
            _only_keys(node, {"op", "conds"})
            conds = node.get("conds")
            if not isinstance(conds, list) or not conds:
                raise ValueError(f"filter op {op!r} needs a non-empty 'conds' list")
            masks = [self._tree_mask(cols, c, depth + 1) for c in conds]
            out = masks[0].copy()
            for m in masks[1:]:
                if op == "and":
                    out &= m
                else:
                    out |= m
            return out
        if op in ("must", "must_not"):
            _only_keys(node, {"op", "field", "conds"})
            field = _field(node)
            values = node.get("conds")
            if not isinstance(values, list):
                values = [values]
            if not values:
                raise ValueError(f"filter op {op!r} needs a non-empty 'conds' list")
            hit = self._values_mask(cols, field, values)
            return hit if op == "must" else ~hit
        if op == "range":
            field = _field(node)
            bounds = {k: v for k, v in node.items() if k not in ("op", "field")}
            unknown = set(bounds) - set(_RANGE_OPS)
            if unknown or not bounds:
                raise ValueError(
                    f"filter op 'range' takes one or more of {', '.join(_RANGE_OPS)}; "
                    f"got {sorted(bounds) or 'none'}"
                )
            col = self._numeric_column(cols, field)
            out = np.ones(n, dtype=np.bool_)
            for key, raw in bounds.items():
                v = _number(raw, field)
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
            _only_keys(node, {"op", "field", "prefix"})
            field = _field(node)
            prefix = node.get("prefix")
            if not isinstance(prefix, str):
                raise ValueError("filter op 'prefix' needs a string 'prefix'")
            if field == "tags":
                return cols.multi["tags"].prefix_mask(prefix, n)
            if field in _STR_FIELDS:
                return cols.str_prefix_mask(field, prefix)
            raise ValueError(f"filter op 'prefix' does not apply to the numeric field {field!r}")
        raise ValueError(
            f"unknown filter op {op!r}: expected and, or, must, must_not, range or prefix"
        )

    def _values_mask(self, cols: _Columns, field: str, values: list[Any]) -> Mask:
        n = cols.n
        if field == "tags":
            return cols.multi["tags"].values_mask([_string(v, field) for v in values], n)
        if field in _STR_FIELDS:
            strs = [_string(v, field) for v in values]
            if field in ("uri", "parent"):
                strs = [_norm_uri(s) for s in strs]
            return cols.str_mask(field, strs)
        col = self._numeric_column(cols, field)
        return np.isin(col, np.array([_number(v, field) for v in values], dtype=np.float64))

    @staticmethod
    def _numeric_column(cols: _Columns, field: str) -> npt.NDArray[Any]:
        n = cols.n
        if field == "level":
            return cols.level[:n]
        if field == "created_at":
            return cols.created[:n]
        if field == "updated_at":
            return cols.updated[:n]
        raise ValueError(f"filter op 'range' needs a numeric field, not {field!r}")

    # ---- hydration ----

    def _hydrate(self, conn: sqlite3.Connection, rids: list[int]) -> list[IndexRecord | None]:
        if not rids:
            return []
        placeholders = ",".join("?" * len(rids))
        found = {
            int(r[0]): self._record(r[1:])
            for r in conn.execute(
                f"SELECT rid, {_COLS} FROM records WHERE rid IN ({placeholders})", rids
            )
        }
        return [found.get(rid) for rid in rids]

    def _record(self, r: Sequence[Any]) -> IndexRecord:
        blob = r[9]
        return IndexRecord(
            account=r[0], uri=r[1], level=int(r[2]), section=int(r[3]), context_type=r[4],
            parent=r[5], ancestors=json.loads(r[6]), text=r[7], abstract=r[8],
            vector=None if blob is None else np.frombuffer(blob, dtype=np.float32).tolist(),
            line_start=r[10], line_end=r[11], tags=json.loads(r[12]), memory_type=r[13],
            owner=r[14], peer=r[15], created_at=float(r[16]), updated_at=float(r[17]),
        )


def _only_keys(node: dict[str, Any], allowed: set[str]) -> None:
    extra = set(node) - allowed
    if extra:
        raise ValueError(f"filter op {node.get('op')!r} does not take {sorted(extra)}")


def _field(node: dict[str, Any]) -> str:
    field = node.get("field")
    if not isinstance(field, str) or field not in _TREE_FIELDS:
        raise ValueError(
            f"unknown filter field {field!r}: expected one of {', '.join(sorted(_TREE_FIELDS))}"
        )
    return field


def _string(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"filter field {field!r} takes strings, got {value!r}")
    return value


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"filter field {field!r} takes numbers, got {value!r}")
    return float(value)
