"""The embedded index's vector column: exact float32 up to EXACT_ROWS vectors, a compact exact
scan above.

Compact: every row's vector as 8-bit scalar-quantised codes (faiss `IndexScalarQuantizer`,
QT_8bit, per-dimension ranges trained on the data) plus the row's largest per-dimension
decoding error (float32), 388 bytes a record instead of 1,536. A query scans the codes (rows
outside the filter mask excluded by a bitmap), then re-scores the best candidates exactly in
float32, read from a float32 store (the sidecar file, sidecar.py, read row by row through
row_file, for the rows present at open; an unnamed scratch file beside it for rows added since,
or memory when there is no sidecar folder). The answer is the exact top k: a row outside the
re-scored set can only beat the k-th exact score if its approximate score plus its error
bound (|q|_1 x its decoding error) reaches it, and such rows are re-scored too (up to
MARGIN_CAP; `capped` counts queries where that cap cut them off).

Why faiss and not numpy: numpy's int8 -> float32 conversion of the codes alone costs more than
the whole float32 scan; faiss scans the codes without converting them, faster than a float32
scan (bench/ measures both). Without faiss installed the column stays float32
(exact, 4x the memory).

Split scans: faiss scans one query on one thread. Above SPLIT_ROWS rows the scan is cut into
one id range per core, scanned in parallel (faiss releases the GIL) and merged: the scan's
time falls with the cores, and the dense side of a find gains from the split on a large index
(bench/ measures both). Below SPLIT_ROWS the whole scan is short and a hand-off to the pool is
a larger share of it; under many concurrent queries the cores are shared either way.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from skald.adapters.local.index.row_file import F32Array, IntArray, RowFile, ScratchRows

log = logging.getLogger(__name__)

EXACT_ROWS = 32_768  # below this many vectors the float32 scan is exact and cheap
MARGIN_CAP = 1_000
TRAIN_ROWS = 65_536
SPLIT_ROWS = 65_536  # above this many rows a query's scan runs on every core
Mask = npt.NDArray[np.bool_]


def candidates_for(k: int) -> int:
    """How many rows are re-scored in float32 for a top k (before the error margin)."""
    return max(min(10_000, k + 300), 100)


@functools.cache
def scan_workers() -> int:
    """Threads a split scan uses: the cores this process may run on, at most 8."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, 8))


@functools.cache
def scan_pool() -> ThreadPoolExecutor:
    """The threads split scans run on (this module's 8-bit scans, ranking.py's float32)."""
    return ThreadPoolExecutor(scan_workers(), thread_name_prefix="skald-scan")


def load_faiss() -> Any:
    import faiss  # imported lazily: only an index above EXACT_ROWS needs it

    faiss.omp_set_num_threads(1)  # one query, one thread (see ranking.single_threaded_blas)
    return faiss


@functools.cache
def available() -> bool:
    # Cached: asked on every append above EXACT_ROWS while faiss is missing.
    try:
        load_faiss()
    except ImportError:
        return False
    return True


