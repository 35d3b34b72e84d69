"""/api/v1/search: find, search (list and context modes), grep, glob."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from skald.api.deps import ContainerDep, DataIdentity
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, VikingUriIn, errors
from skald.api.telemetry import Operation, search_summary, wanted
from skald.compose.composition import Composition
from skald.domain.errors import InvalidArgument
from skald.services.context.request import recall_deprecation, recall_request
from skald.services.context.results import ContextBlock
from skald.services.context.service import ContextRequest
from skald.services.retrieval.matching import GlobRequest, GrepRequest
from skald.services.retrieval.request import parse_context_types, parse_levels
from skald.services.retrieval.results import Found, GlobResult, GrepResult, RetrievalPlan
from skald.services.retrieval.service import FindRequest

router = APIRouter(prefix="/api/v1/search")

SearchType = Literal["semantic", "keywords", "hybrid"]
CONTEXT_ONLY = (
    "query_expansion",
    "max_tokens",
    "quotas",
    "purpose",
    "detail",
    "dedup_turns",
    "exclude_uris",
    "peer_scope",
    "other_peer_penalty",
    "rewrite",
    "rewrite_max_bullets",
)


class FindBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = ""
    image_url: str | list[str] | None = None
    target_uri: VikingUriIn | list[VikingUriIn] | Literal[""] = ""
    context_type: str | list[str] | None = None
    limit: int = Field(10, ge=1, le=1000)
    node_limit: int | None = Field(None, ge=1, le=1000)
    score_threshold: float | None = None
    filter: dict[str, Any] | None = None
    include_provenance: bool = False
    tags: list[str] | None = None
    since: str | None = None
    until: str | None = None
    time_field: Literal["updated_at", "created_at"] | None = None
    level: int | str | list[int] | None = None
    read_content: bool = False
    telemetry: bool | dict[str, Any] = False
    events_time_decay_protection: str | None = None
    # Skald extension: find and search default to hybrid (dense + BM25 rank fusion).
    search_type: SearchType = "hybrid"


class SearchBody(FindBody):
    session_id: str | None = None
    mode: Literal["list", "context"] = "list"
    query_expansion: Literal["off", "auto"] = "auto"
    max_tokens: int = Field(1600, ge=64, le=32000)
    quotas: dict[str, int] | None = None
    purpose: Literal["chat", "coding"] | None = None
    detail: Literal["auto", "abstract", "overview", "full"] | dict[str, str] | None = None
    dedup_turns: int = Field(0, ge=0, le=100)
    exclude_uris: list[VikingUriIn] | None = Field(None, max_length=200)
    peer_scope: Literal["actor", "all"] = "all"
    other_peer_penalty: float | dict[str, float] | None = None
    rewrite: bool | Literal["auto"] = False
    rewrite_max_bullets: int = Field(6, ge=1, le=20)


class RecallBody(BaseModel):
    """The deprecated recall preset: context mode with recall's defaults."""

    model_config = ConfigDict(extra="forbid")
    query: str
    quotas: dict[str, int] | None = None
    max_chars: int = Field(6500, ge=1)
    min_score: float = 0.1
    peer_scope: Literal["actor", "all"] = "all"
    other_peer_penalty: float | dict[str, float] | None = None
    render: bool | Literal["full", "compact"] = True
    telemetry: bool | dict[str, Any] = False
    session_id: str | None = None
    query_expansion: Literal["off", "auto"] | None = None
    max_tokens: int | None = Field(None, ge=64, le=32000)
    purpose: Literal["chat", "coding"] | None = None
    detail: Literal["auto", "abstract", "overview", "full"] | dict[str, str] | None = None
    score_threshold: float | None = None
    dedup_turns: int | None = Field(None, ge=0, le=100)
    exclude_uris: list[VikingUriIn] | None = Field(None, max_length=200)
    rewrite: bool | Literal["auto"] = False
    rewrite_max_bullets: int = Field(6, ge=1, le=20)


class GrepBody(BaseModel):
    uri: VikingUriIn
    pattern: str
    exclude_uri: VikingUriIn | None = None
    case_insensitive: bool = False
    node_limit: int | None = 256
    level_limit: int = 10
    tags: list[str] | None = None
    include_tags: bool = False
    before_context: int = 0
    after_context: int = 0


class GlobBody(BaseModel):
    pattern: str
    uri: VikingUriIn = "viking://"
    node_limit: int | None = 256
    extra_fields: list[str] | None = None
    tags: list[str] | None = None
    include_tags: bool = False


