"""The embedded index's vector column: exact float32 up to EXACT_ROWS vectors, a compact exact
scan above.

Compact: every row's vector as 8-bit scalar-quantised codes (faiss `IndexScalarQuantizer`,
QT_8bit, per-dimension ranges trained on the data) plus the row's largest per-dimension
decoding error (float32), 388 bytes a record instead of 1,536. A query scans the codes (rows
outside the filter mask excluded by a bitmap), then re-scores the best candidates exactly in
float32, read from a float32 store (the sidecar file, read row by row, for the rows present at
open; memory for rows added since). The answer is the exact top k: a row outside the
re-scored set can only beat the k-th exact score if its approximate score plus its error
bound (|q|_1 x its decoding error) reaches it, and such rows are re-scored too (up to
MARGIN_CAP; `capped` counts queries where that cap cut them off).

Why faiss and not numpy: numpy's int8 -> float32 conversion alone costs 164 ms per 1M x 384
codes, more than the whole float32 scan (144 ms); faiss scans the codes without converting
them (measured 75 ms at load ~3, bench/RESULTS.md). Without faiss installed the column stays
float32 (exact, 4x the memory).

Split scans: faiss scans one query on one thread. Above SPLIT_ROWS rows the scan is cut into
one id range per core, scanned in parallel (faiss releases the GIL) and merged: 65-70 ms ->
34-40 ms for 1M x 384 on 2 cores (bench/RESULTS.md); at 100k rows the dense side of a find
took 5.2-7.7 ms instead of 8.4-9.5 (three runs each, through HTTP, load ~0.5-1). Below SPLIT_ROWS
the whole scan is a few milliseconds and a hand-off to the pool is a larger share of it; under
many concurrent queries the cores are shared either way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from skald.adapters.local.durable import fsync_dir, fsync_file

log = logging.getLogger(__name__)

EXACT_ROWS = 32_768  # below this many vectors the float32 scan is exact and cheap
MARGIN_CAP = 1_000
TRAIN_ROWS = 65_536
SPLIT_ROWS = 65_536  # above this many rows a query's scan runs on every core
F32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
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
def _scan_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(scan_workers(), thread_name_prefix="skald-scan")


def _faiss() -> Any:
    import faiss  # imported lazily: only an index above EXACT_ROWS needs it

    faiss.omp_set_num_threads(1)  # one query, one thread (see index_ranking.single_threaded_blas)
    return faiss


@functools.cache
def available() -> bool:
    # Cached: asked on every append above EXACT_ROWS while faiss is missing.
    try:
        _faiss()
    except ImportError:
        return False
    return True


def release_memory() -> None:
    """Hands freed heap pages back to the OS (glibc keeps them after a large load)."""
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


class FileRows:
    """Rows of a float32 .npy file, read with pread. Not a memory map: each read fault there
    maps the cached pages around it too (fault-around), and after a few hundred queries at 1M
    records the whole 1.5 GB file counted in the process's RSS (measured)."""

    def __init__(self, path: Path, dim: int) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - lives as long as the index's columns
        version = np.lib.format.read_magic(self._file)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(self._file)
        if fortran or dtype != np.dtype(np.float32) or len(shape) != 2 or shape[1] != dim:
            raise ValueError(f"{path}: not a C-order float32 (n, {dim}) array")
        self.offset = self._file.tell()
        self.shape: tuple[int, int] = (int(shape[0]), dim)
        self.row_bytes = dim * 4

    def take(self, slots: IntArray) -> F32Array:
        if slots.size > 1024:
            lo, hi = int(slots.min()), int(slots.max()) + 1
            if hi - lo <= 2 * slots.size:  # dense enough (a renewal's reads): one read
                out_: F32Array = self.range(lo, hi)[slots - lo]
                return out_
        fd, size, off = self._file.fileno(), self.row_bytes, self.offset
        buf = b"".join([os.pread(fd, size, off + s * size) for s in slots.tolist()])
        out: F32Array = np.frombuffer(buf, dtype=np.float32).reshape(-1, self.shape[1])
        return out

    def range(self, s: int, e: int) -> F32Array:
        """Rows s..e-1 in one read."""
        size = self.row_bytes
        buf = os.pread(self._file.fileno(), (e - s) * size, self.offset + s * size)
        if len(buf) != (e - s) * size:
            raise OSError("the vector file is shorter than its header says")
        out: F32Array = np.frombuffer(buf, dtype=np.float32).reshape(-1, self.shape[1])
        return out

    def close(self) -> None:
        self._file.close()


