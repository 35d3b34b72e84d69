"""IndexFilter -> a boolean row mask over the embedded index's columns.

The filter semantics are the domain's (skald.domain.index_filter, skald.domain.filter_tree);
this module evaluates them as vectorised masks, applied before ranking so a filter never
starves a top-k.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from skald.adapters.local.index_columns import Columns, Mask
from skald.domain.filter_tree import (
    AllOf,
    AnyOf,
    Node,
    Numbers,
    Range,
    Strings,
    as_list,
    parse_tree,
)
from skald.domain.index_filter import check_time_field, level_list, scope_uris
from skald.ports import IndexFilter


def scope_mask(cols: Columns, scopes: Sequence[str]) -> Mask:
    """Rows at a scope or below it."""
    norm = scope_uris(scopes)
    if norm is None:
        return np.ones(cols.n, dtype=np.bool_)  # a scheme root scopes everything
    return cols.str_mask("uri", norm) | cols.multi["ancestors"].values_mask(norm, cols.n)


def filter_mask(cols: Columns, account: str, f: IndexFilter) -> tuple[Mask, Mask] | None:
    """(rows of `account` passing `f`, live rows of `account`); None for an account
    without rows. Raises ValueError on a malformed filter."""
    check_time_field(f.time_field)
    tree = tree_mask(cols, parse_tree(f.tree)) if f.tree is not None else None
    code = cols.strs["account"].get(account)
    if code is None:
        return None
    n = cols.n
    base: Mask = cols.alive[:n] & (cols.codes["account"][:n] == code)
    mask = base.copy()
    if f.scopes:
        mask &= scope_mask(cols, as_list(f.scopes))
    if f.exclude_scopes:
        mask &= ~scope_mask(cols, as_list(f.exclude_scopes))
    if f.context_types is not None:
        mask &= cols.str_mask("context_type", as_list(f.context_types))
    if f.levels is not None:
        mask &= np.isin(cols.level[:n], np.asarray(level_list(f.levels), dtype=np.int64))
    for tag in as_list(f.tags_all):
        mask &= cols.multi["tags"].values_mask([tag], n)
    times = cols.updated if f.time_field == "updated_at" else cols.created
    if f.since is not None:
        mask &= times[:n] >= float(f.since)
    if f.until is not None:
        mask &= times[:n] <= float(f.until)
    if tree is not None:
        mask &= tree
    return mask, base


def tree_mask(cols: Columns, node: Node) -> Mask:
    """The rows a validated metadata filter tree keeps."""
    n = cols.n
    if isinstance(node, AllOf | AnyOf):
        out = tree_mask(cols, node.conds[0]).copy()
        for cond in node.conds[1:]:
            if isinstance(node, AllOf):
                out &= tree_mask(cols, cond)
            else:
                out |= tree_mask(cols, cond)
        return out
    if isinstance(node, Strings):
        if node.field == "tags":
            hit = cols.multi["tags"].values_mask(node.values, n)
        else:
            hit = cols.str_mask(node.field, node.values)
        return ~hit if node.negate else hit
    if isinstance(node, Numbers):
        col = _numeric_column(cols, node.field)
        hit = np.isin(col, np.array(node.values, dtype=np.float64))
        return ~hit if node.negate else hit
    if isinstance(node, Range):
        col = _numeric_column(cols, node.field)
        out = np.ones(n, dtype=np.bool_)
        for key, v in node.bounds:
            if key == "gte":
                out &= col >= v
            elif key == "gt":
                out &= col > v
            elif key == "lte":
                out &= col <= v
            else:
                out &= col < v
        return out
    if node.field == "tags":
        return cols.multi["tags"].prefix_mask(node.prefix, n)
    return cols.str_prefix_mask(node.field, node.prefix)


def _numeric_column(cols: Columns, field_: str) -> npt.NDArray[Any]:
    n = cols.n
    if field_ == "level":
        return cols.level[:n]
    if field_ == "created_at":
        return cols.created[:n]
    return cols.updated[:n]
