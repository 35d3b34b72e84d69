"""A find or search request (FindRequest) and the checks of its parameters: search type,
limit, levels, context types, and a listing's need for a filter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skald.domain.errors import InvalidArgument

SEARCH_TYPES = {"semantic": "dense", "keywords": "lexical", "hybrid": "hybrid"}
CONTEXT_TYPES = ("memory", "resource", "skill")


@dataclass
class FindRequest:
    query: str = ""
    target_uri: list[str] = field(default_factory=list)
    context_type: list[str] | None = None
    limit: int = 10
    score_threshold: float | None = None
    filter: dict[str, Any] | None = None
    include_provenance: bool = False
    tags: list[str] | None = None
    since: str | None = None
    until: str | None = None
    time_field: str | None = None
    level: list[int] | None = None
    read_content: bool = False
    search_type: str = "hybrid"
    session_id: str | None = None
    events_time_decay_protection: str | None = None
    exclude_uris: list[str] = field(default_factory=list)


def check_listing(req: FindRequest) -> None:
    """An empty find/search query lists what its filters select; with no filter at all it
    would list an arbitrary slice of everything the caller can see, so it is refused. (Context
    mode, which budgets whatever it finds, still browses the newest.)"""
    if (
        req.filter
        or req.tags
        or req.since
        or req.until
        or req.level
        or req.context_type
        or any(u.strip() for u in req.target_uri)
    ):
        return
    raise InvalidArgument(
        "query is empty and no filter is given: pass a query, or at least one of target_uri, "
        "filter, tags, since, until, level or context_type to list matching contexts "
        "(newest first)"
    )


def checked_mode(req: FindRequest) -> str:
    """The index mode of a request's search_type, after the checks of its limit and query."""
    mode = SEARCH_TYPES.get(req.search_type)
    if mode is None:
        raise InvalidArgument(
            f"Invalid search_type '{req.search_type}': semantic, keywords or hybrid"
        )
    if req.limit < 1:
        raise InvalidArgument("limit must be >= 1")
    if mode == "lexical" and not req.query.strip():
        raise InvalidArgument("keywords search needs a non-empty query")
    return mode


def parse_levels(level: int | str | list[int] | list[str] | None) -> list[int] | None:
    if level is None or level == "":
        return None
    values = (
        level
        if isinstance(level, list)
        else str(level).split(",")
        if isinstance(level, str)
        else [level]
    )
    out: list[int] = []
    for v in values:
        text = str(v).strip().upper().removeprefix("L")
        if text not in {"0", "1", "2"}:
            raise InvalidArgument(f"Invalid level '{v}': 0, 1 or 2")
        out.append(int(text))
    return sorted(set(out))


def parse_context_types(value: str | list[str] | None) -> list[str] | None:
    if value is None or value == "" or value == []:
        return None
    items = value if isinstance(value, list) else value.split(",")
    out = []
    for item in items:
        t = item.strip().lower()
        if t == "memories":
            t = "memory"
        if t.endswith("s") and t[:-1] in CONTEXT_TYPES:
            t = t[:-1]
        if t not in CONTEXT_TYPES:
            raise InvalidArgument(f"Invalid context_type '{item}': memory, resource or skill")
        out.append(t)
    return sorted(set(out))
