"""The memory diff of an archive while it is planned: the planning state, the user's existing
memories read on demand, each write as an add or an update, each retraction as an update or a
delete, and the provenance every memory file carries (memory.py plans and applies it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from skald.domain.access.identity import Identity
from skald.domain.memory.types import MEMORY_TYPES, MemoryOperation, dropped_lines, retract_memory
from skald.domain.paths.uri import VikingURI
from skald.domain.text.memoryfile import (
    memory_body,
    split_memory_fields,
    split_provenance,
    with_memory_fields,
    with_provenance,
)
from skald.ports import ArchiveRecord, BlobNotFound, SessionMessage
from skald.services.fs.filesystem import VikingFS

MAX_SOURCES = 20  # provenance entries kept per memory file


@dataclass
class Planning:
    """A memory diff being planned: the archive's context and the changes so far."""

    identity: Identity
    arch: ArchiveRecord
    base: VikingURI
    extraction_id: str
    now_iso: str
    current: ExistingMemories  # the user's own revisable memories
    adds: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    planned: dict[str, str | None] = field(default_factory=dict)  # uri -> raw; None: deleted


def plan_retraction(
    p: Planning, rel: str, raw: str, root: VikingURI, phrases: list[str], ids: list[str]
) -> None:
    """One memory revised by retracted phrases: an update, a delete when nothing remains, or
    nothing when no phrase is in it."""
    revised = retract_memory(rel, raw, phrases)
    if revised is None:
        return
    body, removed = revised
    target = str(root.child(*rel.split("/")))
    entry: dict[str, Any] = {
        "uri": target,
        "memory_type": memory_type_of(rel),
        "before": memory_body(raw),
        "reason": "retracted",
        "retracted": removed,
        "archive": str(p.base),
        "source_message_ids": ids,
    }
    if body is None:
        p.planned[target] = None
        p.deletes.append(entry)
        return
    fields = split_memory_fields(raw)[1] or {}
    op = MemoryOperation(memory_type=memory_type_of(rel), source_message_ids=ids)
    prov = provenance(raw, op, p.base, p.arch.session_id, p.now_iso)
    after_raw = with_memory_fields(
        with_provenance(body, prov),
        {
            **fields,
            "version": int(fields.get("version", 0)) + 1,
            "source_extraction_id": p.extraction_id,
        },
    )
    p.planned[target] = after_raw
    tags = fields.get("tags") if isinstance(fields.get("tags"), list) else None
    p.updates.append(
        {
            **entry,
            "after": body,
            "after_raw": after_raw,
            "tags": tags or [f"memory_type={memory_type_of(rel)}"],
        }
    )


def plan_write(
    p: Planning, entry: dict[str, Any], existed: bool, before_body: str, body: str
) -> None:
    """A planned write as an add, or as an update that replaces the same file's earlier
    retraction or deletion in this plan (one change per file, from its first state)."""
    uri = entry["uri"]
    prior = next((e for e in p.updates if e["uri"] == uri), None)
    if prior is not None:
        p.updates.remove(prior)  # retracted, then rewritten: one update from the start
        before_body = prior["before"]
    deleted = next((e for e in p.deletes if e["uri"] == uri), None)
    if not existed and deleted is None:
        p.adds.append(entry)
        return
    if deleted is not None:
        p.deletes.remove(deleted)
        before_body = deleted["before"]
    superseded = dropped_lines(before_body, body)
    if superseded:
        entry.update(reason="superseded", superseded=superseded)
    p.updates.append({**entry, "before": before_body})


class ExistingMemories:
    """A memory root's revisable files (relative path to blob key), each read once when asked."""

    def __init__(self, fs: VikingFS, keys: dict[str, str]) -> None:
        self.fs = fs
        self.keys = keys
        self.paths = list(keys)
        self._texts: dict[str, str] = {}

    def text(self, rel: str) -> str:
        if rel not in self._texts:
            try:
                self._texts[rel] = self.fs.blobs.get(self.keys[rel]).decode(
                    "utf-8", errors="replace"
                )
            except BlobNotFound:
                self._texts[rel] = ""
        return self._texts[rel]


def provenance(
    before_raw: str | None, op: MemoryOperation, base: VikingURI, session_id: str, now_iso: str
) -> dict[str, Any]:
    """Where the memory came from: this archive and its messages, after the sources of the
    earlier versions (the keys the console's provenance card reads)."""
    meta, _ = split_provenance(strip_trailer(before_raw or ""))
    sources = [
        s
        for s in meta.get("sources", [])
        if isinstance(s, dict) and s.get("archive_uri") != str(base)
    ]
    sources.append({"archive_uri": str(base), "message_ids": op.source_message_ids})
    return {
        "memory_type": op.memory_type,
        "archive_uri": str(base),
        "session_id": session_id,
        "archive_id": base.name,
        "message_ids": op.source_message_ids,
        "sources": sources[-MAX_SOURCES:],
        "updated_at": now_iso,
    }


def memory_type_of(rel: str) -> str:
    head = rel.split("/", 1)[0].removesuffix(".md")
    return head if head in MEMORY_TYPES else "entities"


def strip_trailer(text: str) -> str:
    return split_memory_fields(text)[0]


def op_date(op: MemoryOperation, msgs: Sequence[SessionMessage]) -> date:
    raw = op.fields.get("date") if isinstance(op.fields.get("date"), str) else None
    for candidate in (raw, msgs[-1].created_at if msgs else None):
        if not candidate:
            continue
        try:
            return datetime.fromisoformat(candidate.replace("Z", "+00:00")).date()
        except ValueError:
            continue
    return datetime.now(UTC).date()
