"""Memory files carry a provenance frontmatter before their body and a hidden
`<!-- MEMORY_FIELDS {json} -->` trailer after it.

The frontmatter is plain `key: value` lines between `---` rules (values are JSON, which YAML
reads too), so any reader of the file sees where the memory came from: the archive and the
message ids of every conversation that wrote it.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FRONTMATTER = re.compile(r"\A---\n((?:[A-Za-z_][\w-]*: [^\n]*\n)*)---\n+")
MEMORY_FIELDS_MARK = "<!-- MEMORY_FIELDS"  # where a trailer starts
_TRAILER = re.compile(r"\n*<!-- MEMORY_FIELDS\n(.*?)\n-->\s*\Z", re.DOTALL)


def split_memory_fields(text: str) -> tuple[str, dict[str, Any] | None]:
    # A substring check first: the trailer's regex tries every position of a text that has
    # none (grep runs this over every file it reads).
    if MEMORY_FIELDS_MARK not in text:
        return text, None
    m = _TRAILER.search(text)
    if not m:
        return text, None
    try:
        fields = json.loads(m.group(1))
    except json.JSONDecodeError:
        return text, None
    return text[: m.start()], fields if isinstance(fields, dict) else None


def strip_memory_fields(text: str) -> str:
    return split_memory_fields(text)[0]


def with_memory_fields(body: str, fields: dict[str, Any]) -> str:
    payload = json.dumps(fields, ensure_ascii=False, sort_keys=True)
    return f"{body.rstrip()}\n\n<!-- MEMORY_FIELDS\n{payload}\n-->\n"


def split_provenance(body: str) -> tuple[dict[str, Any], str]:
    """The frontmatter of a memory body (values JSON-decoded when they are JSON) and the
    rest."""
    m = _FRONTMATTER.match(body)
    if not m:
        return {}, body
    meta: dict[str, Any] = {}
    for line in m.group(1).splitlines():
        key, _, raw = line.partition(": ")
        try:
            meta[key] = json.loads(raw)
        except json.JSONDecodeError:
            meta[key] = raw
    return meta, body[m.end() :]


def with_provenance(body: str, meta: dict[str, Any]) -> str:
    """`body` under a frontmatter holding `meta` (one JSON value per key)."""
    _, rest = split_provenance(body)
    lines = [f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in meta.items()]
    return "---\n" + "\n".join(lines) + "\n---\n\n" + rest.lstrip("\n")


def memory_body(text: str) -> str:
    """The body of a memory file: without its trailer and its provenance frontmatter."""
    return split_provenance(strip_memory_fields(text))[1]
