"""Making a written file survive a power cut: its data flushed to the disk before a rename or
a marker says it is complete, and the directory entry flushed after. Without the first, a
file renamed into place can come back empty or full of holes after a crash (the rename reaches
the disk before the data); without the second, the rename itself can be lost."""

from __future__ import annotations

import os
from pathlib import Path


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
