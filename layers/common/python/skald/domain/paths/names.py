"""Names the product manages in the tree, and the stable id of a record.

A directory exists iff its `.abstract.md` (L0) exists; `.overview.md` is its L1. Attributes
(tags, creation time) live in hidden sidecars: `.attrs.json` for a directory,
`.<name>.attrs.json` for a file, beside its parsed text (domain/text/parsed.py). A file that was
never rewritten has no attributes file unless it has tags: its creation time is its mtime.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

ABSTRACT = ".abstract.md"
OVERVIEW = ".overview.md"
DIR_ATTRS = ".attrs.json"
# A file's hidden sidecars beside it: its attributes and its parsed text.
_FILE_SIDECAR = re.compile(r"^\.(.+)\.(?:attrs|parsed)\.json$")
SIDECARS = frozenset({ABSTRACT, OVERVIEW, DIR_ATTRS})
# What a commit writes in a session's directory and in each of its archives, besides
# messages.jsonl: the session's and the archive's metadata, and the archive's outcome.
SESSION_FILES = frozenset({".meta.json", ".done", ".failed.json"})


def attrs_name(name: str) -> str:
    return f".{name}.attrs.json"


def is_file_sidecar(key: str) -> bool:
    """A file's attributes or parsed text (by its key or name)."""
    return bool(_FILE_SIDECAR.match(key.rpartition("/")[2]))


def attrs_key_of(file_key: str) -> str:
    """The key of a file's attributes, beside the file's key."""
    head, _, name = file_key.rpartition("/")
    return f"{head}/{attrs_name(name)}" if head else attrs_name(name)


def undated_files(keys: Iterable[str]) -> list[str]:
    """The visible files among the keys of a subtree that have no attributes file (their
    mtime is their creation time; a copy of them needs that time written down). Hidden names
    are sidecars and the product's own files (a session's `.meta.json`)."""
    present = set(keys)
    return [
        k
        for k in present
        if not k.rpartition("/")[2].startswith(".") and attrs_key_of(k) not in present
    ]


def attrs_bytes(attrs: dict[str, Any]) -> bytes:
    """An attributes file's content."""
    return json.dumps(attrs, sort_keys=True).encode()


def is_dated(attrs: dict[str, Any]) -> bool:
    """Whether the attributes record a creation time (else the file's mtime is it)."""
    return isinstance(attrs.get("created_at"), int | float)


def attr_tags(attrs: dict[str, Any]) -> list[str]:
    return [str(t) for t in attrs.get("tags") or []]


def attr_created(attrs: dict[str, Any], modified: float) -> float:
    """The recorded creation time; without one, the file's current version created it."""
    return float(attrs["created_at"]) if is_dated(attrs) else modified


def is_reserved_name(name: str) -> bool:
    """Names the product manages itself; clients cannot write them directly."""
    return name in SIDECARS or bool(_FILE_SIDECAR.match(name))


def is_managed_name(name: str) -> bool:
    """Names no client may give an entry it creates, a file or a directory: the sidecars,
    every file's attributes and parsed text, and the files a commit writes. A directory by
    one of them would stand where its parent's sidecar goes, and every write in it would
    then fail its summary."""
    return is_reserved_name(name) or name in SESSION_FILES


def record_id(account: str, uri: str, level: int = 2) -> str:
    """Stable 32-hex id of (account, uri, level): the id `stat` shows and `read` accepts."""
    return hashlib.md5(f"{account}\x00{uri}\x00{level}".encode()).hexdigest()
