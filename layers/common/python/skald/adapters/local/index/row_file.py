"""Float32 vectors kept in a file and read row by row: the compact index's exact re-scoring
reads a few hundred scattered rows per query from the sidecar's float32 file, which lives in
the page cache, not in the process.

Reads are pread calls, not a memory map: each read fault in a map also maps the cached pages
around it (fault-around), and after a few hundred queries on a large index the whole file
counted in the process's RSS.

A file whose pages are not cached (a server just started, or one whose cache the kernel gave
to others) used to cost a query one disk read per row, one after the other: the first queries
on a large index were several times slower than once cached, with a long tail (the scale runs
in bench/ measure it). Now a scattered read checks one row in _PROBE_EVERY before reading them
(preadv with RWF_NOWAIT: it reads only what the page cache holds). At the first row that is
not cached, the reads of it and of every row after it are started at once
(POSIX_FADV_WILLNEED), and the disk serves them together. The kernel's readahead stays on: it
reads the pages around each missed row too, which fills the cache with a small file within a
few queries; advising random access took that away and made the first queries slower. And the
first uncached read starts reading the whole file into the cache in the background when it
takes at most a quarter of the available memory, which shortens the first queries' tail. That
read asks for _WARM_STEP bytes at a time and waits for each step before the next, through a
file description of its own whose readahead is off. Asked for all at once, the whole file
queued ahead of the queries' own reads, and on a slow disk the queries waited behind it;
paced, they do not, and the file is still in the cache soon after the first uncached read.
Where RWF_NOWAIT is missing, rows are read one by one as before.
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

log = logging.getLogger(__name__)

F32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]

_ADVISE = hasattr(os, "posix_fadvise")
_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None) if _ADVISE else None
# One row in this many is checked for being cached before the rows are read (a list of plain
# reads costs less than a check per row).
_PROBE_EVERY = 64
# A file read into the cache in the background is asked for this many bytes at a time.
_WARM_STEP = 1 << 20
# Above this many rows, and no more than twice as spread, a scattered read is one read.
_DENSE_FROM = 1024


def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (what can be used without swapping); None where
    there is no such file."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reopen(fd: int) -> tuple[int, bool]:
    """A new open file description of `fd`'s file (True), else a duplicate of `fd` (False),
    which shares its offset and readahead state."""
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC), True
    except OSError:
        return os.dup(fd), False


class RowFile:
    """Float32 rows of `dim` values at `offset` in an open file."""

    def __init__(self, file: BinaryIO, offset: int, rows: int, dim: int) -> None:
        self._file = file
        self.offset = offset
        self.shape: tuple[int, int] = (rows, dim)
        self.row_bytes = dim * 4
        self._nowait = _NOWAIT
        self._warmed = False

    def take(self, slots: IntArray) -> F32Array:
        """The rows at `slots`, in that order (sorted slots read best: neighbours share pages)."""
        if slots.size > _DENSE_FROM:
            lo, hi = int(slots.min()), int(slots.max()) + 1
            if hi - lo <= 2 * slots.size:  # dense enough (a renewal's reads): one read
                out_: F32Array = self.range(lo, hi)[slots - lo]
                return out_
        fd, size, pread = self._file.fileno(), self.row_bytes, os.pread
        at = [self.offset + s * size for s in slots.tolist()]
        parts: list[bytes] = []
        probe = bytearray(size) if self._nowait is not None else None
        for first in range(0, len(at), _PROBE_EVERY):
            if probe is not None and not self._cached(fd, probe, at[first]):
                # Not cached: start the reads of this row and every one after it, so the
                # disk serves them together while the reads below wait on the first.
                for pos in at[first:]:
                    os.posix_fadvise(fd, pos, size, os.POSIX_FADV_WILLNEED)
                probe = None
                self._warm()
            parts += [pread(fd, size, pos) for pos in at[first : first + _PROBE_EVERY]]
        buf = b"".join(parts)
        if len(buf) != len(at) * size:
            raise OSError("the vector file is shorter than its header says")
        out: F32Array = np.frombuffer(buf, dtype=np.float32).reshape(-1, self.shape[1])
        return out

    def _warm(self) -> None:
        """Reads the whole file into the page cache in the background, once, when it takes
        at most a quarter of the memory available: the first queries after a start find it
        uncached, and the kernel would otherwise fill the cache only with the rows they touch.
        One step at a time, so the queries' reads never wait behind the whole file."""
        if self._warmed:
            return
        self._warmed = True
        length = self.offset + self.shape[0] * self.row_bytes
        available = available_memory()
        if available is None or length > available // 4:
            return
        # A description of its own (this file may be closed while the reads go on), whose
        # readahead is off: it reads only the steps it asks for.
        fd, own = _reopen(self._file.fileno())

        def read_ahead() -> None:
            try:
                if own:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                last = bytearray(1)
                for start in range(0, length, _WARM_STEP):
                    step = min(_WARM_STEP, length - start)
                    os.posix_fadvise(fd, start, step, os.POSIX_FADV_WILLNEED)
                    # Waits for the step's last byte: one step on its way to the disk at a
                    # time, so a query's reads queue behind one step, not the whole file.
                    os.preadv(fd, [last], start + step - 1)
            except OSError as exc:  # advice only
                log.debug("reading %d bytes of vectors ahead stopped: %s", length, exc)
            finally:
                os.close(fd)

        threading.Thread(target=read_ahead, name="skald-vectors-warm", daemon=True).start()

    def _cached(self, fd: int, into: bytearray, at: int) -> bool:
        """Whether the page cache holds the row at `at` whole (read without waiting); true
        when that cannot be told."""
        if self._nowait is None:
            return True
        try:
            return os.preadv(fd, [into], at, self._nowait) == len(into)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            self._nowait = None  # this file system does not take it: no probes from now
            return True

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


class FileRows(RowFile):
    """The rows of a float32 (n, dim) .npy file."""

    def __init__(self, path: Path, dim: int) -> None:
        file = open(path, "rb")  # noqa: SIM115 - lives as long as the index's columns
        try:
            version = np.lib.format.read_magic(file)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(file)
        except BaseException:
            file.close()
            raise
        if fortran or dtype != np.dtype(np.float32) or len(shape) != 2 or shape[1] != dim:
            file.close()
            raise ValueError(f"{path}: not a C-order float32 (n, {dim}) array")
        super().__init__(file, file.tell(), int(shape[0]), dim)


class ScratchRows(RowFile):
    """Rows appended to an unnamed file in `folder`: it has no name to clean up and is gone
    once closed or once the process ends. Its pages sit in the page cache, which the kernel
    reclaims under pressure, not in the process's memory."""

    def __init__(self, folder: Path, dim: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        super().__init__(tempfile.TemporaryFile(dir=folder), 0, 0, dim)  # noqa: SIM115

    def append(self, vecs: F32Array) -> None:
        view = np.ascontiguousarray(vecs, dtype=np.float32).data.cast("B")
        at, done = self.shape[0] * self.row_bytes, 0
        while done < len(view):  # a regular file may take fewer bytes per call
            done += os.pwrite(self._file.fileno(), view[done:], at + done)
        self.shape = (self.shape[0] + len(vecs), self.shape[1])
