"""Memory files carry a hidden `<!-- MEMORY_FIELDS {json} -->` trailer after their body."""

from __future__ import annotations

import json
import re
from typing import Any

_TRAILER = re.compile(r"\n*<!-- MEMORY_FIELDS\n(.*?)\n-->\s*\Z", re.DOTALL)


def split_memory_fields(text: str) -> tuple[str, dict[str, Any] | None]:
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
