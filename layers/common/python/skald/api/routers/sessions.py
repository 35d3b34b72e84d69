"""/api/v1/sessions: sessions, messages, context, archives and commit."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from skald.api.deps import Admitted, ContainerDep, DataIdentity
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, errors
from skald.services.sessions.commit import Committed
from skald.services.sessions.results import (
    Archive,
    MessageAdded,
    MessagesAdded,
    SessionContext,
    SessionCreated,
    SessionId,
    SessionItem,
    SessionView,
    ToolResultMatches,
    ToolResultRead,
    ToolResults,
)
from skald.services.sessions.service import NewMessage

router = APIRouter(prefix="/api/v1/sessions")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AutoCommitPolicy(StrictModel):
    pending_tokens: int | None = Field(None, gt=0)
    pending_messages: int | None = Field(None, gt=0)
    idle_seconds: float | None = Field(None, gt=0)


class EventsConfig(StrictModel):
    tags: list[str] = Field(default_factory=list)


class ExtractionConfig(StrictModel):
    events: EventsConfig | None = None


class CreateSessionBody(BaseModel):
    session_id: str | None = None
    memory_policy: dict[str, Any] | None = None
    auto_commit_policy: AutoCommitPolicy | None = None
    memory_extraction_config: ExtractionConfig | None = None
    telemetry: bool | dict[str, Any] = False


class ConfigBody(StrictModel):
    memory_extraction_config: ExtractionConfig | None = None
    auto_commit_policy: AutoCommitPolicy | None = None
    memory_policy: dict[str, Any] | None = None
    telemetry: bool | dict[str, Any] = False


class MessageBody(BaseModel):
    role: str
    peer_id: str | None = None
    content: str | None = None
    parts: list[Any] | None = None
    created_at: str | None = None
    turn_id: str | None = None
    message_kind: Literal["user_query", "assistant_step", "tool_transport", "checkpoint"] | None = (
        None
    )
    source_message_ids: list[str] | None = None
    telemetry: bool | dict[str, Any] = False

    def to_message(self) -> NewMessage:
        return NewMessage(
            self.role,
            self.content,
            self.parts,
            self.peer_id,
            self.created_at,
            self.turn_id,
            self.message_kind,
            self.source_message_ids,
        )


class BatchBody(BaseModel):
    messages: list[MessageBody] = Field(max_length=100)
    telemetry: bool | dict[str, Any] = False


class EventMeta(StrictModel):
    tags: list[str] = Field(default_factory=list)


class ExtractionMetadata(StrictModel):
    event: EventMeta | None = None


class CommitBody(BaseModel):
    enable_working_memory: bool | None = None
    reset_context: bool = False
    keep_recent_count: int = Field(0, ge=0, le=10000)
    retention_mode: Literal["turn_budget"] | None = None
    keep_recent_turn_count: int | None = None
    retained_message_token_budget: int | None = None
    min_raw_tail_steps: int | None = None
    extraction_metadata: ExtractionMetadata | None = None
    telemetry: bool | dict[str, Any] = False


def _dump(model: BaseModel | None) -> dict[str, Any] | None:
    return None if model is None else model.model_dump(exclude_none=True)


@router.post("", response_model=Ok[SessionCreated], responses=errors(409))
def create_session(body: CreateSessionBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    rec = c.sessions.create(
        identity,
        body.session_id,
        memory_policy=body.memory_policy,
        auto_commit_policy=_dump(body.auto_commit_policy),
        extraction_config=_dump(body.memory_extraction_config),
    )
    return ok(c.sessions.created(identity, rec))


@router.get("", response_model=Ok[list[SessionItem]])
def list_sessions(identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(c.sessions.listing(identity), full=True, kind=list[SessionItem])


@router.get("/{session_id}", response_model=Ok[SessionView], responses=errors(404))
def get_session(
    session_id: str, identity: DataIdentity, c: ContainerDep, auto_create: bool = False
) -> Envelope:
    rec = c.sessions.get(identity, session_id, auto_create=auto_create)
    return ok(c.sessions.session_view(identity, rec), full=True)


@router.delete(
    "/{session_id}", response_model=Ok[SessionId], responses=errors(404), dependencies=[Admitted]
)
def delete_session(session_id: str, identity: DataIdentity, c: ContainerDep) -> Envelope:
    c.sessions.delete(identity, session_id)
    return ok(SessionId(session_id))


@router.patch("/{session_id}/config", response_model=Ok[SessionView], responses=errors(404))
def update_config(
    session_id: str, body: ConfigBody, identity: DataIdentity, c: ContainerDep
) -> Envelope:
    fields: dict[str, Any] = {}
    for name in ("memory_extraction_config", "auto_commit_policy", "memory_policy"):
        if name in body.model_fields_set:
            value = getattr(body, name)
            fields[name] = (
                value.model_dump(exclude_none=True) if isinstance(value, BaseModel) else value
            )
    rec = c.sessions.update_config(identity, session_id, fields)
    return ok(c.sessions.session_view(identity, rec))


@router.post(
    "/{session_id}/messages",
    response_model=Ok[MessageAdded],
    responses=errors(404, 409, 412),
    dependencies=[Admitted],
)
def add_message(
    session_id: str, body: MessageBody, identity: DataIdentity, c: ContainerDep
) -> Envelope:
    return ok(c.sessions.add_message(identity, session_id, body.to_message()))


@router.post(
    "/{session_id}/messages/batch",
    response_model=Ok[MessagesAdded],
    responses=errors(404, 409, 412),
    dependencies=[Admitted],
)
def add_messages(
    session_id: str, body: BatchBody, identity: DataIdentity, c: ContainerDep
) -> Envelope:
    return ok(c.sessions.add_batch(identity, session_id, [m.to_message() for m in body.messages]))


@router.get("/{session_id}/context", response_model=Ok[SessionContext], responses=errors(404))
def get_context(
    session_id: str, identity: DataIdentity, c: ContainerDep, token_budget: int = 128000
) -> Envelope:
    return ok(c.sessions.context(identity, session_id, token_budget))


@router.get(
    "/{session_id}/archives/{archive_id}", response_model=Ok[Archive], responses=errors(404)
)
def get_archive(
    session_id: str, archive_id: str, identity: DataIdentity, c: ContainerDep
) -> Envelope:
    return ok(c.sessions.archive(identity, session_id, archive_id))


@router.post(
    "/{session_id}/commit",
    response_model=Ok[Committed],
    responses=errors(404, 409, 412),
    dependencies=[Admitted],
)
def commit(session_id: str, body: CommitBody, identity: DataIdentity, c: ContainerDep) -> Envelope:
    tags = (
        body.extraction_metadata.event.tags
        if body.extraction_metadata and body.extraction_metadata.event
        else None
    )
    return ok(
        c.sessions.commit(
            identity,
            session_id,
            keep_recent_count=body.keep_recent_count,
            event_tags=tags,
            reset_context=body.reset_context,
        )
    )


@router.get("/{session_id}/tool-results", response_model=Ok[ToolResults], responses=errors(404))
def list_tool_results(
    session_id: str,
    identity: DataIdentity,
    c: ContainerDep,
    tool_name: str | None = None,
    limit: int = Query(50, ge=1, le=1000),
) -> Envelope:
    return ok(c.tool_results.list(identity, session_id, tool_name, limit))


@router.get(
    "/{session_id}/tool-results/{tool_result_id}",
    response_model=Ok[ToolResultRead],
    responses=errors(404),
)
def read_tool_result(
    session_id: str,
    tool_result_id: str,
    identity: DataIdentity,
    c: ContainerDep,
    offset: int = Query(0, ge=0),
    limit: int = 20000,
    include_metadata: bool = True,
) -> Envelope:
    return ok(
        c.tool_results.read(
            identity,
            session_id,
            tool_result_id,
            offset=offset,
            limit=limit,
            include_metadata=include_metadata,
        )
    )


@router.get(
    "/{session_id}/tool-results/{tool_result_id}/search",
    response_model=Ok[ToolResultMatches],
    responses=errors(404),
)
def search_tool_result(
    session_id: str,
    tool_result_id: str,
    identity: DataIdentity,
    c: ContainerDep,
    q: str = Query(..., min_length=1),
    limit: int = Query(20, ge=1, le=1000),
    context_chars: int = Query(300, ge=0, le=10000),
) -> Envelope:
    return ok(
        c.tool_results.search(
            identity, session_id, tool_result_id, query=q, limit=limit, context_chars=context_chars
        )
    )
