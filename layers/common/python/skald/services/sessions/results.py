"""The results of the session routes other than commit (commit.py's `Committed`), as the HTTP
edge serialises them (docs/api.md, "Sessions"). A None marked OMIT_NONE is a key the wire
leaves out. The policies and the extraction config are the client's settings as normalised
(service.py's check_* functions) and stay dicts; so do a message's parts, the client's own
JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from skald.domain.memory.archives import ArchiveStatus
from skald.domain.wire import OMIT_NONE, WireUri


@dataclass(frozen=True, slots=True)
class SessionUser:
    account_id: str
    user_id: str


@dataclass(frozen=True, slots=True)
class TokenUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


@dataclass(frozen=True, slots=True)
class MemoriesExtracted:
    total: int


@dataclass(frozen=True, slots=True)
class SessionCreated:
    session_id: str
    uri: WireUri
    user: SessionUser
    auto_commit_policy: dict[str, Any] | None
    memory_extraction_config: dict[str, Any]
    memory_policy: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SessionView:
    """A session as get and config answer it (OpenViking's keys; retention is not kept, its
    keys answer their defaults)."""

    session_id: str
    uri: WireUri
    created_at: str
    updated_at: str
    created_by_account_id: str
    created_by_user_id: str
    user: SessionUser
    message_count: int
    total_message_count: int
    commit_count: int
    memories_extracted: MemoriesExtracted
    last_commit_at: str | None
    llm_token_usage: TokenUsage
    embedding_token_usage: TokenUsage
    pending_tokens: int
    keep_recent_count: int
    retention_mode: str | None
    failed_archive: str | None
    auto_commit_policy: dict[str, Any] | None
    memory_policy: dict[str, Any]
    memory_extraction_config: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SessionItem:
    session_id: str
    uri: WireUri
    is_dir: bool
    mod_time: str


@dataclass(frozen=True, slots=True)
class SessionId:
    session_id: str


@dataclass(frozen=True, slots=True)
class MessageAdded:
    session_id: str
    message_count: int
    pending_tokens: int
    message_id: str


@dataclass(frozen=True, slots=True)
class MessagesAdded:
    session_id: str
    added: int
    message_count: int
    pending_tokens: int
    message_ids: list[str]


@dataclass(frozen=True, slots=True)
class Message:
    """A stored message; the optional keys only when the message has them."""

    id: str
    role: str
    parts: list[dict[str, Any]]
    created_at: str
    peer_id: Annotated[str | None, OMIT_NONE] = None
    turn_id: Annotated[str | None, OMIT_NONE] = None
    message_kind: Annotated[str | None, OMIT_NONE] = None
    source_message_ids: Annotated[list[str] | None, OMIT_NONE] = None

    def as_dict(self) -> dict[str, Any]:
        """The message as a line of an archive's messages.jsonl (the wire keys)."""
        out: dict[str, Any] = {
            "id": self.id,
            "role": self.role,
            "parts": self.parts,
            "created_at": self.created_at,
        }
        for key in ("peer_id", "turn_id", "message_kind", "source_message_ids"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class ArchiveAbstract:
    archive_id: str
    abstract: str


@dataclass(frozen=True, slots=True)
class ContextStats:
    totalArchives: int  # noqa: N815 - wire names
    includedArchives: int  # noqa: N815
    droppedArchives: int  # noqa: N815
    failedArchives: int  # noqa: N815
    activeTokens: int  # noqa: N815
    archiveTokens: int  # noqa: N815


@dataclass(frozen=True, slots=True)
class SessionContext:
    """The live messages and, within the token budget, the latest archive's overview and the
    earlier archives' abstracts."""

    latest_archive_overview: str
    pre_archive_abstracts: list[ArchiveAbstract]
    messages: list[Message]
    estimatedTokens: int  # noqa: N815 - wire name
    stats: ContextStats


@dataclass(frozen=True, slots=True)
class Archive:
    archive_id: str
    status: ArchiveStatus
    abstract: str
    overview: str
    messages: list[Message]


# ------------------------------------------------------------------------ tool results


@dataclass(frozen=True, slots=True)
class ToolResultItem:
    tool_result_id: str
    tool_name: str
    tool_status: str  # as the tool part recorded it
    message_id: str
    original_chars: int
    preview_chars: int
    mime_type: str
    synopsis_kind: str
    storage_uri: WireUri
    offset_unit: str


@dataclass(frozen=True, slots=True)
class ToolResults:
    tool_results: list[ToolResultItem] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ToolResultMetadata:
    tool_name: str
    mime_type: str
    sha256: str
    tool_status: str
    message_id: str


@dataclass(frozen=True, slots=True)
class ToolResultRead:
    tool_result_id: str
    content: str
    offset: int
    limit: int
    offset_unit: str
    total_chars: int
    has_more: bool
    metadata: Annotated[ToolResultMetadata | None, OMIT_NONE] = None  # include_metadata


@dataclass(frozen=True, slots=True)
class ToolResultMatch:
    offset: int
    offset_unit: str
    snippet: str


@dataclass(frozen=True, slots=True)
class ToolResultMatches:
    tool_result_id: str
    matches: list[ToolResultMatch]
