"""A session's tool results: the outputs its tool parts recorded, listed, read by range and
searched. Skald keeps each output inline in its message; its id is the part's `tool_id`
(the latest part of a call wins: a pending call and its completion share the id), or
`tr_<message seq>_<part index>` for a part without one."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from skald.domain.access.identity import Identity
from skald.domain.errors import NotFound
from skald.domain.memory.tool_results import OFFSET_UNIT, PREVIEW_CHARS, find_matches, read_range
from skald.ports import SessionStore
from skald.services.sessions.results import (
    ToolResultItem,
    ToolResultMatch,
    ToolResultMatches,
    ToolResultMetadata,
    ToolResultRead,
    ToolResults,
)
from skald.services.sessions.service import SessionService


@dataclass(frozen=True)
class ToolResult:
    tool_result_id: str
    tool_name: str
    output: str
    status: str
    message_id: str


class ToolResultService:
    def __init__(self, sessions: SessionService, store: SessionStore) -> None:
        self.sessions = sessions
        self.store = store

    def _all(self, identity: Identity, session_id: str) -> dict[str, ToolResult]:
        self.sessions.get(identity, session_id)  # 404 for an unknown session
        out: dict[str, ToolResult] = {}
        for msg in self.store.list_messages(identity.account_id, identity.user_id, session_id):
            for i, part in enumerate(msg.parts):
                if part.get("type") != "tool":
                    continue
                rid = str(part.get("tool_id") or f"tr_{msg.seq}_{i}")
                out.pop(rid, None)  # re-inserted last: newest first ordering below
                out[rid] = ToolResult(
                    rid,
                    str(part.get("tool_name") or ""),
                    str(part.get("tool_output") or ""),
                    str(part.get("tool_status") or ""),
                    msg.message_id,
                )
        return out

    def _one(self, identity: Identity, session_id: str, result_id: str) -> ToolResult:
        found = self._all(identity, session_id).get(result_id)
        if found is None:
            raise NotFound(f"Tool result {result_id} not found", result_id, "tool_result")
        return found

    def list(
        self, identity: Identity, session_id: str, tool_name: str | None, limit: int
    ) -> ToolResults:
        base = self.sessions.session_uri(identity, session_id)
        items = [
            r
            for r in reversed(self._all(identity, session_id).values())
            if tool_name is None or r.tool_name == tool_name
        ][:limit]
        return ToolResults(
            [
                ToolResultItem(
                    tool_result_id=r.tool_result_id,
                    tool_name=r.tool_name,
                    tool_status=r.status,
                    message_id=r.message_id,
                    original_chars=len(r.output),
                    preview_chars=min(len(r.output), PREVIEW_CHARS),
                    mime_type="text/plain",
                    synopsis_kind="text",
                    storage_uri=str(base.child("tool-results", r.tool_result_id)),
                    offset_unit=OFFSET_UNIT,
                )
                for r in items
            ]
        )

    def read(
        self,
        identity: Identity,
        session_id: str,
        result_id: str,
        *,
        offset: int,
        limit: int,
        include_metadata: bool,
    ) -> ToolResultRead:
        r = self._one(identity, session_id, result_id)
        metadata = (
            ToolResultMetadata(
                tool_name=r.tool_name,
                mime_type="text/plain",
                sha256=hashlib.sha256(r.output.encode()).hexdigest(),
                tool_status=r.status,
                message_id=r.message_id,
            )
            if include_metadata
            else None
        )
        return ToolResultRead(
            tool_result_id=r.tool_result_id,
            **read_range(r.output, offset, limit),
            metadata=metadata,
        )

    def search(
        self,
        identity: Identity,
        session_id: str,
        result_id: str,
        *,
        query: str,
        limit: int,
        context_chars: int,
    ) -> ToolResultMatches:
        r = self._one(identity, session_id, result_id)
        return ToolResultMatches(
            r.tool_result_id,
            [ToolResultMatch(**m) for m in find_matches(r.output, query, limit, context_chars)],
        )
