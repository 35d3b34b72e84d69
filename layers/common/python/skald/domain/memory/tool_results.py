"""Reading tool outputs recorded in a session's messages: by Unicode code point ranges, and
searched for a text with context around each match (`/sessions/{id}/tool-results`)."""

from __future__ import annotations

from typing import Any

from skald.domain.errors import InvalidArgument

OFFSET_UNIT = "unicode_code_point"
PREVIEW_CHARS = 2000


def read_range(text: str, offset: int, limit: int) -> dict[str, Any]:
    """`limit` -1 reads to the end; Python strings index by code point already."""
    if offset < 0:
        raise InvalidArgument("offset must be >= 0", {"field": "offset", "value": offset})
    if limit < -1:
        raise InvalidArgument(
            "limit must be -1 or greater than or equal to 0", {"field": "limit", "value": limit}
        )
    end = len(text) if limit == -1 else offset + limit
    return {
        "content": text[offset:end],
        "offset": offset,
        "limit": limit,
        "offset_unit": OFFSET_UNIT,
        "total_chars": len(text),
        "has_more": end < len(text),
    }


def find_matches(text: str, query: str, limit: int, context_chars: int) -> list[dict[str, Any]]:
    """Case-insensitive occurrences of `query`, each with `context_chars` on either side."""
    if not query:
        raise InvalidArgument("q must not be empty", {"field": "q"})
    haystack, needle = text.casefold(), query.casefold()
    out: list[dict[str, Any]] = []
    start = haystack.find(needle)
    # casefold may change lengths (ß -> ss); offsets then point into the folded text, which
    # is as long as the original for every text without such characters.
    while start != -1 and len(out) < limit:
        lo, hi = max(0, start - context_chars), start + len(needle) + context_chars
        snippet = ("..." if lo else "") + text[lo:hi] + ("..." if hi < len(text) else "")
        out.append({"offset": start, "offset_unit": OFFSET_UNIT, "snippet": snippet})
        start = haystack.find(needle, start + max(len(needle), 1))
    return out
