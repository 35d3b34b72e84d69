"""Ports of the blob store: file content and sidecars (re-exported by skald.ports). Keys are
"{account}/{path after viking://}".
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from skald.domain.ops.scan_budget import ScanBudget


class BlobNotFound(KeyError):
    """The key does not exist."""


class BlobPreconditionFailed(Exception):
    """A create-only write met an existing key, or a compare-and-swap met a different etag."""


@dataclass(frozen=True)
class BlobInfo:
    key: str
    size: int
    modified: float  # epoch seconds
    etag: str


@dataclass(frozen=True)
class BlobListing:
    blobs: list[BlobInfo]  # objects directly under the prefix (with a delimiter) or all below it
    prefixes: list[str]  # "sub-directories" (common prefixes ending in the delimiter)


@runtime_checkable
class BlobStore(Protocol):
    def get(self, key: str) -> bytes:
        """Content of `key`; raises BlobNotFound."""
        ...

    def head(self, key: str) -> BlobInfo | None: ...

    def head_many(self, keys: Sequence[str]) -> list[BlobInfo | None]:
        """`head` of each key, in their order (a remote store asks several at once: a
        listing checks each subfolder's marker)."""
        ...

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> BlobInfo:
        """Atomic write. `if_none_match` = create-only; `if_match` = compare-and-swap on etag.
        Raises BlobPreconditionFailed when the condition does not hold (nothing is written)."""
        ...

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> list[BlobInfo]:
        """Unconditional writes of several distinct keys, each atomic, all durable when it
        returns (a store may flush them together). On an error some may have been written,
        each complete."""
        ...

    def delete(self, key: str) -> bool:
        """True when something was deleted."""
        ...

    def purge_prefix(self, prefix: str, *, limit: int = 1000) -> int:
        """Removes up to `limit` objects below `prefix` (a folder's key ending in "/") for
        good: on a store that keeps versions, every version and delete marker too. Returns how
        many objects or versions went (0: nothing is left)."""
        ...

    def list(self, prefix: str, *, delimiter: str | None = "/") -> BlobListing:
        """Objects under `prefix` (which should end with "/"). With a delimiter only the direct
        children plus common prefixes; with None every object below, recursively."""
        ...

    def iter_all(self, prefix: str, *, hidden: bool = True) -> Iterator[BlobInfo]:
        """Every object below `prefix`, recursively, in key order. `hidden=False` leaves out
        the keys with a dot segment after the prefix (domain.paths.uri.dot_key_below): a local
        store then skips them, and dot directories, without reading their metadata."""
        ...

    def get_many(self, items: Iterable[tuple[str, int]]) -> Generator[bytes | None, None, None]:
        """The content of each (key, expected size) of `items`, in their order; None for a key
        that no longer exists. A remote store reads ahead, several at a time, up to a bound
        on their expected bytes; `items` is drawn lazily, and closing the iterator stops the
        reads."""
        ...

    def read_tree(
        self,
        prefix: str,
        *,
        enter: Callable[[str], bool],
        admit: Callable[[str], bool] | None,
        budget: ScanBudget,
    ) -> Generator[tuple[str, bytes], None, None]:
        """(key, content) of every object below `prefix` (a folder's key ending in "/")
        without a dot segment after it, in key order: what a scan of a whole tree (grep)
        reads. `enter(folder)` is asked of each folder below the prefix (its key without the
        trailing "/") before anything in it, and False leaves its subtree out; `admit(key)`
        (None: every object) is asked of each object before it is read, and False leaves it
        out; then `budget`
        takes the object's size, or skips it. A local store reads each object without
        listing its metadata first; a remote store lists and reads ahead as get_many does,
        so it asks `admit` and the budget ahead of what it yields. An object gone since it
        was listed is left out; closing the iterator stops the reads."""
        ...

    def walk_keys(self, prefix: str, *, enter: Callable[[str], bool]) -> Iterator[str]:
        """The key of every object below `prefix` (a folder's key ending in "/") without a
        dot segment after it, in key order, without their metadata (a local store reads
        none): what a match on names (glob) needs. `enter` as read_tree's."""
        ...

    def copy(self, src: str, dst: str) -> BlobInfo:
        """Server-side copy; raises BlobNotFound."""
        ...

    def batch(self) -> AbstractContextManager[None]:
        """A block of this thread's writes that is durable as a whole when it ends: a store
        may then flush once what it would otherwise flush after every write. Each write stays
        atomic, and visible to readers at once, either way."""
        ...
