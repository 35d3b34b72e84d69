"""ScopeMasks: cached scope masks equal the uncached ones through appends, kills and
compaction, and are reused rather than recomputed."""

from __future__ import annotations

import numpy as np
import pytest

from skald.adapters.local.index.columns import Columns, Row
from skald.adapters.local.index.filters import ScopeMasks, filter_mask, scope_mask
from skald.ports import IndexFilter

ROOT = "viking://resources"
SCOPES = [
    [f"{ROOT}/p0"],
    [f"{ROOT}/p1/d2"],
    [f"{ROOT}/p2/d0/f7.md"],  # a file: the scope matches its own URI
    [f"{ROOT}/p0", f"{ROOT}/p3/d1"],
    [f"{ROOT}/p3/d1/", f"{ROOT}/p0"],  # same set, other order, a trailing slash
    [f"{ROOT}/nowhere"],
    [ROOT],
]


class Corpus:
    """Columns with files viking://resources/pP/dD/fI.md, appended in rowid order."""

    def __init__(self) -> None:
        self.cols = Columns(4)
        self.rid = 0

    def add(self, count: int, project: int | None = None, account: str = "acme") -> None:
        rows = []
        for _ in range(count):
            self.rid += 1
            i = self.rid
            p = project if project is not None else i % 4
            parent = f"{ROOT}/p{p}/d{i % 3}"
            rows.append(
                Row(
                    rid=i,
                    account=account,
                    uri=f"{parent}/f{i}.md",
                    level=2,
                    section=0,
                    context_type="resource",
                    parent=parent,
                    ancestors=[ROOT, f"{ROOT}/p{p}", parent],
                    tags=[],
                    memory_type=None,
                    owner=None,
                    peer=None,
                    created_at=float(i),
                    updated_at=float(i),
                    vector=None,
                    terms=[],
                    tfs=b"",
                    doclen=0,
                )
            )
        self.cols.append(rows)


def assert_cached_equal(cache: ScopeMasks, cols: Columns) -> None:
    for scopes in SCOPES:
        got = cache.mask(cols, scopes)
        want = scope_mask(cols, scopes)
        assert got.shape == (cols.n,)
        assert np.array_equal(got, want), scopes


@pytest.fixture
def corpus() -> Corpus:
    c = Corpus()
    c.add(300)
    return c


def test_cached_masks_equal_uncached(corpus: Corpus) -> None:
    cache = ScopeMasks()
    assert_cached_equal(cache, corpus.cols)
    assert_cached_equal(cache, corpus.cols)
    # The equality is not vacuous: scopes select some rows and leave others.
    some = cache.mask(corpus.cols, [f"{ROOT}/p0"])
    assert 0 < int(some.sum()) < corpus.cols.n
    assert int(cache.mask(corpus.cols, [f"{ROOT}/p2/d0/f7.md"]).sum()) == 0  # 7 % 4 == 3
    assert int(cache.mask(corpus.cols, [f"{ROOT}/p3/d1/f7.md"]).sum()) == 1


def test_second_lookup_is_a_hit_and_order_of_scopes_does_not_matter(corpus: Corpus) -> None:
    cache = ScopeMasks()
    first = cache.mask(corpus.cols, [f"{ROOT}/p0", f"{ROOT}/p3/d1"])
    again = cache.mask(corpus.cols, [f"{ROOT}/p3/d1/", f"{ROOT}/p0"])
    assert (cache.misses, cache.hits) == (1, 1)
    assert np.shares_memory(first, again)  # the same cached mask, not a recomputation
    assert not again.flags.writeable


def test_appended_rows_extend_the_cached_mask(corpus: Corpus) -> None:
    cache = ScopeMasks()
    assert_cached_equal(cache, corpus.cols)
    misses = cache.misses
    corpus.add(50, project=0)
    corpus.add(2000)  # past the first buffer's capacity
    assert_cached_equal(cache, corpus.cols)
    assert cache.misses == misses  # extended, not rebuilt
    assert int(cache.mask(corpus.cols, [f"{ROOT}/p0"])[-2050:-2000].sum()) == 50


def test_a_scope_created_after_caching_is_found(corpus: Corpus) -> None:
    cache = ScopeMasks()
    assert not cache.mask(corpus.cols, [f"{ROOT}/p9"]).any()
    corpus.add(5, project=9)
    got = cache.mask(corpus.cols, [f"{ROOT}/p9"])
    assert int(got.sum()) == 5 and bool(got[-5:].all())
    assert cache.misses == 1


def test_masks_handed_out_earlier_do_not_change(corpus: Corpus) -> None:
    cache = ScopeMasks()
    before = cache.mask(corpus.cols, [f"{ROOT}/p1"]).copy()
    held = cache.mask(corpus.cols, [f"{ROOT}/p1"])
    corpus.add(3000, project=1)
    cache.mask(corpus.cols, [f"{ROOT}/p1"])
    assert np.array_equal(held, before)


def test_killed_rows_are_left_out_of_filters(corpus: Corpus) -> None:
    cache = ScopeMasks()
    flt = IndexFilter(scopes=[f"{ROOT}/p0"], exclude_scopes=[f"{ROOT}/p0/d1"])
    first = filter_mask(corpus.cols, "acme", flt, cache)
    assert first is not None
    victims = np.flatnonzero(first[0])[:5].astype(np.int64)
    corpus.cols.kill(victims)
    got = filter_mask(corpus.cols, "acme", flt, cache)
    want = filter_mask(corpus.cols, "acme", flt)
    assert got is not None and want is not None
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert not got[0][victims].any()
    assert int(got[0].sum()) == int(first[0].sum()) - 5
    assert cache.hits >= 2


def test_compaction_invalidates(corpus: Corpus) -> None:
    cache = ScopeMasks()
    assert_cached_equal(cache, corpus.cols)
    corpus.cols.kill(np.arange(0, 200, dtype=np.int64))
    fresh = corpus.cols.compacted()
    assert fresh.n == 100
    misses = cache.misses
    assert_cached_equal(cache, fresh)
    assert cache.misses > misses  # rows were renumbered: the old masks were dropped


def test_other_accounts_rows_stay_out(corpus: Corpus) -> None:
    corpus.add(40, project=0, account="other")
    cache = ScopeMasks()
    flt = IndexFilter(scopes=[f"{ROOT}/p0"])
    got = filter_mask(corpus.cols, "acme", flt, cache)
    want = filter_mask(corpus.cols, "acme", flt)
    assert got is not None and want is not None
    assert np.array_equal(got[0], want[0])
    assert not got[0][-40:].any()


def test_least_recently_used_scope_sets_are_evicted(corpus: Corpus) -> None:
    cache = ScopeMasks(max_entries=3)
    for p in range(3):
        cache.mask(corpus.cols, [f"{ROOT}/p{p}"])
    cache.mask(corpus.cols, [f"{ROOT}/p0"])  # p0 is now the most recent
    cache.mask(corpus.cols, [f"{ROOT}/p3"])  # evicts p1
    assert len(cache) == 3
    hits = cache.hits
    cache.mask(corpus.cols, [f"{ROOT}/p0"])
    assert cache.hits == hits + 1
    misses = cache.misses
    cache.mask(corpus.cols, [f"{ROOT}/p1"])
    assert cache.misses == misses + 1
    assert_cached_equal(cache, corpus.cols)
