"""The results of find, search (list mode), grep and glob, as the HTTP edge serialises them
(docs/api.md, "Retrieval routes"). A None marked OMIT_NONE is a key the wire leaves out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from skald.domain.wire import OMIT_NONE, WireUri


@dataclass(slots=True)
class Hit:
    context_type: str
    uri: WireUri
    level: int
    score: float
    abstract: str
    tags: list[str]
    match_reason: str
    origin_score: Annotated[float | None, OMIT_NONE] = None
    time_score: Annotated[float | None, OMIT_NONE] = None
    content: Annotated[str | None, OMIT_NONE] = None  # with read_content


@dataclass(frozen=True, slots=True)
class Provenance:
    uri: WireUri
    sources: list[WireUri]
    match_reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedQuery:
    """One query of search's intent plan, as the model wrote it."""

    query: str
    context_type: Annotated[str | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """search's intent plan: the queries written from the session's recent messages."""

    queries: list[PlannedQuery]
    reasoning: str


@dataclass(frozen=True, slots=True)
class RetrievalPlan:
    """How a retrieval ran, which a request's telemetry reports: the index mode (dense,
    lexical, hybrid; browse without a query), the queries, the candidates considered."""

    mode: str
    queries: list[str]
    candidates: int


@dataclass(slots=True)
class Found:
    """find's and list-mode search's hits by group; `query_plan` (search's intent plan) and
    `provenance` (include_provenance) only when there are."""

    memories: list[Hit] = field(default_factory=list)
    resources: list[Hit] = field(default_factory=list)
    skills: list[Hit] = field(default_factory=list)
    total: int = 0
    provenance: Annotated[list[Provenance] | None, OMIT_NONE] = None
    query_plan: Annotated[QueryPlan | None, OMIT_NONE] = None

    def hits(self) -> list[Hit]:
        return [*self.memories, *self.resources, *self.skills]


@dataclass(frozen=True, slots=True)
class GrepLine:
    line: int
    content: str


@dataclass(frozen=True, slots=True)
class GrepMatch:
    line: int
    uri: WireUri
    content: str
    before_context: Annotated[list[GrepLine] | None, OMIT_NONE] = None
    after_context: Annotated[list[GrepLine] | None, OMIT_NONE] = None
    tags: Annotated[list[str] | None, OMIT_NONE] = None  # with include_tags


@dataclass(frozen=True, slots=True)
class GrepResult:
    matches: list[GrepMatch]
    count: int
    match_count: int
    files_scanned: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class GlobItem:
    """A match with the extra fields asked for."""

    uri: WireUri
    size: Annotated[int | None, OMIT_NONE] = None
    modTime: Annotated[str | None, OMIT_NONE] = None  # noqa: N815 - wire name
    id: Annotated[str | None, OMIT_NONE] = None
    tags: Annotated[list[str] | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True)
class GlobResult:
    """URIs, or items when extra fields or tags are asked for."""

    matches: list[WireUri] | list[GlobItem]
    count: int
    total: int
    has_more: bool
