"""Walking a local blob tree: a directory's entries in key order, and a whole subtree's
content read without its metadata (LocalBlobStore.read_tree).

A grep reads every file of a tree. Listing them first (an lstat and an etag each) and reading
them by key (the key checked again, an fstat) cost more than the reads themselves on a tree of
many small files, where a walk that opens what the scan found costs far less. Here each file
costs one open, usually one read, and one close.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Generator, Iterator

from skald.domain.ops.scan_budget import ScanBudget

RESERVED_PREFIX = ".~skald"  # adapter-private names: never a key segment, never listed
# The first read of a file: most files end within it, so their size is that read's length
# (no fstat). Larger than most files a tree holds, small enough to allocate per file.
FIRST_READ = 64 * 1024
# A symlink (never followed), a directory (a name reused since the scan), a name gone since.
_SKIPPED = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EISDIR, errno.ENAMETOOLONG})
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def scan_dir(
    directory: str, name_filter: str = "", hidden: bool = True
) -> list[tuple[str, bool, str]]:
    """Entries of a directory as (name, is_dir, path) in key order, adapter files hidden,
    and dot names too unless `hidden`.

    Sorting directories as "name/" yields global key order in a depth-first walk: every key
    under a directory starts with "name/"."""
    try:
        with os.scandir(directory) as it:
            entries = []
            for entry in it:
                name = entry.name
                if name.startswith(RESERVED_PREFIX) or not name.startswith(name_filter):
                    continue
                if not hidden and name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    entries.append((name + "/", name, True, entry.path))
                elif entry.is_file(follow_symlinks=False):
                    entries.append((name, name, False, entry.path))
    except (FileNotFoundError, NotADirectoryError):
        return []
    entries.sort()
    return [(name, is_dir, path) for _, name, is_dir, path in entries]


def read_file(path: str, budget: ScanBudget) -> bytes | None:
    """The content of the regular file at `path` when `budget` takes its size; None when it
    does not, or the file is gone or no longer a regular file. Only a file that fills the
    first read costs an fstat; one larger than the budget's limit is never read past it.
    O_NONBLOCK: a FIFO put in the file's place reads nothing instead of blocking, and is
    left out."""
    try:
        return _read(path, budget)
    except OSError as exc:
        if exc.errno in _SKIPPED:
            return None
        raise


def _read(path: str, budget: ScanBudget) -> bytes | None:
    fd = os.open(path, _OPEN_FLAGS)
    try:
        want = min(FIRST_READ, budget.limit() + 1)
        first = os.read(fd, want)
        if not first and not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # a FIFO or a device put in the file's place
        if len(first) < want:  # the whole file: a regular file reads short only at its end
            return first if budget.take(len(first)) else None
        # Writers replace files by rename: the open file keeps the size fstat gives.
        size = os.fstat(fd).st_size if want == FIRST_READ else want
        if not budget.take(size):
            return None
        chunks = [first, os.read(fd, max(size - len(first), 0) + 1)]
        while chunks[-1]:  # grown since the fstat: read on to the end
            chunks.append(os.read(fd, 1 << 20))
        return b"".join(chunks)
    finally:
        os.close(fd)


def walk(
    directory: str, key_prefix: str, enter: Callable[[str], bool]
) -> Iterator[tuple[str, str]]:
    """(key, path) of every file below `directory` (whose keys start with `key_prefix`), dot
    names left out, in key order, without their metadata; `enter` as BlobStore.read_tree's.
    A stack of folders, not nested generators: each file would otherwise pass through one
    generator per level."""
    stack = [(iter(scan_dir(directory, hidden=False)), key_prefix)]
    while stack:
        entries, prefix = stack[-1]
        for name, is_dir, path in entries:
            key = prefix + name
            if not is_dir:
                yield key, path
            elif enter(key):
                stack.append((iter(scan_dir(path, hidden=False)), key + "/"))
                break  # into it; this folder's iterator resumes after
        else:
            stack.pop()


def read_tree(
    directory: str,
    key_prefix: str,
    enter: Callable[[str], bool],
    admit: Callable[[str], bool] | None,
    budget: ScanBudget,
) -> Generator[tuple[str, bytes], None, None]:
    """(key, content) of every file `walk` finds that `admit` (None: every file) and `budget`
    take, as BlobStore.read_tree's."""
    for key, path in walk(directory, key_prefix, enter):
        if admit is not None and not admit(key):
            continue
        data = read_file(path, budget)
        if data is not None:
            yield key, data