def to_context_request(body: SearchBody) -> ContextRequest:
    return ContextRequest(
        base=to_request(body),
        query_expansion=body.query_expansion,
        max_tokens=body.max_tokens,
        quotas=body.quotas,
        purpose=body.purpose,
        detail=body.detail,
        dedup_turns=body.dedup_turns,
        exclude_uris=list(body.exclude_uris or []),
        peer_scope=body.peer_scope,
        other_peer_penalty=body.other_peer_penalty,
        rewrite=body.rewrite,
        rewrite_max_bullets=body.rewrite_max_bullets,
        provided=frozenset(body.model_fields_set),
    )


def to_request(body: FindBody) -> FindRequest:
    if body.image_url:
        # No multimodal embedder is available to this server: text vectors cannot match images.
        raise InvalidArgument(
            "image_url queries need a multimodal embedder; the configured "
            "embedder embeds text only. Search with a text query instead",
            {"field": "image_url"},
        )
    targets = (
        body.target_uri
        if isinstance(body.target_uri, list)
        else [body.target_uri]
        if body.target_uri
        else []
    )
    return FindRequest(
        query=body.query,
        target_uri=targets,
        context_type=parse_context_types(body.context_type),
        limit=body.node_limit or body.limit,
        score_threshold=body.score_threshold,
        filter=body.filter,
        include_provenance=body.include_provenance,
        tags=body.tags,
        since=body.since,
        until=body.until,
        time_field=body.time_field,
        level=parse_levels(body.level),
        read_content=body.read_content,
        search_type=body.search_type,
        events_time_decay_protection=body.events_time_decay_protection,
        session_id=getattr(body, "session_id", None),
    )


def hit_count(result: Found | ContextBlock) -> int:
    if isinstance(result, Found):
        return result.total
    return len(result.entries)


def observed(c: Composition, result: Found | ContextBlock, **extra: Any) -> Envelope:
    """The envelope of a retrieval result, counted (with how many results) for the observer."""
    c.metrics.retrieval(hit_count(result))
    return ok(result, **extra)


def planned(c: Composition, op: Operation | None, found: tuple[Found, RetrievalPlan]) -> Envelope:
    """The envelope of a list-mode result, with its telemetry when the request asked (`op`)."""
    result, plan = found
    if op is None:
        return observed(c, result)
    return observed(c, result, telemetry=op.report(search=search_summary(plan, hit_count(result))))


# find and list-mode search are coroutines: the query embedding starts on the event loop, in
# the background, before the hop to a worker thread, which then runs the search while the
# model works.


@router.post("/find", response_model=Ok[Found], responses=errors(404, 503))
async def find(body: FindBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    req = to_request(body)
    op = Operation("search.find") if wanted(body.telemetry) else None
    pending = c.retrieval.embed_query_early(req)
    return await run_in_threadpool(
        lambda: planned(c, op, c.retrieval.find_planned(identity, req, pending=pending))
    )


@router.post("/search", response_model=Ok[Found | ContextBlock], responses=errors(404, 503))
async def search(body: SearchBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    if body.mode == "list":
        used = sorted(f for f in CONTEXT_ONLY if f in body.model_fields_set)
        if used:
            raise InvalidArgument(
                f"Fields {used} are only valid with mode='context'", {"fields": used}
            )
        req = to_request(body)
        op = Operation("search.search") if wanted(body.telemetry) else None
        pending = c.retrieval.embed_query_early(req)
        return await run_in_threadpool(
            lambda: planned(c, op, c.retrieval.search_planned(identity, req, pending=pending))
        )
    if "target_uri" in body.model_fields_set and body.target_uri or body.read_content:
        raise InvalidArgument("target_uri and read_content are not accepted in context mode")
    return await run_in_threadpool(
        lambda: observed(c, c.context.assemble(identity, to_context_request(body)))
    )


@router.post(
    "/recall", response_model=Ok[ContextBlock], responses=errors(404, 503), deprecated=True
)
async def recall(body: RecallBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    provided = frozenset(body.model_fields_set)
    req = recall_request(body.model_dump(), provided)
    result = await run_in_threadpool(c.context.assemble, identity, req)
    if body.render is False:  # entries only
        result.rendered = ""
    result.stats.deprecated = recall_deprecation(provided)
    response = observed(c, result)
    response.headers["Deprecation"] = "true"
    response.headers["Link"] = '</api/v1/search/search>; rel="successor-version"'
    return response


@router.post("/grep", response_model=Ok[GrepResult], responses=errors(404))
def grep(body: GrepBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    req = GrepRequest(**body.model_dump())
    return ok(c.matching.grep(identity, req), full=True)


@router.post("/glob", response_model=Ok[GlobResult], responses=errors(404))
def glob(body: GlobBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    req = GlobRequest(
        pattern=body.pattern,
        uri=body.uri,
        node_limit=body.node_limit,
        extra_fields=body.extra_fields or [],
        tags=body.tags,
        include_tags=body.include_tags,
    )
    return ok(c.matching.glob(identity, req), full=True)
