"""What both memory extractors share: the extraction context and result, the `Extractor`
interface, skip reason codes, the collector that folds operations on the same file and caps
what is reported, and message helpers (text, date, tool calls)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Protocol, runtime_checkable

from skald.domain.errors import InvalidArgument
from skald.domain.memory.types import (
    MERGE_NEWEST_FIRST,
    MemoryOperation,
    Retraction,
    memory_type_spec,
    one_line,
    operation_key,
    validate_operation,
)
from skald.ports import SessionMessage

# Reason codes of skipped candidates (memory_diff.json "skipped_operations").
SKIP_DUPLICATE = "duplicate"
SKIP_TOO_SHORT = "too_short"
SKIP_PEER_DISABLED = "peer_memory_disabled"
SKIP_NO_MEMORY = "no_memory_found"
SKIP_ASSISTANT = "assistant_message"
SKIP_QUESTION = "question"
SKIP_VAGUE = "vague_object"
SKIP_REQUEST = "request_not_event"
SKIP_INVALID_DATE = "invalid_date"
SKIP_INVALID_PEER = "invalid_peer"
SKIP_INVALID_TAG = "invalid_tag"
SKIP_TOOL_UNRESOLVED = "tool_error_unresolved"
SKIP_EMPTY_ARCHIVE = "empty_archive"
SKIP_LIMIT = "limit_reached"
SKIP_LLM_FAILED = "llm_failed"
SKIP_INVALID_OPERATION = "invalid_operation"

PERSONAL_TYPES = frozenset({"preferences", "identity", "profile", "entities", "events"})


@dataclass
class ExtractionContext:
    user_id: str
    session_id: str
    archive_id: str
    peer_memories: bool = False
    event_tags: list[str] = field(default_factory=list)  # extra "k=v" tags for event memories
    now_iso: str = ""  # fallback date when a message has no usable created_at
    # the memories already written that this archive may update: (path below the memory
    # root, body); given to the LLM so it can supersede or retract them
    existing: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class ExtractionResult:
    operations: list[MemoryOperation] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {"reason","detail","message_id"?}
    usage: dict[str, Any] = field(default_factory=dict)
    retractions: list[Retraction] = field(default_factory=list)


@runtime_checkable
class Extractor(Protocol):
    def extract(
        self, messages: Sequence[SessionMessage], ctx: ExtractionContext
    ) -> ExtractionResult: ...


# --------------------------------------------------------------------------------------------
# Collecting operations: one operation per target file, skipped candidates with reasons.


class Collector:
    def __init__(self, max_operations: int, max_skipped: int) -> None:
        self.ops: dict[tuple[str, str, tuple[tuple[str, str], ...]], MemoryOperation] = {}
        self.skipped: list[dict[str, Any]] = []
        self.max_operations = max_operations
        self.max_skipped = max_skipped
        self._dropped_skips = 0

    def skip(self, reason: str, detail: str, message_id: str | None = None) -> None:
        if len(self.skipped) >= self.max_skipped:
            self._dropped_skips += 1
            return
        entry: dict[str, Any] = {"reason": reason, "detail": one_line(detail, 300)}
        if message_id:
            entry["message_id"] = message_id
        self.skipped.append(entry)

    def add(self, op: MemoryOperation) -> bool:
        """Adds `op`, folding it into an earlier operation on the same file. False (and a
        "duplicate" skip) when it brings no new line."""
        msg_id = op.source_message_ids[0] if op.source_message_ids else None
        try:
            validate_operation(op)
        except InvalidArgument as exc:
            self.skip(SKIP_INVALID_OPERATION, f"{op.memory_type}: {exc.message}", msg_id)
            return False
        key = operation_key(op)
        prior = self.ops.get(key)
        if prior is None:
            if len(self.ops) >= self.max_operations:
                self.skip(SKIP_LIMIT, f"{op.memory_type}: {op.summary}", msg_id)
                return False
            self.ops[key] = op
            return True
        known = {norm_line(ln) for ln in prior.content.splitlines()}
        fresh = [ln for ln in op.content.splitlines() if ln.strip() and norm_line(ln) not in known]
        if not fresh:
            self.skip(SKIP_DUPLICATE, f"{op.memory_type}: {op.summary}", msg_id)
            return False
        if memory_type_spec(op.memory_type).merge == MERGE_NEWEST_FIRST:
            # Same rule as render_memory: the newest statement leads.
            prior.content = "\n".join([*fresh, prior.content])
            prior.summary = op.summary or prior.summary
        else:
            prior.content = "\n".join([prior.content, *fresh])
            if op.memory_type not in {"events", "trajectories"}:
                prior.summary = op.summary or prior.summary
        prior.source_message_ids = union(prior.source_message_ids, op.source_message_ids)
        prior.tags = union(prior.tags, op.tags)
        return True

    def result(self, usage: dict[str, Any]) -> ExtractionResult:
        skipped = list(self.skipped)
        if self._dropped_skips:
            skipped.append(
                {
                    "reason": SKIP_LIMIT,
                    "detail": f"{self._dropped_skips} more skipped candidates omitted",
                }
            )
        return ExtractionResult(list(self.ops.values()), skipped, usage)


def norm_line(line: str) -> str:
    return " ".join(line.split()).casefold()


def union(a: Iterable[str], b: Iterable[str]) -> list[str]:
    out: list[str] = []
    for item in [*a, *b]:
        if item not in out:
            out.append(item)
    return out


# --------------------------------------------------------------------------------------------
# Message helpers shared by both extractors.


def message_text(msg: SessionMessage) -> str:
    texts = [
        str(p.get("text", "")) for p in msg.parts if isinstance(p, dict) and p.get("type") == "text"
    ]
    return "\n".join(t for t in texts if t.strip())


def message_date(msg: SessionMessage) -> date | None:
    return parse_day(msg.created_at)


def parse_day(value: str | None) -> date | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).date()
    except ValueError:
        try:
            return date.fromisoformat(value.strip()[:10])
        except ValueError:
            return None


@dataclass
class ToolCall:
    tool_id: str
    name: str
    status: str
    tool_input: Any
    output: str
    message_id: str


ERROR_STATUSES = frozenset({"error", "failed", "failure"})
OK_STATUSES = frozenset({"completed", "success", "succeeded", "done"})


def tool_calls(messages: Sequence[SessionMessage]) -> list[ToolCall]:
    """Tool parts in conversation order. A tool id seen again (a status update) keeps its
    first position and takes its latest state."""
    calls: dict[str, ToolCall] = {}
    for msg in messages:
        for i, part in enumerate(msg.parts):
            if not isinstance(part, dict) or part.get("type") != "tool":
                continue
            tool_id = str(part.get("tool_id") or f"{msg.message_id}#{i}")
            output = part.get("tool_output")
            calls[tool_id] = ToolCall(
                tool_id=tool_id,
                name=str(part.get("tool_name") or "tool"),
                status=str(part.get("tool_status") or "pending").lower(),
                tool_input=part.get("tool_input") or {},
                output="" if output is None else str(output),
                message_id=msg.message_id,
            )
    return list(calls.values())


def short_json(value: Any, limit: int) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return one_line(text, limit)
