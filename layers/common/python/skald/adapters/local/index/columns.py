"""The embedded index's in-memory columns: every record's filterable and rankable fields as
numpy arrays in rowid order (append-only, plus tombstones), coded strings, flat postings of the
multi-valued fields (ancestors, tags) and the BM25 postings (bm25.py).

Rows are never edited in place: an upsert of an existing key kills the old row and appends a
new one, so postings of a dead row are just masked out. `compacted` drops tombstones.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from skald.adapters.local.index import bm25
from skald.adapters.local.index import quant as index_quant
from skald.adapters.local.index.quant import EXACT_ROWS, CompactVectors, DenseVectors, Vectors
from skald.domain.retrieval.filter_tree import STRING_FIELDS
from skald.domain.retrieval.index_filter import norm_uri
from skald.domain.retrieval.scores import TieKey

Mask = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
F32Array = npt.NDArray[np.float32]


def norm_uris(uri: str) -> str:
    # The common case (no trailing slash) without a loop: this runs for every loaded URI.
    return norm_uri(uri) if uri.endswith("/") else uri


class Interner:
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

    def remapped(self, used: IntArray) -> tuple[Interner, npt.NDArray[np.int32]]:
        """A fresh interner holding only the `used` codes, and the old -> new code table."""
        new = Interner()
        remap = np.zeros(len(self.values), dtype=np.int32)
        for code in used.tolist():
            remap[code] = new.add(self.values[code])
        return new, remap


class MultiValues:
    """A multi-valued field (ancestors, tags) as flat (value code, row) pairs."""

    def __init__(self) -> None:
        self.strs = Interner()
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

    def compacted(self, row_map: IntArray) -> MultiValues:
        rows = row_map[self.row[: self.n]]
        keep = rows >= 0
        codes = self.code[: self.n][keep]
        new = MultiValues()
        new.strs, remap = self.strs.remapped(np.unique(codes))
        m = int(keep.sum())
        cap = max(1024, int(m * 1.25))
        new.code = np.zeros(cap, dtype=np.int32)
        new.row = np.zeros(cap, dtype=np.int32)
        new.code[:m] = remap[codes]
        new.row[:m] = rows[keep]
        new.n = m
        return new


class Row(NamedTuple):
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


class Columns:
    """Columnar, append-only (plus tombstones) view of every record, in rowid order."""

    def __init__(
        self, dimension: int, capacity: int = 1024, *, exact_rows: int = EXACT_ROWS
    ) -> None:
        self.dim = dimension
        self.n = 0
        self.dead = 0
        self.cap = max(capacity, 16)
        self.exact_rows = exact_rows
        # Where compact vectors keep the float32 of rows added after the open (None: memory).
        self.scratch: Path | None = None
        # Float32 up to exact_rows vectors, 8-bit codes + float32 re-scoring above.
        self.vectors: Vectors = DenseVectors(dimension, self.cap)
        self.rid = np.zeros(self.cap, dtype=np.int64)
        self.alive = np.zeros(self.cap, dtype=np.bool_)
        self.has_vec = np.zeros(self.cap, dtype=np.bool_)
        self.level = np.zeros(self.cap, dtype=np.int64)
        self.section = np.zeros(self.cap, dtype=np.int64)
        self.created = np.zeros(self.cap, dtype=np.float64)
        self.updated = np.zeros(self.cap, dtype=np.float64)
        self.doclen = np.zeros(self.cap, dtype=np.float32)
        self.strs = {f: Interner() for f in ("account", *STRING_FIELDS)}
        self.codes = {f: np.zeros(self.cap, dtype=np.int32) for f in self.strs}
        self.multi = {"ancestors": MultiValues(), "tags": MultiValues()}
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

        self.vectors.grow(cap, n)
        self.rid, self.alive = grown(self.rid), grown(self.alive)
        self.has_vec, self.level = grown(self.has_vec), grown(self.level)
        self.section, self.doclen = grown(self.section), grown(self.doclen)
        self.created, self.updated = grown(self.created), grown(self.updated)
        self.codes = {f: grown(a) for f, a in self.codes.items()}
        self.cap = cap

    def append(
        self,
        rows: Sequence[Row],
        vectors: F32Array | None = None,
        has_vec: Mask | None = None,
        *,
        vectors_later: bool = False,
    ) -> None:
        """Appends rows; their vectors come from `rows` or, in bulk, from `vectors`/`has_vec`,
        or (`vectors_later`, the load at open) from a set_vectors call once every row is in."""
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
        if vectors_later:
            self.has_vec[s:e] = False
        elif vectors is None or has_vec is None:
            has_vec = np.array([r.vector is not None for r in rows], dtype=np.bool_)
            vectors = np.zeros((len(rows), self.dim), dtype=np.float32)
            if has_vec.any():
                vectors[has_vec] = np.stack([r.vector for r in rows if r.vector is not None])
        if not vectors_later:
            assert vectors is not None and has_vec is not None
            self.has_vec[s:e] = has_vec
            self.vectors.put(s, vectors, has_vec)
        for f in ("account", "context_type", "memory_type", "owner", "peer"):
            self.codes[f][s:e] = self.strs[f].add_many([getattr(r, f) for r in rows])
        for f in ("uri", "parent"):
            values = [norm_uris(getattr(r, f)) for r in rows]
            self.codes[f][s:e] = self.strs[f].add_many(values)  # type: ignore[arg-type]
        row_ids = range(s, e)
        self.multi["ancestors"].add(
            row_ids,
            [
                list(dict.fromkeys([a if a[-1:] != "/" else norm_uri(a) for a in r.ancestors]))
                for r in rows
            ],
        )
        self.multi["tags"].add(row_ids, [list(dict.fromkeys(r.tags)) for r in rows])
        self.lex.add(row_ids, [r.terms for r in rows], [r.tfs for r in rows])
        # Keys from lists, not numpy scalars: this runs for every record at open.
        keys = zip(
            self.codes["account"][s:e].tolist(),
            self.codes["uri"][s:e].tolist(),
            [r.level for r in rows],
            [r.section for r in rows],
            strict=True,
        )
        self.key_to_row.update(zip(keys, row_ids, strict=True))
        self.n = e
        if (
            not self.vectors.compact
            and self.n > self.exact_rows
            and int(np.count_nonzero(self.has_vec[: self.n])) > self.exact_rows
            and index_quant.available()
        ):
            assert isinstance(self.vectors, DenseVectors)
            self.vectors = CompactVectors.from_dense(
                self.vectors, self.has_vec, self.n, self.cap, self.scratch
            )

    def put_vectors(self, s: int, vectors: F32Array, has_vec: Mask) -> None:
        """Vectors of rows s.. appended with `vectors_later` (the float32 column)."""
        self.vectors.put(s, vectors, has_vec)
        self.has_vec[s : s + len(has_vec)] = has_vec

    def set_vectors(self, vectors: Vectors, has_vec: Mask) -> None:
        """Installs the vector column of rows appended without vectors (the load at open)."""
        self.vectors = vectors
        self.has_vec[: len(has_vec)] = has_vec

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

    def compacted(self) -> Columns:
        """A copy without tombstones (row order, hence rowid order, kept), with merged BM25
        postings and fresh interners, so strings of deleted records do not pile up."""
        keep = np.flatnonzero(self.alive[: self.n])
        m = int(keep.size)
        new = Columns(self.dim, capacity=max(1024, int(m * 1.25)), exact_rows=self.exact_rows)
        new.n = m
        new.scratch = self.scratch
        new.vectors = self.vectors.compacted(keep, new.cap)
        for name in ("rid", "alive", "has_vec", "level", "section", "created", "updated", "doclen"):
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
        new.key_to_row = {k: i for i, k in enumerate(zip(acct, uri, levels, sections, strict=True))}
        return new

    # ---- reads ----

    def key_of(self, account: str, uri: str, level: int, section: int) -> int | None:
        a, u = self.strs["account"].get(account), self.strs["uri"].get(norm_uri(uri))
        if a is None or u is None:
            return None
        return self.key_to_row.get((a, u, level, section))

    def str_mask(self, field: str, values: Iterable[str | None]) -> Mask:
        return self.strs[field].lut(values)[self.codes[field][: self.n]]

    def str_prefix_mask(self, field: str, prefix: str) -> Mask:
        return self.strs[field].prefix_lut(prefix)[self.codes[field][: self.n]]

    def order_keys(self, rows: Sequence[int] | IntArray) -> list[TieKey]:
        """The tie-break key (skald.domain.retrieval.scores.tie_key) of each row, read with three
        fancy-indexing reads instead of a call per row (this runs on every query, for every
        ranked candidate)."""
        idx = np.asarray(rows, dtype=np.int64)
        values = self.strs["uri"].values
        uris = [values[c] or "" for c in self.codes["uri"][idx].tolist()]
        return list(zip(uris, self.level[idx].tolist(), self.section[idx].tolist(), strict=True))
