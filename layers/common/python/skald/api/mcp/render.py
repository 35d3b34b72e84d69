"""Compact text for an agent's context window. The same results also travel as
`structuredContent`, so clients that parse keep every field; the text is what a model reads."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from skald.api.envelope import to_wire
from skald.services.context.results import ContextBlock
from skald.services.fs.results import Listing
from skald.services.retrieval.results import Found, GlobResult, GrepResult

GROUPS = ("memories", "resources", "skills")
KIND = {"memories": "memory", "resources": "resource", "skills": "skill"}


def as_json(result: Any) -> str:
    return json.dumps(result, ensure_ascii=False, indent=1, default=_plain)


def _plain(value: Any) -> Any:
    """A typed result (also one inside a dict result) as its JSON values; others as text."""
    return to_wire(value) if dataclasses.is_dataclass(value) else str(value)


def hits(result: Found) -> str:
    """find / search (list mode): every hit by score, with its URI and abstract."""
    rows = [(h.score, KIND[g], h) for g in GROUPS for h in getattr(result, g)]
    if not rows:
        return "No matching context found."
    rows.sort(key=lambda r: -float(r[0]))
    lines = [f"{len(rows)} hit(s), best first:"]
    for score, kind, h in rows:
        lines.append(f"- [{kind} L{h.level} {float(score):.3f}] {h.uri}")
        abstract = (h.abstract or "").strip()
        if abstract:
            lines.append(f"    {abstract}")
        if h.content:
            lines.append("    " + h.content.replace("\n", "\n    "))
    lines.append("Read a hit with the read tool; L0/L1 hits stand for their directory.")
    return "\n".join(lines)


def context(result: ContextBlock) -> str:
    """search in context mode: the rendered block (already within the token budget)."""
    rendered = result.rendered or "No relevant context."
    return (
        f"{rendered}\n\n({len(result.entries)} entries, {result.stats.used_tokens} of "
        f"{result.stats.max_tokens} tokens)"
    )


def entries(result: Listing) -> str:
    """list / tree: one line per entry, directories marked, abstracts indented."""
    if not result.entries:
        return "(empty)"
    lines = []
    for item in result.entries:
        if isinstance(item, str):
            lines.append(item)
            continue
        kind = "dir " if item.isDir else "file"
        size = "" if item.isDir else f"  {item.size} B"
        lines.append(f"{kind} {item.uri}{size}")
        abstract = (item.abstract or "").strip()
        if abstract:
            lines.append(f"     {abstract.splitlines()[0]}")
    if result.has_more:
        lines.append("(more entries: raise limit or narrow the URI)")
    return "\n".join(lines)


def grep(result: GrepResult) -> str:
    matches = result.matches
    if not matches:
        return f"No matches ({result.files_scanned} files scanned)."
    lines = [f"{len(matches)} match(es) in {result.files_scanned} files scanned:"]
    current = None
    for m in matches:
        if m.uri != current:
            current = m.uri
            lines.append(current)
        lines.append(f"  {m.line}: {m.content}")
    if result.truncated:
        lines.append("(truncated: raise limit or narrow the URI)")
    return "\n".join(lines)


def glob(result: GlobResult) -> str:
    matches = [m if isinstance(m, str) else m.uri for m in result.matches]
    if not matches:
        return "No files match."
    more = "\n(more matches: raise limit)" if result.has_more else ""
    return f"{result.total} match(es):\n" + "\n".join(matches) + more


def reads(results: list[tuple[str, str | None, str | None]]) -> str:
    """read of several URIs: each under its own header; a failed one says why."""
    parts = []
    for uri, text, error in results:
        parts.append(f"=== {uri} ===\n{text if error is None else error}")
    return "\n\n".join(parts)
