"""The vector sidecar of the embedded index: the codes, errors and float32 vectors of the rows
present at open, written beside the SQLite file as one generation (snapshot.py saves the
other columns under the same key), and read back at the next open (load.py decides when).
The float32 file is written with pwrite, never through a memory map; every file reaches the
disk before the generation's `.ok` marker (durable)."""

from __future__ import annotations

import logging
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from skald.adapters.local.durable import fsync_dir, fsync_file
from skald.adapters.local.index.quant import (
    TRAIN_ROWS,
    CompactVectors,
    Mask,
    VectorSource,
    load_faiss,
)
from skald.adapters.local.index.row_file import F32Array, FileRows, IntArray

log = logging.getLogger(__name__)

# A generation is named by a checksum of its rowids (rows are never edited in place, so the
# same rowids mean the same vectors). Stale ones are rebuilt at open and older ones removed.


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


def load_sidecar(folder: Path, key: str, dim: int, cap: int) -> tuple[CompactVectors, Mask] | None:
    if not (folder / f"{key}.ok").exists():
        return None
    try:
        faiss = load_faiss()
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
    return CompactVectors(dim, index, err, slot, VectorSource(dim, base, folder)), has


class SidecarWriter:
    """Builds the compact column of the rows present at open, chunk by chunk, writing their
    float32 vectors to the sidecar (or keeping them in memory when it cannot be written).

    The file is written with pwrite and read back with pread, never mapped: a written mapping
    counts every page in the process's RSS (most of a large index's peak, once written)."""

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
                np.lib.format.write_array_header_1_0(
                    f,
                    {
                        "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                        "fortran_order": False,
                        "shape": (n, dim),
                    },
                )
                self._offset = f.tell()
                f.truncate(self._offset + n * dim * 4)
            self._fd = os.open(self._tmp("f32.npy"), os.O_WRONLY)
            self.on_disk = True
        except OSError as exc:
            if folder is not None:
                log.warning("vector sidecar not writable (%s): float32 vectors stay in memory", exc)
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
                log.warning("vector sidecar not written (%s): float32 vectors stay in memory", exc)
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
        faiss = load_faiss()
        base: FileRows | F32Array
        if self.f32 is not None:
            base = self.f32
        else:
            os.close(self._fd)
            base = FileRows(self._tmp("f32.npy"), self.dim)
        # Reads either kind of base; the column keeps it. Rows added later go to a scratch
        # file beside the sidecar when the sidecar could be written.
        source = VectorSource(self.dim, base, self.folder if self.on_disk else None)
        sample = source.get(np.flatnonzero(self.has)[:TRAIN_ROWS])
        col = CompactVectors.trained(self.dim, sample, cap, source)
        col.fill(self.n, lambda s, e: source.get(np.arange(s, e)))
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
