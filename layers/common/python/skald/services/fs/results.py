"""The results of ls, tree, stat and attrs, as the HTTP edge serialises them (docs/api.md,
"Filesystem routes"). A None marked OMIT_NONE is a key the wire leaves out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from skald.domain.wire import OMIT_NONE, WireUri


@dataclass(slots=True)
class Entry:
    """An ls / tree entry; `output=original` adds name and mode, options add the others."""

    uri: WireUri
    size: int
    isDir: bool  # noqa: N815 - wire name
    modTime: str  # noqa: N815
    name: Annotated[str | None, OMIT_NONE] = None
    mode: Annotated[int | None, OMIT_NONE] = None
    abstract: Annotated[str | None, OMIT_NONE] = None
    overview: Annotated[str | None, OMIT_NONE] = None
    rel_path: Annotated[str | None, OMIT_NONE] = None
    tags: Annotated[list[str] | None, OMIT_NONE] = None
    locked: Annotated[bool | None, OMIT_NONE] = None
    count: Annotated[int | None, OMIT_NONE] = None
    id: Annotated[str | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True)
class Listing:
    """ls and tree: the page of entries (URIs only with `simple`) and whether more remain.
    The route answers `entries` as its result and `has_more` beside it."""

    entries: list[Entry] | list[WireUri]
    has_more: bool


@dataclass(frozen=True, slots=True)
class Stat:
    """A file has `id` (and `parsed`, for documents and media: kind, format, status and the
    parser's metadata), a directory `count`."""

    name: str
    size: int
    mode: int
    modTime: str  # noqa: N815 - wire name
    isDir: bool  # noqa: N815
    uri: WireUri
    isLocked: bool  # noqa: N815
    id: Annotated[str | None, OMIT_NONE] = None
    count: Annotated[int | None, OMIT_NONE] = None
    parsed: Annotated[dict[str, Any] | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True)
class Attrs:
    """An entry's attributes: `tags`, and `memory` (its memory type) below a memory root."""

    uri: WireUri
    context_type: str
    attrs: dict[str, Any]
