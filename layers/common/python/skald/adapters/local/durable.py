"""Making a written file survive a power cut: its data flushed to the disk before a rename or
a marker says it is complete, and the directory entry flushed after. Without the first, a
file renamed into place can come back empty or full of holes after a crash (the rename reaches
the disk before the data); without the second, the rename itself can be lost."""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

from skald.adapters.libc import libc_function


def fsync_file(path: str | Path) -> None:
    """Flushes the data of the regular file at `path` to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """Flushes the entries of directory `path` (a rename or a new file in it); nothing when
    it no longer exists."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SYNCFS = libc_function("syncfs", [ctypes.c_int], ctypes.c_int)  # Linux (glibc and musl)


def can_sync_filesystem() -> bool:
    return _SYNCFS is not None


def sync_filesystem(path: str | Path) -> None:
    """Flushes everything written to the file system holding `path` (data and directory
    entries), with one flush of the disk's cache where a fsync per file costs one each.
    Since Linux 5.8 it reports a write-back error that happened during the call.
    Raises OSError when it fails or where syncfs(2) is missing (see can_sync_filesystem)."""
    if _SYNCFS is None:
        raise OSError(errno.ENOSYS, "syncfs is not available here")
    fd = os.open(path, os.O_RDONLY)
    try:
        if _SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}")
    finally:
        os.close(fd)
