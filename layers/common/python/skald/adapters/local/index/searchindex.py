"""Embedded SearchIndex: records in SQLite (WAL) on disk; filtering and ranking in memory.

This module is the adapter (lifecycle, locking, writes, reads); the in-memory columns live in
columns.py, persistence in store.py, loading the columns at open in load.py (with the sidecar
generation of quant.py and snapshot.py), the filter compiler in filters.py and ranking in
ranking.py.

SQLite is the source of truth: `records` holds every IndexRecord, its vector as a float32 blob.
At open the records are loaded into columnar numpy arrays: the vector matrix, coded strings
(account, uri, parent, context_type, ...), numbers, flat (value, row) postings of ancestors and
tags, and BM25 term postings (see bm25.py for why BM25 is not FTS5's); above 32,768 vectors
from a saved generation of them and the rows written since. Every filter is then a
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

import math
import queue
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from skald.adapters.local.index import bm25
from skald.adapters.local.index import load as index_load
from skald.adapters.local.index import store as index_store
from skald.adapters.local.index.columns import Columns, F32Array, IntArray, Mask
from skald.adapters.local.index.filters import ScopeMasks, filter_mask, scope_mask
from skald.adapters.local.index.quant import EXACT_ROWS
from skald.adapters.local.index.ranking import rank, single_threaded_blas
from skald.adapters.local.index.rwlock import RWLock
from skald.adapters.local.index.store import SCHEMA_VERSION, Prepared
from skald.domain.retrieval.index_filter import SEARCH_MODES, norm_uri
from skald.ports import IndexFilter, IndexHit, IndexQuery, IndexRecord, IndexVectorMismatch

__all__ = ["SCHEMA_VERSION", "LocalSearchIndex"]


class LocalSearchIndex:
    """SearchIndex over one SQLite file (WAL) with exact in-memory vector search and BM25.

    `path` is the database file (or a directory, which then holds `index.sqlite3`).
    `stemming` switches the Porter stemmer of the BM25 tokenizer (on by default). Above
    `exact_rows` vectors they are held compact (quant.py; results stay exact)."""

    def __init__(
        self, path: Path, dimension: int, *, stemming: bool = True, exact_rows: int = EXACT_ROWS
    ) -> None:
        if dimension < 1:
            raise ValueError("dimension must be >= 1")
        path = Path(path)
        if path.is_dir():
            path = path / "index.sqlite3"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._dim = dimension
        self._stemming = stemming
        self._exact_rows = exact_rows
        single_threaded_blas()
        self._rw = RWLock()
        self._wlock = threading.Lock()
        self._idle_readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        self._w = index_store.connect(path, readonly=False)
        self._conns.append(self._w)
        index_store.init_schema(self._w, path, dimension, stemming)
        self._cols = self._load()
        self._scopes = ScopeMasks()  # scope masks of self._cols, reused across searches
        # Above every row held in memory too: rows of a snapshot the database has since lost
        # (snapshot.py) are tombstones here, and rows are appended in rowid order.
        held = int(self._cols.rid[self._cols.n - 1]) if self._cols.n else 0
        self._next_rid = max(index_store.max_rid(self._w), held) + 1

    def _load(self) -> Columns:
        return index_load.load_columns(
            self._w,
            self._dim,
            exact_rows=self._exact_rows,
            sidecar=index_load.sidecar_path(self._path),
        )

    # ---- lifecycle ----

    def close(self) -> None:
        with self._wlock, self._rw.write():
            if self._closed:
                return
            self._closed = True
            self._cols.vectors.close()  # the sidecar's file
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
            conn = index_store.connect(self._path, readonly=True)
            with self._conns_lock:
                self._conns.append(conn)
        try:
            yield conn
        finally:
            self._idle_readers.put(conn)

    # ---- writes ----

    def _prepare(self, rec: IndexRecord) -> Prepared:
        return index_store.prepare(rec, self._dim, self._stemming)

    def _write(self, kill_rows: IntArray, upserts: Sequence[Prepared]) -> None:
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
        new_rows = [index_store.as_row(rid + i, p) for i, p in enumerate(upserts)]
        w = self._w
        w.execute("BEGIN IMMEDIATE")
        try:
            if kill_arr.size:
                index_store.delete_rids(w, cols.rid[kill_arr].tolist())
            if upserts:
                index_store.insert(w, rid, upserts)
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
        latest: dict[tuple[str, str, int, int], Prepared] = {}
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
            uri_mask = self._cols.str_mask("uri", [norm_uri(u) for u in uris])
            rows = self._account_rows(account, uri_mask)
            if rows.size:
                self._write(rows, [])
            return int(rows.size)

    def delete_prefix(self, account: str, prefix: str) -> int:
        with self._wlock:
            rows = self._account_rows(account, scope_mask(self._cols, [prefix]))
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
        latest: dict[tuple[str, int, int], Prepared] = {}
        for (uri, level), records in sets.items():
            for rec in records:
                if rec.account != account or rec.uri != uri or int(rec.level) != int(level):
                    raise ValueError(
                        "replace_sections: every record must have the given account, uri and level"
                    )
                latest[(norm_uri(uri), int(level), int(rec.section))] = self._prepare(rec)
        wanted = {(norm_uri(uri), int(level)) for uri, level in sets}
        if not wanted:
            return
        with self._wlock:
            cols = self._cols
            rows = self._account_rows(account, cols.str_mask("uri", sorted({u for u, _ in wanted})))
            values, codes = cols.strs["uri"].values, cols.codes["uri"]
            stale = [r for r in rows.tolist() if (values[codes[r]], int(cols.level[r])) in wanted]
            self._write(np.asarray(stale, dtype=np.int64), list(latest.values()))

    # ---- reads ----

    def get(self, account: str, uri: str) -> list[IndexRecord]:
        with self._rw.read(), self._reader() as conn:
            return index_store.read_uri(conn, account, uri)

    def head(self, account: str, uri: str) -> IndexRecord | None:
        with self._rw.read(), self._reader() as conn:
            return index_store.read_head(conn, account, uri)

    def heads(self, account: str, uris: Sequence[str]) -> dict[str, IndexRecord]:
        with self._rw.read(), self._reader() as conn:
            found = {u: index_store.read_head(conn, account, u) for u in dict.fromkeys(uris)}
        return {u: r for u, r in found.items() if r is not None}

    def get_many(self, account: str, uris: Sequence[str]) -> dict[str, list[IndexRecord]]:
        with self._rw.read(), self._reader() as conn:
            return {u: index_store.read_uri(conn, account, u) for u in dict.fromkeys(uris)}

    def count(self, account: str, flt: IndexFilter | None = None) -> int:
        with self._rw.read():
            self._check_open()
            masks = filter_mask(self._cols, account, flt or IndexFilter(), self._scopes)
            return 0 if masks is None else int(masks[0].sum())

    def scroll(
        self,
        account: str,
        flt: IndexFilter | None = None,
        *,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[IndexRecord], str | None]:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        if cursor is not None and not cursor.isdigit():
            raise ValueError(f"invalid cursor {cursor!r}")
        after = int(cursor or 0)
        with self._rw.read():
            self._check_open()
            cols = self._cols
            masks = filter_mask(cols, account, flt or IndexFilter(), self._scopes)
            if masks is None:
                return [], None
            # Row ids only grow: ordering by them pages through a stable sequence.
            rids = np.sort(cols.rid[: cols.n][masks[0]])
            rids = rids[rids > after]
            page = [int(r) for r in rids[:limit]]
            with self._reader() as conn:
                read = index_store.hydrate(conn, page)
        records = [read[r] for r in page if r in read]
        return records, (str(page[-1]) if rids.size > limit else None)

    def search(self, query: IndexQuery) -> list[IndexHit]:
        qvec, terms = self._query_inputs(query)
        with self._rw.read():
            self._check_open()
            cols = self._cols
            # Validate the filter even when nothing can match, so a bad one always fails.
            masks = filter_mask(cols, query.account, query.filter, self._scopes)
            if masks is None or query.limit == 0:
                return []
            mask, base = masks
            if not mask.any():
                return []
            with self._reader() as conn:
                read: dict[int, IndexRecord] = {}

                def prefetch(rows: list[int]) -> None:
                    read.update(index_store.hydrate(conn, [int(cols.rid[r]) for r in rows]))

                ranked = rank(
                    cols, mask, base, query, qvec, terms, prefetch, lambda: self._unit_query(query)
                )
                if query.score_threshold is not None:
                    ranked = [h for h in ranked if h[1] >= query.score_threshold]
                rids = [int(cols.rid[h[0]]) for h in ranked]
                read.update(index_store.hydrate(conn, [rid for rid in rids if rid not in read]))
        return [
            IndexHit(read[rid], score, dense, lexical)
            for (_, score, dense, lexical), rid in zip(ranked, rids, strict=True)
            if rid in read
        ]

    def _query_inputs(self, query: IndexQuery) -> tuple[F32Array | None, list[str]]:
        """The query's unit vector (None for a hybrid query whose vector_source is asked later,
        while the lexical side ranks) and terms, each checked present when its mode needs it."""
        mode = query.mode
        if mode not in SEARCH_MODES:
            raise ValueError(f"unknown search mode {mode!r}: expected {', '.join(SEARCH_MODES)}")
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
        return qvec, terms

    def _unit_query(self, query: IndexQuery) -> F32Array:
        raw = query.dense_vector()
        if raw is None:
            raise ValueError("the search needs a query vector")
        qvec = np.asarray(raw, dtype=np.float32)
        if qvec.shape != (self._dim,):
            raise IndexVectorMismatch(
                f"query vector has {qvec.size} dimensions, the index {self._dim}"
            )
        norm = float(np.linalg.norm(qvec))
        if not math.isfinite(norm) or norm == 0.0:
            raise ValueError("query vector is zero or not finite")
        unit: F32Array = qvec / np.float32(norm)
        return unit
