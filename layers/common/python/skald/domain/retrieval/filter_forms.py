"""The other spellings of a `filter` node that OpenViking clients send, rewritten into the one
form `parse_tree` validates (skald.domain.retrieval.filter_tree).

- `{"filter": {...}}`: OpenViking's engine unwraps a top-level `filter` key.
- A plain field match, `{"context_type": "resource", "level": [0, 1]}`: every key is a field,
  the node holds when every field matches (a list matches any of its values; an object of
  gte/gt/lte/lt bounds is a range).
- OpenViking's field names: `type` and `context_type`, `parent_uri` and `parent`,
  `owner_user_id` and `owner`, `search_tags` and `tags` name the same field.
- `op: "time_range"` is `range`; a bound of `created_at` / `updated_at` may be an ISO date or
  datetime (read as UTC) instead of epoch seconds.
- `para: "-d=0"` on a `must` over `uri` / `parent` (OpenViking's exact path match) is the
  default meaning and is accepted; other depths are refused with a clear message.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from skald.domain.retrieval.index_filter import MalformedFilter

FIELD_ALIASES = {
    "type": "context_type",
    "parent_uri": "parent",
    "owner_user_id": "owner",
    "search_tags": "tags",
}
_OPS = frozenset(("and", "or", "must", "must_not", "range", "time_range", "prefix"))
_BOUNDS = frozenset(("gte", "gt", "lte", "lt"))
_TIME_FIELDS = frozenset(("created_at", "updated_at"))


def unwrap(node: Any) -> Any:
    """The tree inside a top-level `{"filter": ...}` wrapper; `node` itself otherwise."""
    if isinstance(node, dict) and set(node) == {"filter"}:
        return node["filter"]
    return node


def canonical_node(node: Any) -> Any:
    """`node` in the op form; anything not recognised is returned unchanged, for parse_tree
    to report."""
    if not isinstance(node, dict) or not node:
        return node
    if "op" not in node:
        return _plain_match(node)
    out = dict(node)
    if out.get("op") == "time_range":
        out["op"] = "range"
    field = out.get("field")
    if isinstance(field, str):
        out["field"] = FIELD_ALIASES.get(field, field)
    if out.get("op") == "range" and out.get("field") in _TIME_FIELDS:
        for key in _BOUNDS & set(out):
            out[key] = _time_value(out[key])
    if "para" in out and out.get("op") in ("must", "must_not"):
        para = out.pop("para")
        if out.get("field") not in ("uri", "parent") or str(para).replace(" ", "") != "-d=0":
            raise MalformedFilter(
                f"filter 'para' {para!r} is not supported: only '-d=0' (an exact uri or "
                "parent match) is; use op 'prefix' on uri to match a subtree"
            )
    return out


def _plain_match(node: dict[str, Any]) -> dict[str, Any]:
    if any(not isinstance(k, str) or k in _OPS for k in node):
        return node  # not a field map: let parse_tree name the problem
    conds: list[dict[str, Any]] = []
    for key, value in node.items():
        field = FIELD_ALIASES.get(key, key)
        if isinstance(value, dict) and value and set(value) <= _BOUNDS:
            conds.append(canonical_node({"op": "range", "field": field, **value}))
        else:
            conds.append(
                {
                    "op": "must",
                    "field": field,
                    "conds": value if isinstance(value, list) else [value],
                }
            )
    return conds[0] if len(conds) == 1 else {"op": "and", "conds": conds}


def _time_value(value: Any) -> Any:
    """An ISO date/datetime bound as epoch seconds (UTC when no zone is given); other values
    unchanged."""
    if not isinstance(value, str):
        return value
    try:
        dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise MalformedFilter(
            f"filter time bound {value!r} is neither a number nor an ISO date"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()