class VectorSource:
    """Exact float32 vectors by slot: a read-only base (the sidecar's rows, read from the file)
    followed by a tail of the vectors added since it was written. With a `scratch` folder the
    tail is appended to a ScratchRows file there: a server that keeps writing does not hold
    1.5 KB of float32 a record in memory until its next restart. Without one, or once that file
    cannot be written (a full disk), the tail is kept in memory."""

    def __init__(
        self, dim: int, base: RowFile | F32Array | None = None, scratch: Path | None = None
    ) -> None:
        self.dim = dim
        self.base = base if base is not None else np.zeros((0, dim), np.float32)
        self.nbase = int(self.base.shape[0])
        self.tail = np.zeros((0, dim), dtype=np.float32)
        self.ntail = 0
        self._scratch = scratch
        self.spill: ScratchRows | None = None

    def add(self, vecs: F32Array) -> IntArray:
        if self._scratch is not None and self.ntail == 0 and self.spill is None:
            try:
                self.spill = ScratchRows(self._scratch, self.dim)
            except OSError as exc:
                self._to_memory(exc)
        if self.spill is not None:
            try:
                self.spill.append(vecs)
            except OSError as exc:
                self._to_memory(exc)
        if self.spill is None:
            need = self.ntail + len(vecs)
            if need > len(self.tail):
                grown = np.zeros((max(need, 2 * len(self.tail), 1024), self.dim), np.float32)
                grown[: self.ntail] = self.tail[: self.ntail]
                self.tail = grown
            self.tail[self.ntail : need] = vecs
        slots = np.arange(
            self.nbase + self.ntail, self.nbase + self.ntail + len(vecs), dtype=np.int64
        )
        self.ntail += len(vecs)
        return slots

    def _to_memory(self, exc: OSError) -> None:
        """The tail moves to memory (the rows written so far read back) for good."""
        log.warning("vector scratch file not writable (%s): new vectors stay in memory", exc)
        self._scratch = None
        if self.spill is not None:
            self.tail = np.array(self.spill.range(0, self.ntail))
            self.spill.close()
            self.spill = None

    def close(self) -> None:
        if isinstance(self.base, RowFile):
            self.base.close()
        if self.spill is not None:
            self.spill.close()

    def get(self, slots: IntArray) -> F32Array:
        out = np.empty((len(slots), self.dim), dtype=np.float32)
        in_base = slots < self.nbase
        if in_base.any():
            # Sorted reads: neighbouring rows share pages.
            order = np.argsort(slots[in_base])
            picked = np.flatnonzero(in_base)[order]
            wanted = slots[in_base][order]
            out[picked] = (
                self.base.take(wanted) if isinstance(self.base, RowFile) else self.base[wanted]
            )
        if not in_base.all():
            tail = slots[~in_base] - self.nbase
            out[~in_base] = self.spill.take(tail) if self.spill is not None else self.tail[tail]
        return out


class DenseVectors:
    """Float32 matrix, row-aligned with the columns: the exact scan."""

    compact = False

    def __init__(self, dim: int, cap: int) -> None:
        self.dim = dim
        self.mat = np.zeros((cap, dim), dtype=np.float32)

    def grow(self, cap: int, n: int) -> None:
        mat = np.zeros((cap, self.dim), dtype=np.float32)
        mat[:n] = self.mat[:n]
        self.mat = mat

    def put(self, s: int, vecs: F32Array, has: Mask | None = None) -> None:
        self.mat[s : s + len(vecs)] = vecs

    def exact(self, rows: IntArray | list[int]) -> F32Array:
        out: F32Array = self.mat[rows]
        return out

    def close(self) -> None:
        pass

    def compacted(self, keep: IntArray, cap: int) -> DenseVectors:
        new = DenseVectors(self.dim, cap)
        new.mat[: len(keep)] = self.mat[keep]
        return new


