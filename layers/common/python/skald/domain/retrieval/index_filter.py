"""IndexFilter rules every SearchIndex adapter applies the same way: the canonical form URIs
are matched in, what a scope covers, the time fields and the level list.

A scope covers the record at its URI and every record below it (the record's `ancestors`
hold the scope). A scheme root (`viking://`) covers everything, so it adds no condition."""

from __future__ import annotations

from collections.abc import Sequence

TIME_FIELDS = ("updated_at", "created_at")
# IndexQuery.mode: the rankings every adapter serves.
SEARCH_MODES = ("dense", "lexical", "hybrid", "recent")


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
    """Raises ValueError unless `field` is a record time the since/until bounds can apply to."""
    if field not in TIME_FIELDS:
        raise ValueError(f"time_field must be updated_at or created_at, not {field!r}")


def level_list(levels: int | Sequence[int]) -> list[int]:
    """IndexFilter.levels (one level or several) as a list of ints."""
    return [levels] if isinstance(levels, int) else list(levels)
