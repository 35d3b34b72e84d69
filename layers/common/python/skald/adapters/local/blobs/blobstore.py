"""BlobStore on a local directory: one file per key under `root`.

Design notes (the integrator should know these):

* Key "acme/user/alice/x.md" is the file root/acme/user/alice/x.md. Segments that are empty, "."
  or "..", backslashes, NUL and absolute keys are rejected with ValueError. Names starting with
  ".~skald" are reserved for the adapter (temp files, root/.~skald/locks) and are both rejected
  as keys and hidden from listings.
* Writes are atomic: temp file in the target directory, fsync, os.replace, fsync of the directory.
  Inside a `batch()` block the directory fsyncs wait for the block's end (each directory once);
  `put_many` flushes all its temp files before renaming any; from 8 files on it does so with
  one syncfs(2) of the file system instead of a fsync each (the same at the end of a `batch()`
  with 8 directories or more). The tree is assumed to be one file system; a file or directory
  found on another one is fsynced on its own.
* Etag: a hash of (inode, size, mtime_ns), so list()/head() never read content. Every write
  goes through a fresh temp file (new inode) whose mtime is forced strictly above the previous
  version's mtime, so an etag never comes back for a later version of the same key (no ABA even
  if the filesystem reuses the inode). Etags are opaque: equal etags mean equal content, but
  rewriting identical bytes yields a new etag (unlike S3's MD5). Needs a filesystem with
  nanosecond mtimes (ext4, xfs, btrfs, tmpfs, apfs).
* Conditional writes hold a per-key lock: a threading.Lock stripe for threads of this process,
  plus fcntl.flock on a striped lock file for other processes (POSIX only).
* A path cannot be a file and a directory at once (S3 allows "a" and "a/b" together): such a
  write raises BlobPreconditionFailed.
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import hashlib
import os
import secrets
import stat
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from skald.adapters.local.blobs.tree import RESERVED_PREFIX, read_tree, scan_dir, walk
from skald.adapters.local.durable import can_sync_filesystem, fsync_dir, sync_filesystem
from skald.domain.ops.scan_budget import ScanBudget
from skald.ports import BlobInfo, BlobListing, BlobNotFound, BlobPreconditionFailed

_TMP_PREFIX = RESERVED_PREFIX + "-tmp-"
_INTERNAL_DIR = RESERVED_PREFIX
_LOCK_STRIPES = 64
_MKDIR_RETRIES = 100  # each retry means a concurrent prune won a race
# From this many files (or directories) on, one syncfs of the whole file system costs less
# than a fsync each: each fsync makes the disk flush its cache (bench/RESULTS.md, ingest).
_SYNCFS_FROM = 8


def _check_segments(parts: builtins.list[str], what: str, original: str) -> None:
    for part in parts:
        if part in ("", ".", ".."):
            raise ValueError(f"invalid {what} {original!r}: empty, '.' or '..' segment")
        if part.startswith(RESERVED_PREFIX):
            raise ValueError(f"invalid {what} {original!r}: {RESERVED_PREFIX!r} is reserved")


def _check_chars(value: str, what: str) -> None:
    if "\\" in value or "\x00" in value:
        raise ValueError(f"invalid {what} {value!r}: backslash or NUL")


def _key_parts(key: str) -> builtins.list[str]:
    if not isinstance(key, str) or not key:
        raise ValueError("blob key must be a non-empty string")
    _check_chars(key, "blob key")
    if key.startswith("/"):
        raise ValueError(f"invalid blob key {key!r}: absolute")
    parts = key.split("/")
    _check_segments(parts, "blob key", key)
    return parts


def _etag(st: os.stat_result) -> str:
    raw = f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def _info(key: str, st: os.stat_result) -> BlobInfo:
    return BlobInfo(key=key, size=st.st_size, modified=st.st_mtime_ns / 1e9, etag=_etag(st))


def _stat_file(path: str) -> os.stat_result | None:
    """lstat of a regular file, None for anything else (missing, directory, symlink)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return None
        raise
    return st if stat.S_ISREG(st.st_mode) else None


def _next_mtime(current: os.stat_result | None) -> int:
    """Now, but strictly after the current version's mtime: etags stay unique per key."""
    now = time.time_ns()
    return now if current is None else max(now, current.st_mtime_ns + 1)