class CompactVectors:
    """8-bit codes in two faiss indexes, each row's decoding error and its slot in the float32
    source (-1: no vector). Rows 0.. are in `index`, the base, filled once at its final size
    (at open, or when the column is built or compacted); rows appended later go to `tail`.
    One index grown in place would copy every code at each doubling: the first write after
    opening a large index would hold both copies for a moment."""

    compact = True

    def __init__(
        self,
        dim: int,
        index: Any,
        err: npt.NDArray[np.float32],
        slot: npt.NDArray[np.int64],
        source: VectorSource,
    ) -> None:
        self.dim = dim
        self.index = index
        self.tail: Any = None
        self.err = err
        self.slot = slot
        self.source = source
        self.capped = 0  # queries whose error margin held more than MARGIN_CAP rows

    @staticmethod
    def empty_index(dim: int) -> Any:
        faiss = load_faiss()
        return faiss.IndexScalarQuantizer(
            dim, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )

    def _sibling(self) -> Any:
        """An empty index with the base's trained ranges."""
        index = self.empty_index(self.dim)
        index.sq.trained = self.index.sq.trained
        index.is_trained = True
        return index

    @staticmethod
    def _sized(index: Any, n: int) -> npt.NDArray[np.uint8]:
        """Gives the empty `index` n rows of codes in one allocation, to be written through
        the returned (n, code_size) view."""
        if index.ntotal:
            raise AssertionError("only an empty index is sized")
        index.codes.resize(n * index.code_size)
        index.ntotal = n
        return _codes(index)

    @classmethod
    def trained(cls, dim: int, sample: F32Array, cap: int, source: VectorSource) -> CompactVectors:
        index = cls.empty_index(dim)
        # Symmetric ranges, at least 1e-3 wide: a tiny sample (the first rows of a new index)
        # must not leave a dimension without resolution.
        reach = np.maximum(np.abs(sample).max(axis=0) if len(sample) else 0.0, 1e-3)
        bounds = np.stack([reach, -reach]).astype(np.float32)
        index.train(np.ascontiguousarray(np.concatenate([sample, bounds]), dtype=np.float32))
        return cls(dim, index, np.zeros(cap, np.float32), np.full(cap, -1, np.int64), source)

    def fill(self, n: int, rows: Callable[[int, int], F32Array]) -> None:
        """Encodes rows 0..n-1 of an empty column into its base; `rows(s, e)` gives their
        float32 vectors, a chunk at a time. The source is left to the caller."""
        codes = self._sized(self.index, n)
        for s in range(0, n, 65_536):
            e = min(n, s + 65_536)
            vecs = np.ascontiguousarray(rows(s, e), dtype=np.float32)
            chunk = self.index.sa_encode(vecs)
            codes[s:e] = chunk
            self.err[s:e] = np.abs(self.index.sa_decode(chunk) - vecs).max(axis=1)

    @classmethod
    def from_dense(
        cls, dense: DenseVectors, has: Mask, n: int, cap: int, scratch: Path | None = None
    ) -> CompactVectors:
        """The switch above EXACT_ROWS: the float32 rows become the source's tail."""
        sample = dense.mat[:n][has[:n]][:TRAIN_ROWS]
        new = cls.trained(dense.dim, sample, cap, VectorSource(dense.dim, scratch=scratch))
        new.fill(n, lambda s, e: dense.mat[s:e])
        with_vec = np.flatnonzero(has[:n])
        new.slot[with_vec] = new.source.add(dense.mat[with_vec])
        return new

    @property
    def n(self) -> int:
        return int(self.index.ntotal) + (int(self.tail.ntotal) if self.tail is not None else 0)

    def grow(self, cap: int, n: int) -> None:
        err = np.zeros(cap, np.float32)
        err[:n] = self.err[:n]
        slot = np.full(cap, -1, np.int64)
        slot[:n] = self.slot[:n]
        self.err, self.slot = err, slot

    def put(self, s: int, vecs: F32Array, has: Mask | None = None) -> None:
        """Appends rows s.. (always at the end: rows are append-only), to the tail."""
        if s != self.n:
            raise AssertionError("compact vectors are appended in row order")
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if has is None:
            has = np.any(vecs != 0, axis=1)
        codes = self.index.sa_encode(vecs)
        decoded = self.index.sa_decode(codes)
        self.err[s : s + len(vecs)] = np.abs(decoded - vecs).max(axis=1)
        if self.tail is None:
            self.tail = self._sibling()
        self.tail.add_sa_codes(codes)
        self.slot[s : s + len(vecs)] = -1
        if has.any():
            self.slot[s + np.flatnonzero(has)] = self.source.add(vecs[has])

    def exact(self, rows: IntArray | list[int]) -> F32Array:
        return self.source.get(self.slot[np.asarray(rows, dtype=np.int64)])

    def drop_codes(self) -> None:
        """Frees the 8-bit codes of a column about to be replaced: exact() and compacted()
        still work, top() no longer does."""
        self.index = self._sibling()
        self.tail = None

    def close(self) -> None:
        self.source.close()

    def compacted(self, keep: IntArray, cap: int) -> CompactVectors:
        index = self._sibling()
        if keep.size and self.n:  # (none after drop_codes: the float32 rows only)
            codes = self._sized(index, int(keep.size))
            nb = int(self.index.ntotal)
            base = _codes(self.index)
            tail = _codes(self.tail) if self.tail is not None else base[:0]
            for s in range(0, int(keep.size), 65_536):  # a chunk's copy at a time
                rows = keep[s : s + 65_536]
                in_base = rows < nb
                part = codes[s : s + rows.size]
                part[in_base] = base[rows[in_base]]
                part[~in_base] = tail[rows[~in_base] - nb]
        err = np.zeros(cap, np.float32)
        err[: keep.size] = self.err[keep]
        slot = np.full(cap, -1, np.int64)
        slot[: keep.size] = self.slot[keep]
        return CompactVectors(self.dim, index, err, slot, self.source)

    def top(self, mask: Mask, qvec: F32Array, k: int) -> tuple[IntArray, F32Array]:
        """Rows of `mask` (length n, vectors only) holding the exact top k, with their exact
        scores: every row that can be in the top k, possibly more."""
        faiss = load_faiss()
        live = int(np.count_nonzero(mask))
        if live == 0 or k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        c = min(candidates_for(k), live)
        fetch = min(c + MARGIN_CAP, live)
        rows, approx_row = self._scan(faiss, mask, qvec, fetch)
        head = rows[:c]
        sims: F32Array = self.exact(head) @ qvec
        if rows.size <= c:
            return head, sims
        kth = float(np.partition(sims, -min(k, sims.size))[-min(k, sims.size)])
        q1 = float(np.abs(qvec).sum())
        rest = rows[c:]
        near = approx_row[c:] + q1 * self.err[rest] >= kth
        if rows.size < live and near[-1:].all():
            self.capped += 1
        extra = rest[near]
        if extra.size == 0:
            return head, sims
        return np.concatenate([head, extra]), np.concatenate([sims, self.exact(extra) @ qvec])

    def _scan(
        self, faiss: Any, mask: Mask, qvec: F32Array, fetch: int
    ) -> tuple[IntArray, F32Array]:
        """The `fetch` best rows of `mask` by approximate score, best first."""
        query = qvec.reshape(1, -1)

        def scan(
            index: Any, first: int, bits: npt.NDArray[np.uint8], lo: int, hi: int, split: bool
        ) -> tuple[F32Array, IntArray]:
            """Rows lo..hi-1 of the segment holding rows first.. of the column."""
            # The selectors stay referenced until the search returns: faiss holds raw
            # pointers to them.
            in_mask = faiss.IDSelectorBitmap(int(index.ntotal), faiss.swig_ptr(bits))
            in_range = faiss.IDSelectorRange(lo, hi)
            sel = faiss.IDSelectorAnd(in_mask, in_range) if split else in_mask
            approx, found = index.search(query, fetch, params=faiss.SearchParameters(sel=sel))
            ok = found[0] >= 0
            return approx[0][ok], found[0][ok].astype(np.int64) + first

        jobs: list[tuple[Any, int, npt.NDArray[np.uint8], int, int, bool]] = []
        first = 0
        for index in (self.index, self.tail):
            count = int(index.ntotal) if index is not None else 0
            if count:
                bits = np.packbits(mask[first : first + count], bitorder="little")
                parts = scan_workers() if count > SPLIT_ROWS else 1
                cuts = [count * i // parts for i in range(parts + 1)]
                jobs += [
                    (index, first, bits, cuts[i], cuts[i + 1], parts > 1) for i in range(parts)
                ]
            first += count
        if len(jobs) == 1:
            approx, rows = scan(*jobs[0])
            return rows, approx
        if len(mask) > SPLIT_ROWS:
            pool = scan_pool()
            done = [f.result() for f in [pool.submit(scan, *job) for job in jobs]]
        else:  # a few milliseconds: a hand-off to the pool would be a large share of it
            done = [scan(*job) for job in jobs]
        approx = np.concatenate([a for a, _ in done])
        rows = np.concatenate([r for _, r in done])
        # Best first, ties by row (as one scan would order them); then the best `fetch`.
        order = np.lexsort((rows, -approx))[:fetch]
        return rows[order], approx[order]


def _codes(index: Any) -> npt.NDArray[np.uint8]:
    """The (ntotal, code_size) codes of a faiss flat-codes index, as a view."""
    if not index.ntotal:
        return np.zeros((0, index.code_size), np.uint8)
    faiss = load_faiss()
    flat = faiss.rev_swig_ptr(index.codes.data(), int(index.ntotal) * index.code_size)
    out: npt.NDArray[np.uint8] = np.asarray(flat).reshape(int(index.ntotal), index.code_size)
    return out


Vectors = DenseVectors | CompactVectors
