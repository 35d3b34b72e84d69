"""The LLM memory extractor (`LLMExtractor`): asks the configured LLM for JSON matching a
schema, validates it, retries with the validation error fed back, and falls back to another
extractor when the model keeps failing."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, get_args

import pydantic

from skald.domain.errors import InvalidArgument, ProcessingError, QuotaExceeded
from skald.domain.memory.types import (
    MEMORY_TYPES,
    MemoryOperation,
    Retraction,
    one_line,
    validate_operation,
)
from skald.domain.metering.subject import Purpose, purpose
from skald.domain.text.tokens import estimate_tokens
from skald.ports import LLM, ChatMessage, SessionMessage
from skald.services.extraction.common import (
    SKIP_EMPTY_ARCHIVE,
    SKIP_INVALID_OPERATION,
    SKIP_LLM_FAILED,
    SKIP_PEER_DISABLED,
    Collector,
    ExtractionContext,
    ExtractionResult,
    Extractor,
    short_json,
)

MemoryTypeName = Literal[
    "preferences",
    "entities",
    "events",
    "cases",
    "experiences",
    "trajectories",
    "identity",
    "soul",
    "profile",
]
# The schema's enum and the domain table must not drift apart.
assert set(get_args(MemoryTypeName)) == set(MEMORY_TYPES)


class LLMOperation(pydantic.BaseModel):
    """One operation as the LLM must write it."""

    model_config = pydantic.ConfigDict(extra="ignore")

    memory_type: MemoryTypeName
    fields: dict[str, str] = pydantic.Field(
        default_factory=dict,
        description="Template fields of the memory type; events also take date=YYYY-MM-DD",
    )
    content: str = pydantic.Field(min_length=1, description="The memory, third person")
    summary: str = pydantic.Field(default="", description="One line")
    tags: list[str] = pydantic.Field(default_factory=list, description='"key=value" tags')
    source_message_ids: list[str] = pydantic.Field(default_factory=list)
    peer_id: str | None = pydantic.Field(
        default=None, description="Set when the memory is about a peer, not the user"
    )


class LLMRetraction(pydantic.BaseModel):
    """A line of an existing memory that the conversation shows is no longer true."""

    model_config = pydantic.ConfigDict(extra="ignore")

    text: str = pydantic.Field(min_length=1, description="The existing memory line, quoted exactly")
    source_message_ids: list[str] = pydantic.Field(default_factory=list)
    peer_id: str | None = None


class LLMAnswer(pydantic.BaseModel):
    operations: list[LLMOperation]
    retractions: list[LLMRetraction] = pydantic.Field(default_factory=list)


class _Envelope(pydantic.BaseModel):
    # Items are validated one by one, so one bad operation is skipped instead of failing
    # (and retrying) the whole answer.
    operations: list[dict[str, Any]]
    retractions: list[dict[str, Any]] = pydantic.Field(default_factory=list)


_OPERATION = pydantic.TypeAdapter(LLMOperation)
_RETRACTION = pydantic.TypeAdapter(LLMRetraction)
MAX_EXISTING_CHARS = 8_000
_ENVELOPE = pydantic.TypeAdapter(_Envelope)
ANSWER_SCHEMA: dict[str, Any] = pydantic.TypeAdapter(LLMAnswer).json_schema()
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class _InvalidAnswer(Exception):
    pass


def _system_prompt() -> str:
    lines = [
        "You extract long-term memories from a conversation between a user and an AI "
        "assistant. Answer with ONE JSON object matching the given JSON schema and nothing "
        'else: {"operations": [...]}. Answer {"operations": []} when nothing is worth '
        "remembering.",
        "Rules: remember only what the user (or a peer) states about themselves or their "
        "world; never turn the assistant's words into personal memories; write content in "
        "the third person; keep one topic per preference; resolve relative dates (yesterday, "
        "last Monday) against the message date and put it in fields.date as YYYY-MM-DD; "
        "list the [message ids] you used in source_message_ids.",
        "Existing memories are listed with their paths. Never duplicate them: to update one, "
        "write an operation with the same memory_type and fields (the same file) stating "
        "the current fact; a restated fact needs no operation. When the conversation shows "
        "that a line of an existing memory is no longer true (the user switched tools, "
        'changed jobs, says "I no longer ..."), quote that line exactly in '
        '"retractions" with the message ids that say so.',
        "Memory types (memory_type: required fields -- what it holds):",
    ]
    for spec in MEMORY_TYPES.values():
        needed = ", ".join(spec.fields) or "none"
        if spec.name == "events":
            needed += ", date"
        lines.append(f"- {spec.name}: {needed} -- {spec.description} ({spec.mode})")
    return "\n".join(lines)


def render_conversation(
    messages: Sequence[SessionMessage], max_chars: int, per_message_chars: int = 2000
) -> str:
    """The conversation as prompt text, bounded: when too long the first message and the
    newest messages are kept and the middle is elided."""
    blocks: list[str] = []
    for msg in messages:
        head = f"[{msg.message_id}] {msg.role}"
        if msg.peer_id:
            head += f" (peer {msg.peer_id})"
        text = "\n".join(t for t in map(_part_text, msg.parts) if t is not None)
        if len(text) > per_message_chars:
            text = text[:per_message_chars] + " [...]"
        blocks.append(f"{head} {msg.created_at}:\n{text}")
    if sum(len(b) + 2 for b in blocks) <= max_chars or len(blocks) < 2:
        return "\n\n".join(blocks)[:max_chars]
    return _elided(blocks, max_chars)


def _part_text(part: Any) -> str | None:
    """A message part as prompt text; None for a part the prompt leaves out."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "text":
        return str(part.get("text", ""))
    if kind == "tool":
        return (
            f"<tool {part.get('tool_name')} [{part.get('tool_status')}] "
            f"input={short_json(part.get('tool_input'), 300)} "
            f"output={one_line(str(part.get('tool_output') or ''), 300)}>"
        )
    if kind == "context":
        return f"<context {part.get('uri')}: {one_line(str(part.get('abstract') or ''), 200)}>"
    if kind == "image_url":
        return "<image>"
    return None


