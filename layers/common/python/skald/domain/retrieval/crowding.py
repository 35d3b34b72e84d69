"""Which hits a result list keeps: a directory's sidecars (`.abstract.md`, `.overview.md`) must
not crowd out files.

A sidecar summarises its directory. It earns a place in a result list only when it tells the
reader something the listed files do not:

- a sidecar is left out when a file below its directory (at any depth) is listed: the file is
  the more specific answer, and its directory is one step up from it;
- at most one sidecar per directory is listed (the better ranked of the two).

The list keeps the ranking's order. It is built best first: a sidecar already kept is taken
out again when a file below its directory arrives, and the freed place goes to the next hit,
so the list still holds `limit` hits whenever the ranking has enough.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

SIDECAR_NAMES = frozenset((".abstract.md", ".overview.md"))


def sidecar_directory(uri: str) -> str | None:
    """The directory a sidecar URI summarises; None when `uri` is not a sidecar."""
    head, sep, name = uri.rstrip("/").rpartition("/")
    if not sep or name not in SIDECAR_NAMES or head.endswith(":/"):
        return None
    return head


def _ancestors(uri: str) -> list[str]:
    """Every directory above `uri`, nearest first, down to the scheme root's first level."""
    out: list[str] = []
    head = uri.rstrip("/")
    while True:
        head, sep, _ = head.rpartition("/")
        if not sep or head.endswith(":/") or not head:
            return out
        out.append(head)


def uncrowded(hits: Sequence[T], uri_of: Callable[[T], str], limit: int | None) -> list[T]:
    """The best `limit` hits of `hits` (best first) under the rule above; every hit that
    passes when `limit` is None."""
    kept: list[T | None] = []
    sidecar_at: dict[str, int] = {}  # directory -> index in `kept` of its listed sidecar
    covered: set[str] = set()  # directories some listed file lies below
    size = 0
    for hit in hits:
        if limit is not None and size >= limit:
            break
        uri = uri_of(hit)
        directory = sidecar_directory(uri)
        if directory is not None:
            if directory in sidecar_at or directory in covered:
                continue
            sidecar_at[directory] = len(kept)
            kept.append(hit)
            size += 1
            continue
        kept.append(hit)
        size += 1
        for parent in _ancestors(uri):
            if parent in covered:
                # Its ancestors are covered too, and their sidecars already out.
                break
            covered.add(parent)
            index = sidecar_at.get(parent)
            if index is not None and kept[index] is not None:
                kept[index] = None
                size -= 1
    return [hit for hit in kept if hit is not None]
