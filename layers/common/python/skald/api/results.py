"""The `result` of the routes whose services still answer dicts, as the OpenAPI document
describes it (docs/api.md, "What Skald serves"). Typed results (dataclasses next to their
use case, e.g. skald.services.retrieval.results) are their own documentation and are checked
as they are serialised (skald.api.envelope); a route moves off this module when its service
returns one."""

from __future__ import annotations

from typing import Any

from skald.api.openapi import VikingUri, Wire

# ------------------------------------------------------------------------ search


class ContextEntry(Wire):
    uri: VikingUri
    category: str
    score: float | None
    detail: str
    text: str
    origin: str


class Context(Wire):
    """search with mode=context."""

    entries: list[ContextEntry]
    rendered: str
    digest: str
    stats: dict[str, Any]


# ------------------------------------------------------------------------ resources, tasks


class Task(Wire):
    task_id: str
    task_type: str
    status: str
    created_at: float
    updated_at: float
    processing_seconds: float | None = None
    resource_id: str | None = None
    meta: dict[str, Any] | None = None
    stage: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    created_at_iso: str
    updated_at_iso: str


class TaskPage(Wire):
    items: list[Task]
    has_more: bool
    next_cursor: str | None


class QueueCounters(Wire):
    processed: int
    requeue_count: int
    error_count: int
    pending: int
    in_progress: int
    errors: list[Any]


# ------------------------------------------------------------------------ sessions


class SessionUser(Wire):
    account_id: str
    user_id: str


class SessionCreated(Wire):
    session_id: str
    uri: VikingUri
    user: SessionUser
    auto_commit_policy: dict[str, Any] | None
    memory_extraction_config: dict[str, Any] | None


class SessionItem(Wire):
    session_id: str
    uri: VikingUri
    is_dir: bool
    mod_time: str


class TokenUsage(Wire):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Session(Wire):
    session_id: str
    uri: VikingUri
    created_at: str
    updated_at: str
    user: SessionUser
    message_count: int
    total_message_count: int
    commit_count: int
    pending_tokens: int
    auto_commit_policy: dict[str, Any] | None
    memory_extraction_config: dict[str, Any] | None
    last_commit_at: str | None = None
    llm_token_usage: TokenUsage | None = None
    embedding_token_usage: TokenUsage | None = None


class ToolResultItem(Wire):
    tool_result_id: str
    tool_name: str
    tool_status: str
    message_id: str
    original_chars: int
    preview_chars: int
    mime_type: str
    synopsis_kind: str
    storage_uri: VikingUri
    offset_unit: str


class ToolResults(Wire):
    tool_results: list[ToolResultItem]


class ToolResultRead(Wire):
    tool_result_id: str
    content: str
    offset: int
    limit: int
    offset_unit: str
    total_chars: int
    has_more: bool
    metadata: dict[str, Any] | None = None


class ToolResultMatch(Wire):
    offset: int
    offset_unit: str
    snippet: str


class ToolResultMatches(Wire):
    tool_result_id: str
    matches: list[ToolResultMatch]


class SessionId(Wire):
    session_id: str


class MessageAdded(Wire):
    session_id: str
    message_count: int
    pending_tokens: int
    message_id: str


class MessagesAdded(Wire):
    session_id: str
    added: int
    message_count: int
    pending_tokens: int
    message_ids: list[str]


class Message(Wire):
    id: str
    role: str
    parts: list[dict[str, Any]]
    created_at: str


class SessionContext(Wire):
    latest_archive_overview: str
    pre_archive_abstracts: list[dict[str, Any]]
    messages: list[Message]
    estimatedTokens: int  # noqa: N815
    stats: dict[str, Any]


class Archive(Wire):
    archive_id: str
    status: str
    abstract: str
    overview: str
    messages: list[Message]


# ------------------------------------------------------------------------ system, admin


class UsageUsers(Wire):
    total: int
    admin: int
    user: int


class UsageSessions(Wire):
    total: int
    messages: int
    commits: int


class UsageRecords(Wire):
    total: int
    resource: int
    memory: int
    skill: int


class Usage(Wire):
    account_id: str
    users: UsageUsers
    sessions: UsageSessions | None = None
    records: UsageRecords | None = None


class Health(Wire):
    status: str
    healthy: bool
    version: str
    # absent behind the API gateway: the public probe says nothing about auth there
    auth_mode: str | None = None


class Ready(Wire):
    status: str
    checks: dict[str, str]


class SystemStatus(Wire):
    initialized: bool
    user: str


class Component(Wire):
    """One observed component; `status` is a text table, or a dict with format=json."""

    name: str
    is_healthy: bool
    has_errors: bool
    status: str | dict[str, Any]


class Observer(Wire):
    """OpenViking's system status (is_healthy, errors, components) and Skald's summary."""

    is_healthy: bool
    errors: list[str]
    components: dict[str, Component]
    initialized: bool
    healthy: bool
    version: str
    auth_mode: str
    backend: str
    queues: dict[str, QueueCounters]
    checks: dict[str, str]
    features: dict[str, bool] = {}


class DebugHealth(Wire):
    healthy: bool


class VectorCount(Wire):
    count: int


class VectorRecord(Wire):
    id: str
    uri: VikingUri
    level: int
    section: int
    context_type: str
    parent: str
    abstract: str
    tags: list[str]
    memory_type: str | None = None
    owner: str | None = None
    peer: str | None = None
    created_at: str
    updated_at: str


class VectorScroll(Wire):
    records: list[VectorRecord]
    next_cursor: str | None


class MemoryStats(Wire):
    total_memories: int
    by_category: dict[str, int]
    hotness_distribution: dict[str, int]
    staleness: dict[str, float]


class SessionStats(Wire):
    session_id: str
    total_turns: int
    memories_extracted: int
    contexts_used: int
    skills_used: int


class MissingRecord(Wire):
    uri: VikingUri
    path: str
    level: int
    key: str


class Consistency(Wire):
    """Drift between what is stored below `uri` (files at level 2, directories at level 0)
    and the index records there."""

    uri: VikingUri
    ok: bool
    expected_count: int
    missing_record_count: int
    orphan_record_count: int
    missing_records: list[MissingRecord]
    orphan_records: list[VikingUri]
    missing_records_truncated: bool
    orphan_records_truncated: bool


class Account(Wire):
    account_id: str
    created_at: float | None = None
    user_count: int | None = None
    status: str | None = None  # active | deleting
    deletion_task_id: str | None = None


class AccountKey(Wire):
    account_id: str
    admin_user_id: str
    user_key: str


class User(Wire):
    account_id: str
    user_id: str
    role: str
    status: str | None = None  # active | deleting
    has_key: bool | None = None
    deletion_task_id: str | None = None


class Deletion(Wire):
    """A removal under way: the tombstone is set, the purge runs as task `task_id`."""

    account_id: str
    user_id: str | None = None
    status: str  # deleting
    task_id: str
    deleted: bool | None = None


class ApiKey(Wire):
    """One of a user's keys, as listings show it (never the key)."""

    key_id: str
    name: str
    account_id: str
    user_id: str
    created_at: str
    created_by: str
    expires_at: str | None = None
    last_used_at: str | None = None


class NewApiKey(ApiKey):
    user_key: str  # shown once


class RevokedKey(Wire):
    account_id: str
    user_id: str
    key_id: str
    revoked: bool


class UserKey(Wire):
    account_id: str
    user_id: str
    user_key: str


class Deleted(Wire):
    account_id: str
    deleted: bool