@dataclass
class _Staged:
    """A write in progress: its content in `tmp` (open as `fd` until published), and the
    directories whose entries it changes (its own first, then the parents of new ones)."""

    key: str
    path: str
    tmp: str
    fd: int
    dirs: builtins.list[str]
    published: bool = False


class _KeyLocks:
    """Striped per-key mutual exclusion across threads (Lock) and processes (flock).

    flock alone is not enough: two threads sharing one open file description do not exclude
    each other. Lock files are striped so their number stays bounded on huge trees."""

    def __init__(self, lock_dir: Path, stripes: int = _LOCK_STRIPES) -> None:
        self._dir = lock_dir
        self._stripes = stripes
        self._reset()
        # After fork the child must not share our open file descriptions (flock would then
        # not exclude parent and child) nor inherit thread locks held by other threads.
        ref = weakref.ref(self)

        def _after_fork() -> None:
            locks = ref()
            if locks is not None:
                locks._reset()

        os.register_at_fork(after_in_child=_after_fork)

    def _reset(self) -> None:
        self._tlocks = [threading.Lock() for _ in range(self._stripes)]
        self._fds: builtins.list[int | None] = [None] * self._stripes

    def _stripe(self, key: str) -> int:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        return int.from_bytes(digest[:4], "big") % self._stripes

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        i = self._stripe(key)
        with self._tlocks[i]:
            fd = self._fds[i]
            if fd is None:
                # Only ever touched under tlock i, so no race on creating it.
                self._dir.mkdir(parents=True, exist_ok=True)
                fd = os.open(
                    self._dir / f"{i:02x}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644
                )
                self._fds[i] = fd
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        for i, fd in enumerate(self._fds):
            if fd is not None:
                with self._tlocks[i]:
                    os.close(fd)
                    self._fds[i] = None


