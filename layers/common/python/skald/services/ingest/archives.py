"""A zipped directory read under the archive limits: which members are added and under which
names, and their bytes, inflated a chunk at a time.

The list of members is read from the archive's directory alone, in the archive's order, so it
is the same every time the same bytes are read with the same options: an import that writes
an archive in several jobs names its progress by a position in this list. Every rule that
refuses an archive (entry count, paths, names, sizes declared and actual, corrupt data) is a
4xx, found by `check` before anything is written.
"""

from __future__ import annotations

import fnmatch
import io
import stat
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from skald.domain.errors import Conflict, InvalidArgument, PayloadTooLarge
from skald.domain.paths.names import is_managed_name
from skald.domain.paths.uri import addressable_name

DEFAULT_IGNORED_DIRS = frozenset({".git", "__MACOSX", ".svn", ".hg", "__pycache__"})
_CHUNK = 1024 * 1024  # archive members are inflated this much at a time
# What a corrupt or unsupported archive raises while it is read: a falsified size (bad CRC),
# a broken deflate stream, a truncated member, an unknown method, an encrypted member.
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    NotImplementedError,
    RuntimeError,
    ValueError,
    OSError,
)


@dataclass(frozen=True)
class ArchiveOptions:
    """The add's choice of members: comma-separated folder names and glob patterns."""

    ignore_dirs: str | None = None
    include: str | None = None
    exclude: str | None = None


@dataclass(frozen=True)
class Member:
    rel: str  # its path below the add's root (a lone top folder unwrapped)
    name: str  # its name in the archive
    size: int  # its size as the archive declares it (checked when it is inflated)


class ArchiveReader:
    def __init__(self, *, max_entries: int, max_bytes: int, max_file_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_file_bytes = max_file_bytes

    def files(self, data: bytes, options: ArchiveOptions) -> list[tuple[str, bytes]]:
        """Every member added, with its bytes."""
        with _opened(data) as zf:
            members = self._members(zf, options)
            return self._read(zf, members)

    def members(self, data: bytes, options: ArchiveOptions) -> list[Member]:
        """The members added, from the archive's directory alone (nothing inflated)."""
        with _opened(data) as zf:
            return self._members(zf, options)

    def check(self, data: bytes, members: Sequence[Member]) -> None:
        """Inflates every member once and drops its bytes: a corrupt member, or one larger
        than it says, is refused now, holding one member in memory at a time."""
        with _opened(data) as zf:
            total = 0
            for m in members:
                total += len(self._inflate(zf, m, total))

    def read(self, data: bytes, members: Sequence[Member]) -> list[tuple[str, bytes]]:
        """Some members' bytes (a chunk of an import), the limits checked again."""
        with _opened(data) as zf:
            return self._read(zf, members)

    def _read(self, zf: zipfile.ZipFile, members: Sequence[Member]) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        total = 0
        for m in members:
            content = self._inflate(zf, m, total)
            total += len(content)
            out.append((m.rel, content))
        return out

    def _members(self, zf: zipfile.ZipFile, options: ArchiveOptions) -> list[Member]:
        ignored = set(DEFAULT_IGNORED_DIRS)
        ignored.update(_items(options.ignore_dirs))
        includes, excludes = _items(options.include), _items(options.exclude)
        infos = [i for i in zf.infolist() if not i.is_dir()]
        if len(infos) > self.max_entries:
            raise PayloadTooLarge("Archive entry count", len(infos), self.max_entries)
        out: list[Member] = []
        names: dict[str, str] = {}
        declared = 0
        for info in infos:
            if stat.S_ISLNK(info.external_attr >> 16):
                continue  # links could point outside the tree
            rel = "/".join(addressable_name(p) for p in _clean_member(info.filename).split("/"))
            if rel in names:
                raise InvalidArgument(
                    f"Archive members '{names[rel]}' and "
                    f"'{info.filename}' would both be stored as '{rel}'"
                )
            names[rel] = info.filename
            if not _chosen(rel, ignored, includes, excludes):
                continue
            declared += info.file_size  # as declared: what is inflated is counted again
            if declared > self.max_bytes:
                raise PayloadTooLarge("Archive content", declared, self.max_bytes)
            out.append(Member(rel, info.filename, info.file_size))
        return _unwrapped(out)

    def _inflate(self, zf: zipfile.ZipFile, m: Member, total: int) -> bytes:
        """A member's bytes, inflated a chunk at a time and counted as they come: the sizes an
        archive declares are not trusted, so memory stays bounded by the limits."""
        chunks: list[bytes] = []
        size = 0
        try:
            with zf.open(m.name) as member:
                while chunk := member.read(_CHUNK):
                    size += len(chunk)
                    if size > self.max_file_bytes:
                        raise PayloadTooLarge(f"File {m.rel}", size, self.max_file_bytes)
                    if total + size > self.max_bytes:
                        raise PayloadTooLarge("Archive content", total + size, self.max_bytes)
                    chunks.append(chunk)
        except _ZIP_ERRORS as exc:
            raise _unreadable(exc) from None
        return b"".join(chunks)


def _chosen(rel: str, ignored: set[str], includes: list[str], excludes: list[str]) -> bool:
    """Whether a member is added: not in an ignored folder, no managed name, matched by an
    include pattern (when there are some) and by no exclude pattern."""
    parts = rel.split("/")
    if any(p in ignored for p in parts[:-1]) or any(is_managed_name(p) for p in parts):
        return False
    if includes and not any(
        fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(parts[-1], p) for p in includes
    ):
        return False
    return not any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(parts[-1], p) for p in excludes)


def _unwrapped(members: list[Member]) -> list[Member]:
    """A zip of one folder (how clients zip a directory) unwrapped to its content; a member
    that is both a file and a folder refused before anything is written."""
    tops = {m.rel.split("/", 1)[0] for m in members}
    if len(tops) == 1 and all("/" in m.rel for m in members):
        members = [Member(m.rel.split("/", 1)[1], m.name, m.size) for m in members]
    folders = {m.rel.rsplit("/", 1)[0] for m in members if "/" in m.rel}
    folders |= {f.rsplit("/", i)[0] for f in folders for i in range(1, f.count("/") + 1)}
    clash = next((m.rel for m in members if m.rel in folders), None)
    if clash is not None:
        raise Conflict(f"Archive member '{clash}' is both a file and a folder", {"path": clash})
    return members


@contextmanager
def _opened(data: bytes) -> Iterator[zipfile.ZipFile]:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except _ZIP_ERRORS as exc:
        raise _unreadable(exc) from None
    with zf:
        yield zf


def _unreadable(exc: Exception) -> InvalidArgument:
    return InvalidArgument(f"The archive cannot be read: {exc}", {"reason": type(exc).__name__})


def _items(raw: str | None) -> list[str]:
    return [p.strip() for p in (raw or "").split(",") if p.strip()]


def _clean_member(name: str) -> str:
    if name.startswith("/") or "\\" in name or ":" in name.split("/", 1)[0]:
        raise InvalidArgument(f"Archive member '{name}' has an absolute or foreign path")
    parts = [p for p in name.split("/") if p]
    if any(p in {".", ".."} for p in parts) or not parts:
        raise InvalidArgument(f"Archive member '{name}' escapes the archive root")
    return "/".join(parts)