def _elided(blocks: list[str], max_chars: int) -> str:
    """The first block and as many of the newest as fit, the middle counted as omitted."""
    budget = max_chars - len(blocks[0]) - 64
    tail: list[str] = []
    for block in reversed(blocks[1:]):
        if budget - len(block) - 2 < 0:
            break
        tail.insert(0, block)
        budget -= len(block) + 2
    omitted = len(blocks) - 1 - len(tail)
    return "\n\n".join([blocks[0], f"[... {omitted} messages omitted ...]", *tail])[:max_chars]


def existing_memories(existing: Sequence[tuple[str, str]], max_chars: int) -> str:
    """The memories already written, as prompt text: newest first, bounded."""
    if not existing:
        return ""
    blocks: list[str] = []
    used = 0
    for path, body in reversed(existing):
        lines = [ln for ln in body.strip().split("\n") if ln.strip() and ln.strip() != "# Summary"]
        block = f"- {path}:\n" + "\n".join(f"  {one_line(ln, 300)}" for ln in lines[:12])
        if used + len(block) > max_chars:
            break
        blocks.append(block)
        used += len(block) + 1
    return "Existing memories:\n" + "\n".join(blocks) + "\n\n"


class LLMExtractor:
    """Extraction by the configured LLM, answering JSON that matches `ANSWER_SCHEMA`.

    An answer that is not valid JSON for the envelope is retried (up to `max_retries` times)
    with the validation error fed back. When every attempt fails, or the LLM raises, the
    `fallback` extractor runs and a "llm_failed" skip records why; without a fallback a
    ProcessingError is raised. Individual operations with an unknown type or invalid fields
    are skipped as "invalid_operation".
    """

    reads_existing = True  # the prompt lists the memories an answer may update

    def __init__(
        self,
        llm: LLM,
        *,
        max_retries: int = 2,
        fallback: Extractor | None = None,
        max_prompt_chars: int = 24_000,
        max_tokens: int = 2048,
        timeout_s: float = 60.0,
        max_operations: int = 200,
    ) -> None:
        self.llm = llm
        self.max_retries = max(max_retries, 0)
        self.fallback = fallback
        self.max_prompt_chars = max_prompt_chars
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.max_operations = max_operations

    def extract(
        self, messages: Sequence[SessionMessage], ctx: ExtractionContext
    ) -> ExtractionResult:
        usage: dict[str, Any] = {
            "extractor": "llm",
            "messages": len(messages),
            "llm_calls": 0,
            "prompt_tokens_est": 0,
            "completion_tokens_est": 0,
        }
        out = Collector(self.max_operations, 200)
        if not messages:
            out.skip(SKIP_EMPTY_ARCHIVE, "the archive has no messages")
            return out.result(usage)
        chat = [
            ChatMessage("system", _system_prompt()),
            ChatMessage("user", self._user_prompt(messages, ctx)),
        ]
        error = ""
        for _attempt in range(self.max_retries + 1):
            usage["llm_calls"] += 1
            usage["prompt_tokens_est"] += sum(estimate_tokens(m.content) for m in chat)
            try:
                with purpose(Purpose.EXTRACTION):
                    answer = self.llm.complete(
                        chat,
                        json_schema=ANSWER_SCHEMA,
                        max_tokens=self.max_tokens,
                        timeout_s=self.timeout_s,
                    )
            except QuotaExceeded:
                raise
            except Exception as exc:
                # Any model failure means falling back; the adapter already retried transport
                # errors, so asking again here is pointless.
                error = f"LLM call failed: {type(exc).__name__}: {exc}"
                break
            usage["completion_tokens_est"] += estimate_tokens(answer)
            try:
                envelope = self._parse(answer)
            except _InvalidAnswer as exc:
                error = str(exc)
                chat = [
                    *chat,
                    ChatMessage("assistant", answer[:4000]),
                    ChatMessage(
                        "user",
                        f"That answer was invalid: {error}\nAnswer again with only the "
                        "JSON object matching the schema.",
                    ),
                ]
                continue
            self._convert(envelope.operations, messages, ctx, out)
            retractions = self._retractions(envelope.retractions, messages, ctx, out)
            usage["attempts"] = usage["llm_calls"]
            result = out.result(usage)
            result.retractions = retractions
            return result
        usage["attempts"] = usage["llm_calls"]
        detail = f"after {usage['llm_calls']} attempts: {error}"
        if self.fallback is None:
            raise ProcessingError(f"LLM memory extraction failed {detail}")
        result = self.fallback.extract(messages, ctx)
        usage["fallback"] = result.usage
        skipped = [{"reason": SKIP_LLM_FAILED, "detail": one_line(detail, 300)}, *result.skipped]
        return ExtractionResult(result.operations, skipped, usage, result.retractions)

    def _user_prompt(self, messages: Sequence[SessionMessage], ctx: ExtractionContext) -> str:
        peers = "enabled" if ctx.peer_memories else "disabled (ignore what peers say)"
        return (
            f"User id: {ctx.user_id}. Session {ctx.session_id}, {ctx.archive_id}. "
            f"Now: {ctx.now_iso or 'unknown'}. Peer memories: {peers}.\n\n"
            f"{existing_memories(ctx.existing, MAX_EXISTING_CHARS)}"
            f"Conversation:\n{render_conversation(messages, self.max_prompt_chars)}"
        )

    @staticmethod
    def _parse(answer: str) -> _Envelope:
        m = _FENCE.match(answer)
        text = m.group(1) if m else answer.strip()
        try:
            return _ENVELOPE.validate_json(text)
        except pydantic.ValidationError as exc:
            raise _InvalidAnswer(one_line(str(exc), 1000)) from None

    @staticmethod
    def _retractions(
        items: list[dict[str, Any]],
        messages: Sequence[SessionMessage],
        ctx: ExtractionContext,
        out: Collector,
    ) -> list[Retraction]:
        known_ids = {m.message_id for m in messages}
        peers = {m.peer_id for m in messages if m.peer_id}
        found: list[Retraction] = []
        for item in items:
            try:
                parsed = _RETRACTION.validate_python(item)
            except pydantic.ValidationError as exc:
                out.skip(SKIP_INVALID_OPERATION, f"retraction ({one_line(str(exc), 160)})")
                continue
            ids = [i for i in parsed.source_message_ids if i in known_ids]
            label = f"retraction: {one_line(parsed.text, 120)}"
            if parsed.peer_id is not None and (
                not ctx.peer_memories or parsed.peer_id not in peers
            ):
                out.skip(
                    SKIP_PEER_DISABLED if not ctx.peer_memories else SKIP_INVALID_OPERATION,
                    label,
                    ids[0] if ids else None,
                )
                continue
            found.append(Retraction(one_line(parsed.text, 400), ids, parsed.peer_id))
        return found

    def _convert(
        self,
        items: list[dict[str, Any]],
        messages: Sequence[SessionMessage],
        ctx: ExtractionContext,
        out: Collector,
    ) -> None:
        known_ids = {m.message_id for m in messages}
        peers = {m.peer_id for m in messages if m.peer_id}
        for item in items:
            label = f"{item.get('memory_type')!s}: {one_line(str(item.get('content', '')), 120)}"
            try:
                parsed = _OPERATION.validate_python(item)
            except pydantic.ValidationError as exc:
                out.skip(SKIP_INVALID_OPERATION, f"{label} ({one_line(str(exc), 160)})")
                continue
            ids = [i for i in parsed.source_message_ids if i in known_ids]
            if parsed.peer_id is not None:
                if not ctx.peer_memories:
                    out.skip(SKIP_PEER_DISABLED, label, ids[0] if ids else None)
                    continue
                if parsed.peer_id not in peers:
                    out.skip(
                        SKIP_INVALID_OPERATION,
                        f"{label} (unknown peer {parsed.peer_id!r})",
                        ids[0] if ids else None,
                    )
                    continue
            fields = dict(parsed.fields)
            if parsed.memory_type == "preferences" and not fields.get("user", "").strip():
                fields["user"] = parsed.peer_id or ctx.user_id
            tags = parsed.tags
            if parsed.memory_type == "events":
                tags = [*ctx.event_tags, *tags]
            op = MemoryOperation(
                memory_type=parsed.memory_type,
                fields=fields,
                content=parsed.content.strip(),
                summary=one_line(parsed.summary),
                tags=tags,
                source_message_ids=ids,
                peer_id=parsed.peer_id,
            )
            try:
                validate_operation(op)
            except InvalidArgument as exc:
                out.skip(
                    SKIP_INVALID_OPERATION, f"{label} ({exc.message})", ids[0] if ids else None
                )
                continue
            out.add(op)
