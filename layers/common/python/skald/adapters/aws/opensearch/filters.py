"""IndexFilter -> OpenSearch `bool.filter` clauses (pure: golden-tested in
tests/unit/adapters/aws/opensearch/test_opensearch_requests.py).

The filter semantics are the domain's (skald.domain.retrieval.index_filter,
skald.domain.retrieval.filter_tree); this module only spells them in OpenSearch's query DSL. Times
are indexed as epoch milliseconds, so time filters have millisecond resolution.
"""

from __future__ import annotations

from typing import Any

from skald.domain.retrieval.filter_tree import (
    AllOf,
    AnyOf,
    Node,
    Numbers,
    Range,
    Strings,
    as_list,
    parse_tree,
)
from skald.domain.retrieval.index_filter import check_time_field, level_list, scope_uris
from skald.ports import IndexFilter


def to_millis(seconds: float) -> int | float:
    """Epoch seconds -> epoch milliseconds, an int when exact (tidy JSON, exact terms)."""
    return tidy(float(seconds) * 1000.0)


def tidy(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def filter_clauses(account: str, flt: IndexFilter) -> list[dict[str, Any]]:
    """The bool.filter clauses of `flt` for `account` (the account term always comes first).
    Raises MalformedFilter on a malformed filter."""
    check_time_field(flt.time_field)
    tree = tree_query(parse_tree(flt.tree)) if flt.tree is not None else None
    clauses: list[dict[str, Any]] = [{"term": {"account": account}}, *_scope_clauses(flt)]
    if flt.context_types is not None:
        clauses.append(terms("context_type", as_list(flt.context_types)))
    if flt.levels is not None:
        clauses.append(terms("level", [int(v) for v in level_list(flt.levels)]))
    for tag in as_list(flt.tags_all):
        clauses.append({"term": {"tags": tag}})
    if flt.since is not None or flt.until is not None:
        clauses.append(_time_clause(flt))
    if tree is not None:
        clauses.append(tree)
    return clauses


def _scope_clauses(flt: IndexFilter) -> list[dict[str, Any]]:
    clauses: list[dict[str, Any]] = []
    if flt.scopes:
        scope = scope_query(as_list(flt.scopes))
        if scope is not None:
            clauses.append(scope)
    if flt.exclude_scopes:
        scope = scope_query(as_list(flt.exclude_scopes))
        clauses.append({"match_none": {}} if scope is None else {"bool": {"must_not": [scope]}})
    return clauses


def _time_clause(flt: IndexFilter) -> dict[str, Any]:
    bounds: dict[str, Any] = {}
    if flt.since is not None:
        bounds["gte"] = str(to_millis(flt.since))
    if flt.until is not None:
        bounds["lte"] = str(to_millis(flt.until))
    bounds["format"] = "epoch_millis"
    return {"range": {flt.time_field: bounds}}


def terms(field: str, values: list[Any]) -> dict[str, Any]:
    return {"terms": {field: values}} if values else {"match_none": {}}


def scope_query(scopes: list[str]) -> dict[str, Any] | None:
    """uri equal to a scope or below it; None when a scheme root scopes everything."""
    norm = scope_uris(scopes)
    if norm is None:
        return None
    return {
        "bool": {
            "should": [{"terms": {"uri": norm}}, {"terms": {"ancestors": norm}}],
            "minimum_should_match": 1,
        }
    }


def tree_query(node: Node) -> dict[str, Any]:
    """A validated metadata filter tree as an OpenSearch query."""
    if isinstance(node, AllOf):
        return {"bool": {"filter": [tree_query(c) for c in node.conds]}}
    if isinstance(node, AnyOf):
        return {"bool": {"should": [tree_query(c) for c in node.conds], "minimum_should_match": 1}}
    if isinstance(node, Strings | Numbers):
        hit = _values_query(node)
        return {"bool": {"must_not": [hit]}} if node.negate else hit
    if isinstance(node, Range):
        if node.field == "level":
            return {"range": {"level": {k: tidy(v) for k, v in node.bounds}}}
        out: dict[str, Any] = {k: str(to_millis(v)) for k, v in node.bounds}
        out["format"] = "epoch_millis"
        return {"range": {node.field: out}}
    return {"prefix": {node.field: {"value": node.prefix}}}


def _values_query(node: Strings | Numbers) -> dict[str, Any]:
    if isinstance(node, Strings):
        return {"terms": {node.field: list(node.values)}}
    if node.field == "level":
        # A fractional level can match no record: leave it out rather than let it be rounded.
        return terms("level", [int(v) for v in node.values if v.is_integer()])
    return terms(node.field, [to_millis(v) for v in node.values])
