"""Message parts: validation and normalisation of text, context, tool and image parts."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from skald.domain.errors import InvalidArgument
from skald.domain.text.tokens import estimate_tokens

CONTEXT_TYPES = ("memory", "resource", "skill")
TOOL_STATUSES = ("pending", "running", "completed", "error")
MESSAGE_KINDS = ("user_query", "assistant_step", "tool_transport", "checkpoint")
MAX_PARTS = 100


def _text(value: Any, field: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise InvalidArgument(f"{field} must be a string")


def _text_part(
    part: dict[str, Any], where: str, resolve_uri: Callable[[str], str]
) -> dict[str, Any]:
    return {"type": "text", "text": _text(part.get("text"), f"{where}.text")}


def _context_part(
    part: dict[str, Any], where: str, resolve_uri: Callable[[str], str]
) -> dict[str, Any]:
    uri = part.get("uri")
    if not isinstance(uri, str) or not uri:
        raise InvalidArgument(f"{where}.uri is required for a context part")
    ctype = part.get("context_type", "resource")
    if ctype not in CONTEXT_TYPES:
        raise InvalidArgument(f"{where}.context_type must be memory, resource or skill")
    return {
        "type": "context",
        "uri": resolve_uri(uri),
        "context_type": ctype,
        "abstract": _text(part.get("abstract"), f"{where}.abstract"),
    }


def _tool_input(part: dict[str, Any], where: str) -> dict[str, Any]:
    tool_input = part.get("tool_input") or {}
    if isinstance(tool_input, str):
        try:
            tool_input = json.loads(tool_input)
        except json.JSONDecodeError:
            tool_input = {"input": tool_input}
    if not isinstance(tool_input, dict):
        raise InvalidArgument(f"{where}.tool_input must be an object")
    return tool_input


def _tool_extras(
    part: dict[str, Any], where: str, resolve_uri: Callable[[str], str]
) -> dict[str, Any]:
    """The optional fields of a tool part: linked URIs, timings and token counts."""
    out: dict[str, Any] = {}
    for key in ("tool_uri", "skill_uri"):
        if part.get(key):
            out[key] = resolve_uri(_text(part[key], f"{where}.{key}"))
    for key in ("duration_ms", "prompt_tokens", "completion_tokens"):
        if isinstance(part.get(key), int | float):
            out[key] = part[key]
    for key, value in part.items():  # output externalisation metadata travels as is
        if key.startswith("tool_output_") and isinstance(value, str | int | float | bool):
            out[key] = value
    return out


def _tool_part(
    part: dict[str, Any], where: str, resolve_uri: Callable[[str], str]
) -> dict[str, Any]:
    tool_input = _tool_input(part, where)
    output = part.get("tool_output", "")
    if not isinstance(output, str):
        output = json.dumps(output, ensure_ascii=False, sort_keys=True)
    status = part.get("tool_status", "completed")
    if status not in TOOL_STATUSES:
        raise InvalidArgument(f"{where}.tool_status must be one of {', '.join(TOOL_STATUSES)}")
    out: dict[str, Any] = {
        "type": "tool",
        "tool_id": _text(part.get("tool_id"), f"{where}.tool_id"),
        "tool_name": _text(part.get("tool_name"), f"{where}.tool_name"),
        "tool_input": tool_input,
        "tool_output": output,
        "tool_status": status,
    }
    out.update(_tool_extras(part, where, resolve_uri))
    return out


def _image_part(
    part: dict[str, Any], where: str, resolve_uri: Callable[[str], str]
) -> dict[str, Any]:
    image = part.get("image_url")
    if isinstance(image, str):
        image = {"url": image}
    if (
        not isinstance(image, dict)
        or not isinstance(image.get("url"), str)
        or not image["url"].strip()
    ):
        raise InvalidArgument(f"{where}.image_url.url must be a non-empty string")
    img: dict[str, Any] = {"url": image["url"]}
    if image.get("detail") is not None:
        img["detail"] = _text(image["detail"], f"{where}.image_url.detail")
    return {"type": "image_url", "image_url": img}


_PART_KINDS: dict[str, Callable[[dict[str, Any], str, Callable[[str], str]], dict[str, Any]]] = {
    "text": _text_part,
    "context": _context_part,
    "tool": _tool_part,
    "image_url": _image_part,
}


def normalize_part(part: Any, index: int, resolve_uri: Callable[[str], str]) -> dict[str, Any]:
    where = f"parts[{index}]"
    if not isinstance(part, dict):
        raise InvalidArgument(f"{where} must be an object")
    kind = part.get("type", "text")
    if not isinstance(kind, str) or kind not in _PART_KINDS:
        # Unknown part types degrade to text so that nothing a client sent is lost.
        return {"type": "text", "text": json.dumps(part, ensure_ascii=False, sort_keys=True)}
    return _PART_KINDS[kind](part, where, resolve_uri)


def normalize_parts(
    content: str | None, parts: list[Any] | None, resolve_uri: Callable[[str], str]
) -> list[dict[str, Any]]:
    if parts is not None:
        if len(parts) > MAX_PARTS:
            raise InvalidArgument(f"A message has at most {MAX_PARTS} parts")
        if not parts:
            raise InvalidArgument("parts must not be empty")
        return [normalize_part(p, i, resolve_uri) for i, p in enumerate(parts)]
    if content is None:
        raise InvalidArgument("Either content or parts is required")
    return [{"type": "text", "text": content}]


def parts_text(parts: list[dict[str, Any]]) -> str:
    """A plain rendering of the parts, for token estimates, summaries and extraction."""
    out: list[str] = []
    for p in parts:
        kind = p.get("type")
        if kind == "text":
            out.append(p.get("text", ""))
        elif kind == "context":
            out.append(f"[context {p.get('uri')}] {p.get('abstract', '')}".strip())
        elif kind == "tool":
            out.append(
                f"[tool {p.get('tool_name')} {p.get('tool_status')}] "
                f"{json.dumps(p.get('tool_input', {}), ensure_ascii=False)} -> "
                f"{p.get('tool_output', '')}"
            )
        elif kind == "image_url":
            out.append(f"[image {p.get('image_url', {}).get('url', '')}]")
    return "\n".join(out)


def parts_tokens(parts: list[dict[str, Any]]) -> int:
    return estimate_tokens(parts_text(parts))
