"""The metadata filter tree of find/search (`filter`), shared by every SearchIndex adapter:
its fields, operators and the validation of a node. Adapters compile validated nodes into
their own query form (numpy masks, OpenSearch bool queries)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

STRING_FIELDS = ("uri", "parent", "context_type", "memory_type", "owner", "peer")
NUMBER_FIELDS = ("level", "created_at", "updated_at")
TREE_FIELDS = frozenset((*STRING_FIELDS, *NUMBER_FIELDS, "tags"))
RANGE_OPS = ("gte", "gt", "lte", "lt")
MAX_TREE_DEPTH = 32


def as_list(values: Sequence[str] | str) -> list[str]:
    # A bare string would otherwise be iterated character by character.
    return [values] if isinstance(values, str) else list(values)


def only_keys(node: dict[str, Any], allowed: set[str]) -> None:
    extra = set(node) - allowed
    if extra:
        raise ValueError(f"filter op {node.get('op')!r} does not take {sorted(extra)}")


def tree_field(node: dict[str, Any]) -> str:
    value = node.get("field")
    if not isinstance(value, str) or value not in TREE_FIELDS:
        raise ValueError(
            f"unknown filter field {value!r}: expected one of {', '.join(sorted(TREE_FIELDS))}"
        )
    return value


def string_value(value: Any, field_: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"filter field {field_!r} takes strings, got {value!r}")
    return value


def number_value(value: Any, field_: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"filter field {field_!r} takes numbers, got {value!r}")
    return float(value)
