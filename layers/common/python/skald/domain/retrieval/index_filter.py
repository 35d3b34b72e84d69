"""IndexFilter rules every SearchIndex adapter applies the same way: the canonical form URIs
are matched in, what a scope covers, the time fields and the level list.

A scope covers the record at its URI and every record below it (the record's `ancestors`
hold the scope). A scheme root (`viking://`) covers everything, so it adds no condition."""

from __future__ import annotations

from collections.abc import Sequence

TIME_FIELDS = ("updated_at", "created_at")
# The range of a level an index can compare (a 64-bit integer column).
_LEVEL_RANGE = (-(2**63), 2**63 - 1)
# IndexQuery.mode: the rankings every adapter serves.
SEARCH_MODES = ("dense", "lexical", "hybrid", "recent")


class MalformedFilter(ValueError):
    """A filter no index can apply: the caller's mistake (the API answers 400 INVALID_FILTER).
    Every other error of a search is the server's."""


def norm_uri(uri: str) -> str:
    """Canonical form for matching: no trailing slash, except on a bare scheme root."""
    while uri.endswith("/") and not uri.endswith("://"):
        uri = uri[:-1]
    return uri


def scope_uris(scopes: Sequence[str]) -> list[str] | None:
    """`scopes` in canonical form; None when a scheme root among them covers everything."""
    norm = [norm_uri(s) for s in scopes]
    if any(s.endswith("://") for s in norm):
        return None
    return norm


def check_time_field(field: str) -> None:
    """Raises MalformedFilter unless `field` is a record time the since/until bounds can apply
    to."""
    if field not in TIME_FIELDS:
        raise MalformedFilter(f"time_field must be updated_at or created_at, not {field!r}")


def level_list(levels: int | Sequence[int]) -> list[int]:
    """IndexFilter.levels (one level or several) as a list of ints. Raises MalformedFilter for
    a value that is not an integer an index can hold."""
    out = [levels] if isinstance(levels, int) else list(levels)
    for level in out:
        if (
            isinstance(level, bool)
            or not isinstance(level, int)
            or not _LEVEL_RANGE[0] <= level <= _LEVEL_RANGE[1]
        ):
            raise MalformedFilter(f"level {level!r} is not a level (0, 1 or 2)")
    return out