class VectorSource:
    """Exact float32 vectors by slot: a read-only base (the sidecar's rows, read from the file)
    followed by an in-memory tail of the vectors added since it was written."""

    def __init__(self, dim: int, base: FileRows | F32Array | None = None) -> None:
        self.dim = dim
        self.base = base if base is not None else np.zeros((0, dim), np.float32)
        self.nbase = int(self.base.shape[0])
        self.tail = np.zeros((0, dim), dtype=np.float32)
        self.ntail = 0

    def add(self, vecs: F32Array) -> IntArray:
        need = self.ntail + len(vecs)
        if need > len(self.tail):
            grown = np.zeros((max(need, 2 * len(self.tail), 1024), self.dim), np.float32)
            grown[: self.ntail] = self.tail[: self.ntail]
            self.tail = grown
        self.tail[self.ntail : need] = vecs
        slots = np.arange(self.nbase + self.ntail, self.nbase + need, dtype=np.int64)
        self.ntail = need
        return slots

    def close(self) -> None:
        if isinstance(self.base, FileRows):
            self.base.close()

    def get(self, slots: IntArray) -> F32Array:
        out = np.empty((len(slots), self.dim), dtype=np.float32)
        in_base = slots < self.nbase
        if in_base.any():
            # Sorted reads: neighbouring rows share pages.
            order = np.argsort(slots[in_base])
            picked = np.flatnonzero(in_base)[order]
            wanted = slots[in_base][order]
            out[picked] = (self.base.take(wanted) if isinstance(self.base, FileRows)
                           else self.base[wanted])
        if not in_base.all():
            out[~in_base] = self.tail[slots[~in_base] - self.nbase]
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
    """8-bit codes in a faiss index (row i = column row i), each row's decoding error and its
    slot in the float32 source (-1: no vector)."""

    compact = True

    def __init__(self, dim: int, index: Any, err: npt.NDArray[np.float32],
                 slot: npt.NDArray[np.int64], source: VectorSource) -> None:
        self.dim = dim
        self.index = index
        self.err = err
        self.slot = slot
        self.source = source
        self.capped = 0  # queries whose error margin held more than MARGIN_CAP rows

    @staticmethod
    def empty_index(dim: int) -> Any:
        faiss = _faiss()
        return faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit,
                                          faiss.METRIC_INNER_PRODUCT)

    @classmethod
    def trained(cls, dim: int, sample: F32Array, cap: int, source: VectorSource
                ) -> CompactVectors:
        index = cls.empty_index(dim)
        # Symmetric ranges, at least 1e-3 wide: a tiny sample (the first rows of a new index)
        # must not leave a dimension without resolution.
        reach = np.maximum(np.abs(sample).max(axis=0) if len(sample) else 0.0, 1e-3)
        bounds = np.stack([reach, -reach]).astype(np.float32)
        index.train(np.ascontiguousarray(np.concatenate([sample, bounds]), dtype=np.float32))
        return cls(dim, index, np.zeros(cap, np.float32), np.full(cap, -1, np.int64), source)

    @classmethod
    def from_dense(cls, dense: DenseVectors, has: Mask, n: int, cap: int) -> CompactVectors:
        """The switch above EXACT_ROWS: the float32 rows become the source's tail."""
        sample = dense.mat[:n][has[:n]][:TRAIN_ROWS]
        new = cls.trained(dense.dim, sample, cap, VectorSource(dense.dim))
        for s in range(0, n, 65_536):
            e = min(n, s + 65_536)
            new.put(s, dense.mat[s:e], has[s:e])
        return new

    @property
    def n(self) -> int:
        return int(self.index.ntotal)

    def grow(self, cap: int, n: int) -> None:
        err = np.zeros(cap, np.float32)
        err[:n] = self.err[:n]
        slot = np.full(cap, -1, np.int64)
        slot[:n] = self.slot[:n]
        self.err, self.slot = err, slot

    def put(self, s: int, vecs: F32Array, has: Mask | None = None) -> None:
        """Appends rows s.. (always at the end: rows are append-only)."""
        if s != self.n:
            raise AssertionError("compact vectors are appended in row order")
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if has is None:
            has = np.any(vecs != 0, axis=1)
        codes = self.index.sa_encode(vecs)
        decoded = self.index.sa_decode(codes)
        self.err[s : s + len(vecs)] = np.abs(decoded - vecs).max(axis=1)
        self.index.add_sa_codes(codes)
        self.slot[s : s + len(vecs)] = -1
        if has.any():
            self.slot[s + np.flatnonzero(has)] = self.source.add(vecs[has])

    def exact(self, rows: IntArray | list[int]) -> F32Array:
        return self.source.get(self.slot[np.asarray(rows, dtype=np.int64)])

    def drop_codes(self) -> None:
        """Frees the 8-bit codes of a column about to be replaced: exact() and compacted()
        still work, top() no longer does."""
        self.index = self.empty_index(self.dim)

    def close(self) -> None:
        self.source.close()

    def codes(self) -> npt.NDArray[np.uint8]:
        faiss = _faiss()
        flat = faiss.rev_swig_ptr(self.index.codes.data(), self.n * self.index.code_size)
        out: npt.NDArray[np.uint8] = np.asarray(flat).reshape(self.n, self.index.code_size)
        return out

    def compacted(self, keep: IntArray, cap: int) -> CompactVectors:
        index = self.empty_index(self.dim)
        index.sq.trained = self.index.sq.trained
        index.is_trained = True
        if keep.size and self.n:  # (none after drop_codes: the float32 rows only)
            index.add_sa_codes(np.ascontiguousarray(self.codes()[keep]))
        err = np.zeros(cap, np.float32)
        err[: keep.size] = self.err[keep]
        slot = np.full(cap, -1, np.int64)
        slot[: keep.size] = self.slot[keep]
        return CompactVectors(self.dim, index, err, slot, self.source)

    def top(self, mask: Mask, qvec: F32Array, k: int) -> tuple[IntArray, F32Array]:
        """Rows of `mask` (length n, vectors only) holding the exact top k, with their exact
        scores: every row that can be in the top k, possibly more."""
        faiss = _faiss()
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

    def _scan(self, faiss: Any, mask: Mask, qvec: F32Array, fetch: int
              ) -> tuple[IntArray, F32Array]:
        """The `fetch` best rows of `mask` by approximate score, best first."""
        bits = np.packbits(mask, bitorder="little")
        query = qvec.reshape(1, -1)
        n = len(mask)
        parts = scan_workers() if n > SPLIT_ROWS else 1

        def scan(lo: int, hi: int) -> tuple[F32Array, IntArray]:
            # The selectors stay referenced until the search returns: faiss holds raw
            # pointers to them.
            in_mask = faiss.IDSelectorBitmap(n, faiss.swig_ptr(bits))
            in_range = faiss.IDSelectorRange(lo, hi)
            sel = in_mask if parts == 1 else faiss.IDSelectorAnd(in_mask, in_range)
            approx, found = self.index.search(
                query, fetch, params=faiss.SearchParameters(sel=sel))
            ok = found[0] >= 0
            return approx[0][ok], found[0][ok].astype(np.int64)

        if parts == 1:
            approx, rows = scan(0, n)
            return rows, approx
        pool = _scan_pool()
        cuts = [n * i // parts for i in range(parts + 1)]
        done = [f.result() for f in
                [pool.submit(scan, cuts[i], cuts[i + 1]) for i in range(parts)]]
        approx = np.concatenate([a for a, _ in done])
        rows = np.concatenate([r for _, r in done])
        # Best first, ties by row (as one scan would order them); then the best `fetch`.
        order = np.lexsort((rows, -approx))[:fetch]
        return rows[order], approx[order]


Vectors = DenseVectors | CompactVectors


# --------------------------------------------------------------------------------------------
# The sidecar: codes, errors and float32 vectors of the rows present at open, next to the
# SQLite file, named by a checksum of their rowids (rows are never edited in place, so the same
# rowids mean the same vectors). Stale ones are rebuilt at open and older ones removed.


def sidecar_key(rids: IntArray) -> str:
    arr = np.ascontiguousarray(rids, dtype=np.int64)
    return f"{arr.size}-{zlib.crc32(arr.tobytes()):08x}"


def current_key(folder: Path) -> str | None:
    """The key of the newest complete generation in `folder`, if any."""
    try:
        done = sorted(folder.glob("*.ok"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return done[-1].name.removesuffix(".ok") if done else None


def load_sidecar(folder: Path, key: str, dim: int, cap: int
                 ) -> tuple[CompactVectors, Mask] | None:
    if not (folder / f"{key}.ok").exists():
        return None
    try:
        faiss = _faiss()
        index = faiss.read_index(str(folder / f"{key}.faiss"))
        base = FileRows(folder / f"{key}.f32.npy", dim)
        has = np.load(folder / f"{key}.has.npy")
        err_saved = np.load(folder / f"{key}.err.npy")
    except (OSError, ValueError, RuntimeError) as exc:
        log.warning("vector sidecar %s unreadable, rebuilding: %s", key, exc)
        return None
    n = int(index.ntotal)
    if base.shape != (n, dim) or has.shape != (n,) or err_saved.shape != (n,):
        return None
    err = np.zeros(cap, np.float32)
    err[:n] = err_saved
    slot = np.full(cap, -1, np.int64)
    slot[:n] = np.where(has, np.arange(n), -1)
    return CompactVectors(dim, index, err, slot, VectorSource(dim, base)), has


class SidecarWriter:
    """Builds the compact column of the rows present at open, chunk by chunk, writing their
    float32 vectors to the sidecar (or keeping them in memory when it cannot be written).

    The file is written with pwrite and read back with pread, never mapped: a written mapping
    counts every page in the process's RSS (1.5 GB of a 2.9 GB peak at 1M records)."""

    def __init__(self, folder: Path | None, key: str, n: int, dim: int) -> None:
        self.folder, self.key, self.n, self.dim = folder or Path("."), key, n, dim
        self.has = np.zeros(n, dtype=np.bool_)
        self.f32: F32Array | None = None
        self._fd = -1
        self._offset = 0
        self.on_disk = False
        try:
            if folder is None:
                raise OSError("no sidecar folder")
            folder.mkdir(parents=True, exist_ok=True)
            # Incomplete until published: a crash part way must not leave this key's old
            # files taken for the new generation.
            (folder / f"{key}.ok").unlink(missing_ok=True)
            with open(self._tmp("f32.npy"), "wb") as f:
                np.lib.format.write_array_header_1_0(f, {
                    "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                    "fortran_order": False, "shape": (n, dim)})
                self._offset = f.tell()
                f.truncate(self._offset + n * dim * 4)
            self._fd = os.open(self._tmp("f32.npy"), os.O_WRONLY)
            self.on_disk = True
        except OSError as exc:
            if folder is not None:
                log.warning("vector sidecar not writable (%s): float32 vectors stay in memory",
                            exc)
            self.f32 = np.zeros((n, dim), np.float32)

    def _tmp(self, suffix: str) -> Path:
        return self.folder / f"{self.key}.{suffix}.tmp{os.getpid()}"

    def put(self, s: int, vecs: F32Array, has: Mask) -> None:
        if self.f32 is None:
            view = np.ascontiguousarray(vecs, dtype=np.float32).data.cast("B")
            at, done = self._offset + s * self.dim * 4, 0
            try:
                while done < len(view):  # a regular file may take fewer bytes per call
                    done += os.pwrite(self._fd, view[done:], at + done)
            except OSError as exc:  # a full disk: the index still opens, from memory
                log.warning("vector sidecar not written (%s): float32 vectors stay in memory",
                            exc)
                self._to_memory()
        if self.f32 is not None:
            self.f32[s : s + len(vecs)] = vecs
        self.has[s : s + len(vecs)] = has

    def _to_memory(self) -> None:
        tmp = self._tmp("f32.npy")
        rows = FileRows(tmp, self.dim)
        try:
            self.f32 = np.array(rows.range(0, self.n))  # the rows written so far, and zeros
        finally:
            rows.close()
            os.close(self._fd)
            tmp.unlink(missing_ok=True)
        self.on_disk = False

    def finish(self, cap: int) -> CompactVectors:
        faiss = _faiss()
        base: FileRows | F32Array
        if self.f32 is not None:
            base = self.f32
        else:
            os.close(self._fd)
            base = FileRows(self._tmp("f32.npy"), self.dim)
        source = VectorSource(self.dim, base)  # reads either kind; the column keeps it
        sample = source.get(np.flatnonzero(self.has)[:TRAIN_ROWS])
        col = CompactVectors.trained(self.dim, sample, cap, source)
        for s in range(0, self.n, 65_536):
            e = min(self.n, s + 65_536)
            vecs = np.ascontiguousarray(source.get(np.arange(s, e)))
            codes = col.index.sa_encode(vecs)
            col.err[s:e] = np.abs(col.index.sa_decode(codes) - vecs).max(axis=1)
            col.index.add_sa_codes(codes)
        col.slot[: self.n] = np.where(self.has, np.arange(self.n), -1)
        if self.on_disk:
            try:
                self._publish(faiss, col)
            except OSError as exc:
                log.warning("vector sidecar not written: %s", exc)
        return col

    def _publish(self, faiss: Any, col: CompactVectors) -> None:
        faiss.write_index(col.index, str(self._tmp("faiss")))
        np.save(self._tmp("has.npy"), self.has, allow_pickle=False)
        np.save(self._tmp("err.npy"), col.err[: self.n], allow_pickle=False)
        # Every file on the disk before the marker: after a power cut a marker must never
        # vouch for a vector file that came back empty or full of holes.
        for suffix in ("faiss", "has.npy", "err.npy", "f32.npy"):
            # np.save appends ".npy" to a name not ending with it: find what it wrote.
            tmp = self._tmp(suffix)
            written = tmp if tmp.exists() else tmp.with_name(tmp.name + ".npy")
            fsync_file(written)
            os.replace(written, self.folder / f"{self.key}.{suffix}")
        fsync_dir(self.folder)
        (self.folder / f"{self.key}.ok").touch()
        fsync_dir(self.folder)
        for old in self.folder.iterdir():  # other generations (open elsewhere: unlink is safe)
            if not old.name.startswith(self.key + "."):
                old.unlink(missing_ok=True)
