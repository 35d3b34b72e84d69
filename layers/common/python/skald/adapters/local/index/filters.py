"""IndexFilter -> a boolean row mask over the embedded index's columns.

The filter semantics are the domain's (skald.domain.retrieval.index_filter,
skald.domain.retrieval.filter_tree); this module evaluates them as vectorised masks, applied before
ranking so a filter never starves a top-k.
"""

from __future__ import annotations

import operator
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from skald.adapters.local.index.columns import Columns, Mask
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


def scope_mask(cols: Columns, scopes: Sequence[str]) -> Mask:
    """Rows at a scope or below it (dead rows included: callers mask them out)."""
    norm = scope_uris(scopes)
    if norm is None:
        return np.ones(cols.n, dtype=np.bool_)  # a scheme root scopes everything
    return cols.str_mask("uri", norm) | cols.multi["ancestors"].values_mask(norm, cols.n)


@dataclass
class _ScopeEntry:
    buf: Mask  # rows [0, rows) of the scope mask; room to grow
    rows: int  # rows covered
    pairs: int  # ancestor (value, row) pairs covered


class ScopeMasks:
    """scope_mask, cached per Columns snapshot. A find's scopes repeat (a user's roots, a
    project folder), and matching them against every row's ancestors costs a pass over every
    row's ancestors; a cached mask costs a slice.

    Sound because a Columns object only ever appends rows (and their ancestor pairs, in row
    order): a cached mask is extended over the rows appended since, never recomputed. Kills
    leave it as is (scope masks include dead rows; `alive` removes them). Compaction makes a
    new Columns object, which empties the cache. At most `max_entries` scope sets are kept,
    least recently used out first; each costs one byte per row."""

    def __init__(self, max_entries: int = 16) -> None:
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()  # searches run concurrently under the read lock
        self._cols: weakref.ref[Columns] | None = None
        self._entries: OrderedDict[tuple[str, ...], _ScopeEntry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def mask(self, cols: Columns, scopes: Sequence[str]) -> Mask:
        """Equal to scope_mask(cols, scopes); read-only, valid while `cols` holds its rows."""
        norm = scope_uris(scopes)
        if norm is None:
            return np.ones(cols.n, dtype=np.bool_)
        key = tuple(sorted(set(norm)))
        with self._lock:
            if self._cols is None or self._cols() is not cols:
                self._entries.clear()
                self._cols = weakref.ref(cols)
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                entry = _ScopeEntry(np.zeros(max(cols.n, 1024), dtype=np.bool_), 0, 0)
                self._entries[key] = entry
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            else:
                self.hits += 1
                self._entries.move_to_end(key)
            if entry.rows < cols.n:
                _extend(entry, cols, key)
            view = entry.buf[: cols.n]
        view.flags.writeable = False
        return view


def _extend(entry: _ScopeEntry, cols: Columns, scopes: tuple[str, ...]) -> None:
    """Marks the rows appended since `entry` was last brought up to date."""
    start, n = entry.rows, cols.n
    if entry.buf.size < n:
        # A new buffer: masks handed out earlier keep the old one, unchanged.
        grown = np.zeros(max(n, 2 * entry.buf.size), dtype=np.bool_)
        grown[:start] = entry.buf[:start]
        entry.buf = grown
    # Interners only grow too, so the lookup tables are rebuilt (they are small: one
    # entry per distinct value) and new values, the scope itself maybe, are found.
    entry.buf[start:n] = cols.strs["uri"].lut(scopes)[cols.codes["uri"][start:n]]
    anc = cols.multi["ancestors"]
    hit = anc.strs.lut(scopes)[anc.code[entry.pairs : anc.n]]
    entry.buf[anc.row[entry.pairs : anc.n][hit]] = True
    entry.rows, entry.pairs = n, anc.n


def filter_mask(
    cols: Columns, account: str, f: IndexFilter, scopes: ScopeMasks | None = None
) -> tuple[Mask, Mask] | None:
    """(rows of `account` passing `f`, live rows of `account`); None for an account
    without rows. Raises MalformedFilter on a malformed filter. `scopes` caches scope masks."""
    check_time_field(f.time_field)
    tree = tree_mask(cols, parse_tree(f.tree)) if f.tree is not None else None
    code = cols.strs["account"].get(account)
    if code is None:
        return None
    n = cols.n
    base: Mask = cols.alive[:n] & (cols.codes["account"][:n] == code)
    mask = base.copy()
    scoped = scope_mask if scopes is None else scopes.mask
    if f.scopes:
        mask &= scoped(cols, as_list(f.scopes))
    if f.exclude_scopes:
        mask &= ~scoped(cols, as_list(f.exclude_scopes))
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
        return _bool_mask(cols, node)
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
        return _range_mask(cols, node)
    if node.field == "tags":
        return cols.multi["tags"].prefix_mask(node.prefix, n)
    return cols.str_prefix_mask(node.field, node.prefix)


def _bool_mask(cols: Columns, node: AllOf | AnyOf) -> Mask:
    out = tree_mask(cols, node.conds[0]).copy()
    for cond in node.conds[1:]:
        if isinstance(node, AllOf):
            out &= tree_mask(cols, cond)
        else:
            out |= tree_mask(cols, cond)
    return out


_COMPARE = {"gte": operator.ge, "gt": operator.gt, "lte": operator.le, "lt": operator.lt}


def _range_mask(cols: Columns, node: Range) -> Mask:
    col = _numeric_column(cols, node.field)
    out = np.ones(cols.n, dtype=np.bool_)
    for key, v in node.bounds:
        out &= _COMPARE[key](col, v)
    return out


def _numeric_column(cols: Columns, field_: str) -> npt.NDArray[Any]:
    n = cols.n
    if field_ == "level":
        return cols.level[:n]
    if field_ == "created_at":
        return cols.created[:n]
    return cols.updated[:n]
