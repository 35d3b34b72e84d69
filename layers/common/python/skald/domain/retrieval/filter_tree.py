"""The metadata filter tree of find/search (`filter`), shared by every SearchIndex adapter:
its fields, operators and the validation of a node (`parse_tree`, which first rewrites
OpenViking's other spellings, see skald.domain.retrieval.filter_forms). Adapters compile the
validated nodes into their own query form (numpy masks, OpenSearch bool queries)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from skald.domain.retrieval.filter_forms import canonical_node, unwrap
from skald.domain.retrieval.index_filter import MalformedFilter, norm_uri

STRING_FIELDS = ("uri", "parent", "context_type", "memory_type", "owner", "peer")
NUMBER_FIELDS = ("level", "created_at", "updated_at")
TREE_FIELDS = frozenset((*STRING_FIELDS, *NUMBER_FIELDS, "tags"))
RANGE_OPS = ("gte", "gt", "lte", "lt")
# What every index can compare a number field with: a level is a 32-bit integer column on
# OpenSearch, a time (epoch seconds) a date between the years 1 and 9999. Beyond, an engine
# refuses the query, which is the caller's mistake: it is refused here, the same everywhere.
NUMBER_RANGES = {
    "level": (-(2.0**31), 2.0**31 - 1),
    "created_at": (-62135596800.0, 253402300799.0),
    "updated_at": (-62135596800.0, 253402300799.0),
}
MAX_TREE_DEPTH = 32


def as_list(values: Sequence[str] | str) -> list[str]:
    # A bare string would otherwise be iterated character by character.
    return [values] if isinstance(values, str) else list(values)


def only_keys(node: dict[str, Any], allowed: set[str]) -> None:
    extra = set(node) - allowed
    if extra:
        raise MalformedFilter(f"filter op {node.get('op')!r} does not take {sorted(extra)}")


def tree_field(node: dict[str, Any]) -> str:
    value = node.get("field")
    if not isinstance(value, str) or value not in TREE_FIELDS:
        raise MalformedFilter(
            f"unknown filter field {value!r}: expected one of {', '.join(sorted(TREE_FIELDS))}"
        )
    return value


def string_value(value: Any, field_: str) -> str:
    if not isinstance(value, str):
        raise MalformedFilter(f"filter field {field_!r} takes strings, got {value!r}")
    return value


def number_value(value: Any, field_: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedFilter(f"filter field {field_!r} takes numbers, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        raise MalformedFilter(f"filter field {field_!r}: number out of range") from None
    low, high = NUMBER_RANGES.get(field_, (-math.inf, math.inf))
    if not math.isfinite(number) or not low <= number <= high:
        raise MalformedFilter(f"filter field {field_!r}: number out of range")
    return number


# --------------------------------------------------------------------------------------------
# A validated tree: adapters compile these nodes, never the raw JSON.


@dataclass(frozen=True)
class AllOf:
    """op "and": every condition holds."""

    conds: tuple[Node, ...]


@dataclass(frozen=True)
class AnyOf:
    """op "or": at least one condition holds."""

    conds: tuple[Node, ...]


@dataclass(frozen=True)
class Strings:
    """op "must" (or "must_not", `negate`) on tags or a string field: the field (one of the
    record's tags) equals one of `values`; uri and parent values are in canonical form."""

    field: str
    values: tuple[str, ...]
    negate: bool


@dataclass(frozen=True)
class Numbers:
    """op "must" (or "must_not", `negate`) on a numeric field: it equals one of `values`."""

    field: str
    values: tuple[float, ...]
    negate: bool


@dataclass(frozen=True)
class Range:
    """op "range" on a numeric field: every (operator, bound) of `bounds` holds, operators
    from RANGE_OPS in the order given."""

    field: str
    bounds: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Prefix:
    """op "prefix" on tags or a string field: the value (one of the tags) starts with
    `prefix`."""

    field: str
    prefix: str


Node = AllOf | AnyOf | Strings | Numbers | Range | Prefix


def _parse_bool(node: dict[str, Any], op: str, depth: int) -> Node:
    only_keys(node, {"op", "conds"})
    conds = node.get("conds")
    if not isinstance(conds, list) or not conds:
        raise MalformedFilter(f"filter op {op!r} needs a non-empty 'conds' list")
    subs = tuple(parse_tree(c, depth + 1) for c in conds)
    return AllOf(subs) if op == "and" else AnyOf(subs)


def _parse_must(node: dict[str, Any], op: str, depth: int) -> Node:
    only_keys(node, {"op", "field", "conds"})
    field_ = tree_field(node)
    values = node.get("conds")
    if not isinstance(values, list):
        values = [values]
    if not values:
        raise MalformedFilter(f"filter op {op!r} needs a non-empty 'conds' list")
    negate = op == "must_not"
    if field_ == "tags" or field_ in STRING_FIELDS:
        strs = [string_value(v, field_) for v in values]
        if field_ in ("uri", "parent"):
            strs = [norm_uri(s) for s in strs]
        return Strings(field_, tuple(strs), negate)
    return Numbers(field_, tuple(number_value(v, field_) for v in values), negate)


def _parse_range(node: dict[str, Any], op: str, depth: int) -> Node:
    field_ = tree_field(node)
    bounds = {k: v for k, v in node.items() if k not in ("op", "field")}
    if not bounds or set(bounds) - set(RANGE_OPS):
        raise MalformedFilter(
            f"filter op 'range' takes one or more of {', '.join(RANGE_OPS)}, "
            f"got {sorted(bounds) or 'none'}"
        )
    if field_ not in NUMBER_FIELDS:
        raise MalformedFilter(f"filter op 'range' needs a numeric field, not {field_!r}")
    return Range(field_, tuple((k, number_value(v, field_)) for k, v in bounds.items()))


def _parse_prefix(node: dict[str, Any], op: str, depth: int) -> Node:
    only_keys(node, {"op", "field", "prefix"})
    field_ = tree_field(node)
    prefix = node.get("prefix")
    if not isinstance(prefix, str):
        raise MalformedFilter("filter op 'prefix' needs a string 'prefix'")
    if field_ == "tags" or field_ in STRING_FIELDS:
        return Prefix(field_, prefix)
    raise MalformedFilter(f"filter op 'prefix' does not apply to the numeric field {field_!r}")


_OPS: dict[str, Callable[[dict[str, Any], str, int], Node]] = {
    "and": _parse_bool,
    "or": _parse_bool,
    "must": _parse_must,
    "must_not": _parse_must,
    "range": _parse_range,
    "prefix": _parse_prefix,
}


def parse_tree(node: Any, depth: int = 0) -> Node:
    """The filter tree (see IndexFilter.tree) validated. Raises MalformedFilter on a malformed
    node, naming what is wrong; conditions are checked in the order they are written."""
    if depth > MAX_TREE_DEPTH:
        raise MalformedFilter(f"filter nests deeper than {MAX_TREE_DEPTH} levels")
    node = canonical_node(unwrap(node) if depth == 0 else node)
    if not isinstance(node, dict):
        raise MalformedFilter(f"filter node must be an object, got {type(node).__name__}")
    op = node.get("op")
    if not isinstance(op, str) or op not in _OPS:
        raise MalformedFilter(
            f"unknown filter op {op!r}: expected and, or, must, must_not, range or prefix"
        )
    return _OPS[op](node, op, depth)
