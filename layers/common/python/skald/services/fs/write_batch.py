"""Unconditional blob writes held back and written together.

A batch of files (a batch write, an upload's archive, a fetched repository, a pack) is written
with a few `BlobStore.put_many` calls instead of one put per file and per attributes file, so
the local store flushes the disk once per group instead of twice per file (measured in
bench/RESULTS.md, ingest). A held write is invisible until its group is written: only the
distinct new files of one batch go through here, never a key the block reads back.

A group can fail when another request has meanwhile made a directory where one of its files
goes (or a file where its folder goes). By default that is a Conflict ("retry"). With
`skip_blocked`, the group is written again one file at a time: every other file lands, and the
blocked ones are listed in `blocked` for the caller to report (a batch write with
skip_conflicts reports them skipped).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from skald.domain.errors import Conflict
from skald.ports import BlobPreconditionFailed, BlobStore

# A group is written once it holds this many blobs or bytes: the payloads are in memory
# already, but a bounded group keeps the store's open temporary files bounded too.
MAX_HELD_BLOBS = 256
MAX_HELD_BYTES = 16 << 20


class HeldWrites:
    def __init__(
        self,
        blobs: BlobStore,
        *,
        max_blobs: int = MAX_HELD_BLOBS,
        max_bytes: int = MAX_HELD_BYTES,
        skip_blocked: bool = False,
    ) -> None:
        self._blobs = blobs
        self._max_blobs = max_blobs
        self._max_bytes = max_bytes
        self._skip_blocked = skip_blocked
        self._items: dict[str, bytes] = {}
        self._units: list[list[tuple[str, bytes]]] = []
        self._bytes = 0
        self.blocked: set[str] = set()  # with skip_blocked: the files that could not go
        # Directories (their keys) this batch found or made: a thousand files in one folder
        # check their parents once, not once each.
        self.dirs: set[str] = set()

    def add(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Holds these writes: a file first, then its attributes (written in the same group;
        under skip_blocked, neither when a directory blocks the file)."""
        if any(key in self._items for key, _ in items):
            self.flush()  # a key twice: the first version is written before the second
        for key, data in items:
            self._items[key] = data
            self._bytes += len(data)
        self._units.append(list(items))
        if len(self._items) >= self._max_blobs or self._bytes >= self._max_bytes:
            self.flush()

    def holds(self, key: str) -> bool:
        return key in self._items

    def flush(self) -> None:
        items, self._items, self._bytes = list(self._items.items()), {}, 0
        units, self._units = self._units, []
        if not items:
            return
        try:
            self._blobs.put_many(items)
        except BlobPreconditionFailed as exc:  # the tree changed meanwhile where a file goes
            if not self._skip_blocked:
                raise Conflict(f"The tree changed concurrently ({exc}); retry") from None
            self._write_one_by_one(units)

    def _write_one_by_one(self, units: list[list[tuple[str, bytes]]]) -> None:
        """After a failed group: each file, then its attributes, on its own. The group may
        have written some of them already (the same bytes again, harmless), and a blocked
        file's attributes too: those are removed, there being no such file."""
        for (key, data), *attrs in units:
            try:
                self._blobs.put(key, data)
            except BlobPreconditionFailed:
                self.blocked.add(key)
                for other, _ in attrs:
                    self._blobs.delete(other)
                continue
            for other, payload in attrs:
                self._blobs.put(other, payload)


@contextmanager
def held_writes(blobs: BlobStore, *, skip_blocked: bool = False) -> Iterator[HeldWrites]:
    """A block whose held writes are all written when it ends, even when it raises (what
    the block reported as written before the error is then on the disk, as without holding),
    and durable as a whole (`BlobStore.batch`)."""
    with blobs.batch():
        held = HeldWrites(blobs, skip_blocked=skip_blocked)
        try:
            yield held
        finally:
            held.flush()
