"""Tags are strict `key=value` strings; keys are identifiers, values are free text without
control characters."""

from __future__ import annotations

import re

from skald.domain.errors import InvalidArgument

_KEY = re.compile(r"^[a-zA-Z0-9_.:-]{1,64}$")
MAX_TAGS = 64
MAX_VALUE = 256


def parse_tag(tag: str) -> tuple[str, str]:
    if not isinstance(tag, str) or "=" not in tag:
        raise InvalidArgument(f"Invalid tag '{tag}': expected 'key=value'")
    key, _, value = tag.partition("=")
    if not _KEY.match(key):
        raise InvalidArgument(f"Invalid tag key '{key}': letters, digits and _ . : - only")
    if not value or len(value) > MAX_VALUE or any(ord(c) < 32 for c in value):
        raise InvalidArgument(f"Invalid tag value in '{tag}'")
    return key, value


def normalize_tags(tags: list[str] | None) -> list[str]:
    """Validated, de-duplicated, order kept."""
    out: list[str] = []
    for tag in tags or []:
        k, v = parse_tag(tag)
        norm = f"{k}={v}"
        if norm not in out:
            out.append(norm)
    if len(out) > MAX_TAGS:
        raise InvalidArgument(f"At most {MAX_TAGS} tags")
    return out


def apply_tag_mode(current: list[str], tags: list[str] | None, mode: str) -> list[str]:
    new = normalize_tags(tags)
    if mode == "replace":
        return new
    if mode == "append":
        return normalize_tags([*current, *new])
    if mode == "clear":
        return []
    if mode == "remove":
        return [t for t in current if t not in new]
    raise InvalidArgument(f"Invalid tag mode '{mode}': replace, append, remove or clear")
