"""Names the product manages in the tree, and the stable id of a record.

A directory exists iff its `.abstract.md` (L0) exists; `.overview.md` is its L1. Attributes
(tags, creation time) live in hidden sidecars: `.attrs.json` for a directory,
`.<name>.attrs.json` for a file, beside its parsed text (domain/parsed.py).
"""

from __future__ import annotations

import hashlib
import re

ABSTRACT = ".abstract.md"
OVERVIEW = ".overview.md"
DIR_ATTRS = ".attrs.json"
# A file's hidden sidecars beside it: its attributes and its parsed text.
_FILE_SIDECAR = re.compile(r"^\.(.+)\.(?:attrs|parsed)\.json$")
SIDECARS = frozenset({ABSTRACT, OVERVIEW, DIR_ATTRS})


def attrs_name(name: str) -> str:
    return f".{name}.attrs.json"


def is_reserved_name(name: str) -> bool:
    """Names the product manages itself; clients cannot write them directly."""
    return name in SIDECARS or bool(_FILE_SIDECAR.match(name))


def record_id(account: str, uri: str, level: int = 2) -> str:
    """Stable 32-hex id of (account, uri, level): the id `stat` shows and `read` accepts."""
    return hashlib.md5(f"{account}\x00{uri}\x00{level}".encode()).hexdigest()