class LocalBlobStore:
    """BlobStore over a directory tree. Thread- and process-safe; see the module notes."""

    def __init__(self, root: Path) -> None:
        self._root = Path(root)
        self._root.mkdir(parents=True, exist_ok=True)
        self._root_str = str(self._root)
        self._root_slash = os.path.join(self._root_str, "")  # a key's path is this + key
        self._dev = os.stat(self._root_str).st_dev
        lock_dir = self._root / _INTERNAL_DIR / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        self._locks = _KeyLocks(lock_dir)
        # Per thread: the directories whose entries a `batch` block syncs at its end.
        self._batch = threading.local()

    @property
    def root(self) -> Path:
        return self._root

    def close(self) -> None:
        self._locks.close()

    # ---------------------------------------------------------------------------------------
    # paths

    def _path(self, key: str) -> str:
        # The checked segments are neither empty, '.' nor '..': the path is the key appended
        # to the root (os.path.join of every segment gives the same string, slower; a grep
        # makes thousands).
        _key_parts(key)
        return self._root_slash + key

    def _prefix(self, prefix: str) -> tuple[str, str, str]:
        """(directory to scan, key prefix of its entries, name filter on its entries)."""
        if not isinstance(prefix, str):
            raise ValueError("prefix must be a string")
        _check_chars(prefix, "prefix")
        if prefix.startswith("/"):
            raise ValueError(f"invalid prefix {prefix!r}: absolute")
        dir_key, _, name_filter = prefix.rpartition("/")
        if not dir_key:
            return self._root_str, "", name_filter
        parts = dir_key.split("/")
        _check_segments(parts, "prefix", prefix)
        return os.path.join(self._root_str, *parts), dir_key + "/", name_filter

    # ---------------------------------------------------------------------------------------
    # reads

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise BlobNotFound(key) from None
        except OSError as exc:
            # ELOOP: a symlink, never followed.
            if exc.errno in (errno.ELOOP, errno.ENAMETOOLONG):
                raise BlobNotFound(key) from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a directory opens fine on Linux
                raise BlobNotFound(key)
            # Plain reads of the known size: a buffered file object costs more than the read
            # of a small file (grep reads thousands). Writers replace files by rename, so the
            # open file does not change under us; reading on to EOF is only a safeguard.
            data = os.read(fd, st.st_size + 1)
            if len(data) <= st.st_size:
                return data
            chunks = [data]
            while chunks[-1]:
                chunks.append(os.read(fd, 1 << 20))
            return b"".join(chunks)
        finally:
            os.close(fd)

    def head(self, key: str) -> BlobInfo | None:
        st = _stat_file(self._path(key))
        return None if st is None else _info(key, st)

    def head_many(self, keys: Sequence[str]) -> builtins.list[BlobInfo | None]:
        return [self.head(key) for key in keys]  # a stat each: microseconds

    def list(self, prefix: str, *, delimiter: str | None = "/") -> BlobListing:
        if delimiter is None:
            return BlobListing(blobs=builtins.list(self.iter_all(prefix)), prefixes=[])
        if delimiter != "/":
            return self._list_generic(prefix, delimiter)
        directory, key_prefix, name_filter = self._prefix(prefix)
        blobs: builtins.list[BlobInfo] = []
        prefixes: builtins.list[str] = []
        for name, is_dir, path in scan_dir(directory, name_filter):
            if is_dir:
                prefixes.append(f"{key_prefix}{name}/")
                continue
            st = _stat_file(path)
            if st is not None:  # else deleted since the scan
                blobs.append(_info(key_prefix + name, st))
        return BlobListing(blobs=blobs, prefixes=prefixes)

    def _list_generic(self, prefix: str, delimiter: str) -> BlobListing:
        # S3 semantics for an unusual delimiter: group the recursive listing.
        blobs: builtins.list[BlobInfo] = []
        prefixes: builtins.list[str] = []
        for info in self.iter_all(prefix):
            rest = info.key[len(prefix) :]
            cut = rest.find(delimiter)
            if cut < 0:
                blobs.append(info)
            else:
                prefixes.append(prefix + rest[: cut + len(delimiter)])
        return BlobListing(blobs=blobs, prefixes=sorted(set(prefixes)))

    def iter_all(self, prefix: str, *, hidden: bool = True) -> Iterator[BlobInfo]:
        directory, key_prefix, name_filter = self._prefix(prefix)
        yield from self._walk(directory, key_prefix, name_filter, hidden)

    def get_many(self, items: Iterable[tuple[str, int]]) -> Generator[bytes | None, None, None]:
        # A local read costs microseconds: reading ahead on threads would only add hand-offs.
        for key, _ in items:
            try:
                yield self.get(key)
            except BlobNotFound:
                yield None

    def read_tree(
        self,
        prefix: str,
        *,
        enter: Callable[[str], bool],
        admit: Callable[[str], bool] | None,
        budget: ScanBudget,
    ) -> Generator[tuple[str, bytes], None, None]:
        return read_tree(*self._folder(prefix), enter, admit, budget)

    def walk_keys(self, prefix: str, *, enter: Callable[[str], bool]) -> Iterator[str]:
        return (key for key, _ in walk(*self._folder(prefix), enter))

    def _folder(self, prefix: str) -> tuple[str, str]:
        """(directory, key prefix) of a folder's key, which ends in "/"."""
        directory, key_prefix, name_filter = self._prefix(prefix)
        if name_filter:
            raise ValueError(f"a folder's key ends in '/', not {prefix!r}")
        return directory, key_prefix

    def _walk(
        self, directory: str, key_prefix: str, name_filter: str = "", hidden: bool = True
    ) -> Iterator[BlobInfo]:
        for name, is_dir, path in scan_dir(directory, name_filter, hidden):
            if is_dir:
                yield from self._walk(path, f"{key_prefix}{name}/", "", hidden)
            else:
                st = _stat_file(path)
                if st is not None:
                    yield _info(key_prefix + name, st)

    # ---------------------------------------------------------------------------------------
    # writes

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> BlobInfo:
        path = self._path(key)
        with self._locks.hold(key):
            current = _stat_file(path)
            if if_none_match and current is not None:
                raise BlobPreconditionFailed(f"{key} exists")
            if if_match is not None and (current is None or _etag(current) != if_match):
                raise BlobPreconditionFailed(f"{key}: etag mismatch")
            st = self._write(key, path, data, _next_mtime(current))
            return _info(key, st)

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> builtins.list[BlobInfo]:
        """Writes every file to a temporary name first, then flushes them all, then renames
        them all. From _SYNCFS_FROM files on, one syncfs flushes them with one flush of the
        disk's cache, where each fsync costs one (the ingest benchmark in bench/ measures the
        difference); below, each file is fsynced, which still shares the journal's commit."""
        paths = [self._path(key) for key, _ in items]  # every key checked before writing
        if len(set(paths)) < len(paths):
            raise ValueError("put_many writes each key once")
        together = len(items) >= _SYNCFS_FROM and can_sync_filesystem()
        staged: builtins.list[_Staged] = []
        try:
            # Written and flushed without any key's lock: a group of 256 blobs would
            # otherwise hold every lock stripe, and stall all other writers, for its whole
            # flush. Each key's lock is held only to date and rename its file.
            self._stage_all(items, paths, staged, together=together)
            self._flush_staged(staged, together=together)
            return [self._date_and_publish(one) for one in staged]
        except BaseException:
            for one in staged:
                self._discard(one)
            raise
        finally:  # what was renamed is made durable, even when a later one failed
            self._sync_dirs([d for one in staged if one.published for d in one.dirs])

    def _stage_all(
        self,
        items: Sequence[tuple[str, bytes]],
        paths: builtins.list[str],
        staged: builtins.list[_Staged],
        *,
        together: bool,
    ) -> None:
        """Writes each file to its temporary name, appending it to `staged` as it goes (so
        that a failure discards what was written)."""
        for (key, data), path in zip(items, paths, strict=True):
            one = self._stage(key, path, data, None)
            staged.append(one)
            if together:  # written; the syncfs below flushes it (no fd held)
                if os.fstat(one.fd).st_dev != self._dev:
                    os.fsync(one.fd)
                os.close(one.fd)
                one.fd = -1

    def _flush_staged(self, staged: builtins.list[_Staged], *, together: bool) -> None:
        if together:
            sync_filesystem(self._root_str)
        for one in staged:
            if one.fd >= 0:
                os.fsync(one.fd)

    def _date_and_publish(self, one: _Staged) -> BlobInfo:
        with self._locks.hold(one.key):
            mtime_ns = _next_mtime(_stat_file(one.path))
            os.utime(one.tmp, ns=(mtime_ns, mtime_ns))
            self._publish(one)
            return _info(one.key, os.lstat(one.path))

    def copy(self, src: str, dst: str) -> BlobInfo:
        data = self.get(src)
        return self.put(dst, data)

    def delete(self, key: str) -> bool:
        path = self._path(key)
        with self._locks.hold(key):
            if _stat_file(path) is None:
                return False
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return False
            parent = os.path.dirname(path)
            self._prune(parent)
            return True

    def purge_prefix(self, prefix: str, *, limit: int = 1000) -> int:
        if not prefix.endswith("/"):
            raise ValueError(f"a folder's key ends in '/', not {prefix!r}")
        removed = 0
        for blob in self.iter_all(prefix):  # a file keeps no older versions here
            if removed >= limit:
                break
            removed += self.delete(blob.key)
        return removed

    def _prune(self, directory: str) -> None:
        """Removes now-empty directories from `directory` up to (not including) the root."""
        root = self._root_str
        survivor = directory
        while directory != root and directory.startswith(root + os.sep):
            try:
                os.rmdir(directory)  # fails unless empty: never removes a sibling's data
            except OSError:
                break
            directory = os.path.dirname(directory)
            survivor = directory
        fsync_dir(survivor)

    def _makedirs(self, directory: str) -> builtins.list[str]:
        """Creates missing directories; returns the ones created (their parents need fsync).

        Raises BlobPreconditionFailed when a component is a file."""
        if os.path.isdir(directory):
            return []
        rel = os.path.relpath(directory, self._root_str)
        created: builtins.list[str] = []
        current = self._root_str
        for part in rel.split(os.sep):
            current = os.path.join(current, part)
            try:
                os.mkdir(current)
                created.append(current)
            except FileExistsError:
                # One look: a directory pruned and made again by other threads between two
                # looks (isdir, then lexists) once passed for a file.
                try:
                    mode = os.lstat(current).st_mode
                except FileNotFoundError:
                    # Pruned by a concurrent delete between mkdir and the check: retry.
                    raise FileNotFoundError(current) from None
                if stat.S_ISDIR(mode):
                    continue
                raise BlobPreconditionFailed(
                    f"{os.path.relpath(current, self._root_str)} is a file"
                ) from None
        return created

    def _write(self, key: str, path: str, data: bytes, mtime_ns: int) -> os.stat_result:
        staged = self._stage(key, path, data, mtime_ns)
        try:
            os.fsync(staged.fd)
            self._publish(staged)
        except BaseException:
            self._discard(staged)
            raise
        self._sync_dirs(staged.dirs)
        return os.lstat(path)

    def _stage(self, key: str, path: str, data: bytes, mtime_ns: int | None) -> _Staged:
        """`data` in a temporary file beside `path` (not yet flushed), its directories made;
        dated `mtime_ns` (None: the caller dates it before the rename)."""
        directory = os.path.dirname(path)
        for _ in range(_MKDIR_RETRIES):
            try:
                created = self._makedirs(directory)
                tmp = os.path.join(directory, _TMP_PREFIX + secrets.token_hex(8))
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                break
            except FileNotFoundError:
                # A concurrent delete of a sibling pruned the (then empty) directory: retry.
                continue
            except NotADirectoryError:
                raise BlobPreconditionFailed(f"a parent of {key} is a file") from None
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    raise ValueError(f"blob key too long for this filesystem: {key!r}") from None
                raise
        else:
            raise OSError(f"could not create the directory of {key}")
        staged = _Staged(key, path, tmp, fd, [directory, *map(os.path.dirname, created)])
        try:
            view = memoryview(data)
            while view:  # a regular file may take fewer bytes per call
                view = view[os.write(fd, view) :]
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
        except BaseException:
            self._discard(staged)
            raise
        return staged

    def _publish(self, staged: _Staged) -> None:
        """Renames a flushed temporary file into place."""
        if staged.fd >= 0:
            os.close(staged.fd)
            staged.fd = -1
        try:
            os.replace(staged.tmp, staged.path)
        except (IsADirectoryError, NotADirectoryError):
            raise BlobPreconditionFailed(f"{staged.key} is a directory") from None
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise BlobPreconditionFailed(f"{staged.key} is a directory") from None
            if exc.errno == errno.ENAMETOOLONG:
                raise ValueError(f"blob key too long for this filesystem: {staged.key!r}") from None
            raise
        staged.published = True

    def _discard(self, staged: _Staged) -> None:
        """Undoes a staged write not yet published (a published one stays, complete)."""
        if staged.fd >= 0:
            os.close(staged.fd)
            staged.fd = -1
        if not staged.published:
            with suppress(FileNotFoundError):
                os.unlink(staged.tmp)
            self._prune(staged.dirs[0])

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The writes of this thread inside the block sync their directories once, at its
        end (an ingest of a hundred files in one directory: one sync instead of a hundred).
        Each file is still on the disk before its rename, so each write stays atomic; its
        rename is durable when the block ends."""
        if getattr(self._batch, "dirs", None) is not None:
            yield  # nested: the outer block syncs
            return
        dirs: dict[str, None] = {}
        self._batch.dirs = dirs
        try:
            yield
        finally:
            self._batch.dirs = None
            self._sync_now(builtins.list(dirs))

    def _sync_dirs(self, directories: builtins.list[str]) -> None:
        pending: dict[str, None] | None = getattr(self._batch, "dirs", None)
        if pending is None:
            self._sync_now(directories)
        else:
            pending.update(dict.fromkeys(directories))

    def _sync_now(self, directories: builtins.list[str]) -> None:
        """Flushes the entries of `directories`: one syncfs when there are many."""
        directories = builtins.list(dict.fromkeys(directories))
        if len(directories) >= _SYNCFS_FROM and can_sync_filesystem():
            for directory in directories:
                with suppress(FileNotFoundError):  # pruned since: nothing to flush
                    if os.stat(directory).st_dev != self._dev:
                        fsync_dir(directory)
            sync_filesystem(self._root_str)
            return
        for directory in directories:
            fsync_dir(directory)
