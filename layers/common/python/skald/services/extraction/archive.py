"""The rule extractor's memories of a whole archive: one conversation event summarising it,
a trajectory of its tool calls, and an experience for every tool that failed and then
succeeded."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from skald.domain.memory.types import MemoryOperation, one_line
from skald.ports import SessionMessage
from skald.services.extraction.common import (
    ERROR_STATUSES,
    OK_STATUSES,
    SKIP_INVALID_DATE,
    SKIP_TOOL_UNRESOLVED,
    Collector,
    ExtractionContext,
    ToolCall,
    message_date,
    message_text,
    short_json,
    union,
)
from skald.services.extraction.text import short_name, strip_code, tag_list, word_list


def topic_words(messages: Sequence[SessionMessage], limit: int) -> str:
    """A short name from the first user message that yields one."""
    for msg in messages:
        if msg.role == "user":
            name = short_name(word_list(strip_code(message_text(msg))), limit)
            if name:
                return name
    return ""


def add_conversation_event(
    out: Collector,
    messages: Sequence[SessionMessage],
    calls: Sequence[ToolCall],
    ctx: ExtractionContext,
    event_tags: list[str],
    fallback_day: date | None,
) -> None:
    """One event per archive summarising the conversation (its messages, tools, peers)."""
    days = [d for d in (message_date(m) for m in messages) if d is not None]
    day = days[-1] if days else fallback_day
    if day is None:
        out.skip(
            SKIP_INVALID_DATE,
            "conversation event: no message has a usable created_at and ctx.now_iso is not a date",
        )
        return
    roles: dict[str, int] = {}
    for msg in messages:
        roles[msg.role] = roles.get(msg.role, 0) + 1
    first_user = next(
        (message_text(m) for m in messages if m.role == "user" and message_text(m).strip()), ""
    )
    topic = topic_words(messages, 6) or ctx.archive_id or "archive"
    errors = sum(1 for c in calls if c.status in ERROR_STATUSES)
    images = sum(
        1 for m in messages for p in m.parts if isinstance(p, dict) and p.get("type") == "image_url"
    )
    peers = sorted({m.peer_id for m in messages if m.peer_id})
    counts = (
        f"{len(messages)} messages ({roles.get('user', 0)} user, "
        f"{roles.get('assistant', 0)} assistant)"
    )
    if calls:
        counts += f", {len(calls)} tool calls ({errors} failed)"
    lines = [
        f"Session: {ctx.session_id} / {ctx.archive_id}",
        f"When: {messages[0].created_at} to {messages[-1].created_at}",
        f"Messages: {counts}",
    ]
    if images:
        lines.append(f"Images: {images}")
    if peers:
        lines.append(f"Peers: {', '.join(peers)}")
    if first_user:
        lines.append(f'First user message: "{one_line(first_user, 300)}"')
    summary = (
        f'Conversation: "{one_line(first_user, 120)}"; {counts}'
        if first_user
        else f"Conversation: {counts}"
    )
    tags = [
        *event_tags,
        *tag_list("event_date", day.isoformat()),
        *tag_list("session", ctx.session_id),
        *tag_list("archive", ctx.archive_id),
        "event_kind=conversation",
    ]
    op = MemoryOperation(
        memory_type="events",
        fields={"event_name": f"conversation {topic}", "date": day.isoformat()},
        content="\n".join(lines),
        summary=one_line(summary),
        tags=tags,
        source_message_ids=union([messages[0].message_id], [messages[-1].message_id]),
    )
    out.add(op)


def add_trajectory(
    out: Collector, messages: Sequence[SessionMessage], calls: Sequence[ToolCall]
) -> None:
    """The archive's tool calls, step by step."""
    counts: dict[str, int] = {}
    for c in calls:
        counts[c.name] = counts.get(c.name, 0) + 1
    names = ", ".join(f"{n} x{k}" if k > 1 else n for n, k in counts.items())
    errors = sum(1 for c in calls if c.status in ERROR_STATUSES)
    ok = sum(1 for c in calls if c.status in OK_STATUSES)
    lines = [f"Tool calls: {len(calls)} ({ok} completed, {errors} failed)"]
    for i, c in enumerate(calls, start=1):
        step = f"{i}. {c.name} [{c.status}] input: {short_json(c.tool_input, 160)}"
        if c.output.strip():
            step += f" -> output: {one_line(c.output, 160)}"
        lines.append(step)
    # Named after the request that set the tools going: the last user message before them.
    first_call = next(i for i, m in enumerate(messages) if m.message_id == calls[0].message_id)
    asked = [m for m in messages[:first_call] if m.role == "user"][-1:]
    name = topic_words(asked or messages, 5) or "tools"
    op = MemoryOperation(
        memory_type="trajectories",
        fields={"name": name},
        content="\n".join(lines),
        summary=one_line(f"{len(calls)} tool calls ({names}); {errors} failed"),
        source_message_ids=union([], (c.message_id for c in calls)),
    )
    out.add(op)


def add_experiences(out: Collector, calls: Sequence[ToolCall]) -> None:
    """A lesson for every tool that failed and then succeeded; a skip for one that never
    recovered."""
    by_tool: dict[str, list[ToolCall]] = {}
    for c in calls:
        by_tool.setdefault(c.name, []).append(c)
    for tool, seq in by_tool.items():
        failed: ToolCall | None = None
        for c in seq:
            if c.status in ERROR_STATUSES:
                failed = failed or c  # the first error of a streak explains it best
            elif c.status in OK_STATUSES and failed is not None:
                between = calls[calls.index(failed) + 1 : calls.index(c)]
                _lesson(out, tool, failed, c, [b for b in between if b.name != tool])
                failed = None
        if failed is not None:
            out.skip(
                SKIP_TOOL_UNRESOLVED,
                f"{tool} failed with {one_line(failed.output, 120)!r} and did "
                "not succeed afterwards",
                failed.message_id,
            )


def _lesson(
    out: Collector, tool: str, failed: ToolCall, fixed: ToolCall, between: Sequence[ToolCall]
) -> None:
    error = one_line(failed.output, 160) or "an error"
    change = _input_change(failed.tool_input, fixed.tool_input)
    steps = "; ".join(f"{b.name} {short_json(b.tool_input, 80)} [{b.status}]" for b in between[:3])
    line = (
        f"Lesson: {tool} failed with {error!r} "
        f"(input {short_json(failed.tool_input, 120)})"
        f" then succeeded with input {short_json(fixed.tool_input, 120)}"
        + (f"; changed {change}" if change else "")
        + (f"; in between: {steps}" if steps else "")
        + "."
    )
    fix = f"changing {change}" if change else f"running {between[0].name}" if between else "a retry"
    op = MemoryOperation(
        memory_type="experiences",
        fields={"experience_name": f"{tool} failure recovery"},
        content=line,
        summary=one_line(f"{tool}: after {error!r}, {fix} made it succeed", 200),
        source_message_ids=union([failed.message_id], [fixed.message_id]),
    )
    out.add(op)


def _input_change(before: Any, after: Any) -> str:
    if not isinstance(before, dict) or not isinstance(after, dict):
        return "" if before == after else (f"{short_json(before, 60)} -> {short_json(after, 60)}")
    parts = []
    for key in sorted(set(before) | set(after), key=str):
        if before.get(key) != after.get(key):
            parts.append(
                f"{key}: {short_json(before.get(key), 60)} -> {short_json(after.get(key), 60)}"
            )
    return "; ".join(parts[:4])
