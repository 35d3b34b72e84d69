"""Ranking rules shared by the index adapters: RRF fusion (contributions, depth, order,
normalised score), the keyword query, the lexical score mapping and the tie-break."""

from __future__ import annotations

import numpy as np

from skald.domain.retrieval.fusion import (
    RRF_BEST,
    RRF_K,
    fused_top,
    hybrid_depth,
    hybrid_score,
    keyword_query,
    rrf_contribution,
    rrf_fuse,
)
from skald.domain.retrieval.scores import lexical_score, tie_key


def test_stop_words_leave_the_keyword_side() -> None:
    assert keyword_query("What did Melanie paint after the trip?") == "Melanie paint trip"
    assert keyword_query("Where's the config for the auth service") == "config auth service"


def test_a_query_of_stop_words_only_is_kept_whole() -> None:
    assert keyword_query("to be or not to be") == "to be or not to be"
    assert keyword_query("   ") == "   "


def test_non_ascii_words_survive() -> None:
    assert keyword_query("Où est la clé du serveur") == "Où est la clé du serveur"
    assert keyword_query("the café in Zürich") == "café Zürich"


def test_rank_one_in_both_lists_is_the_best_fused_score() -> None:
    assert rrf_contribution(1) * 2 == RRF_BEST
    assert rrf_contribution(1) > rrf_contribution(2) > rrf_contribution(50) > 0
    # The top of one list outweighs a middling rank in both: the reason for a small k.
    assert rrf_contribution(1) + rrf_contribution(40) > 2 * rrf_contribution(12)
    assert RRF_K == 10


def test_hybrid_depth_is_four_times_the_limit_and_at_least_fifty() -> None:
    assert hybrid_depth(0) == 50
    assert hybrid_depth(10) == 50
    assert hybrid_depth(13) == 52
    assert hybrid_depth(100) == 400


def test_rrf_fuse_adds_contributions_in_ranking_order() -> None:
    fused = rrf_fuse(["a", "b", "c"], ["c", "d"])
    assert list(fused) == ["a", "b", "c", "d"]  # first-seen order
    assert fused["a"] == rrf_contribution(1)
    assert fused["c"] == rrf_contribution(3) + rrf_contribution(1)
    assert fused["d"] == rrf_contribution(2)
    assert rrf_fuse() == {} and rrf_fuse([], []) == {}


def test_fused_top_orders_by_score_then_tie_key_and_normalises() -> None:
    fused = rrf_fuse(["x", "y"], ["y", "x"])  # x and y tie exactly
    keys = {"x": tie_key("viking://r/b.md", 0, 0), "y": tie_key("viking://r/a.md", 0, 0)}
    top = fused_top(fused, keys.__getitem__, 5)
    assert [k for k, _ in top] == ["y", "x"]  # the smaller uri wins the tie
    assert top[0][1] == top[1][1] == (rrf_contribution(1) + rrf_contribution(2)) / RRF_BEST
    assert fused_top(rrf_fuse(["a"], ["a"]), lambda k: ("", 0, 0), 1) == [("a", 1.0)]
    assert fused_top(fused, keys.__getitem__, 1) == top[:1]
    assert fused_top({}, keys.__getitem__, 3) == []


def test_hybrid_score_is_one_at_best_and_never_above() -> None:
    assert hybrid_score(RRF_BEST) == 1.0
    assert hybrid_score(RRF_BEST * 1.5) == 1.0
    assert hybrid_score(rrf_contribution(1)) == 0.5


def test_lexical_score_maps_bm25_into_zero_one_on_floats_and_arrays() -> None:
    assert lexical_score(0.0) == 0.0
    assert lexical_score(3.0) == 0.75
    assert 0.99 < lexical_score(1000.0) < 1.0
    arr = lexical_score(np.array([0.0, 1.0, 3.0]))
    assert arr.tolist() == [0.0, 0.5, 0.75]


def test_tie_key_orders_by_uri_then_level_then_section() -> None:
    keys = [
        tie_key("viking://b", 0, 0),
        tie_key("viking://a", 1, 0),
        tie_key("viking://a", 0, 2),
        tie_key("viking://a", 0, 1),
    ]
    assert sorted(keys) == [
        ("viking://a", 0, 1),
        ("viking://a", 0, 2),
        ("viking://a", 1, 0),
        ("viking://b", 0, 0),
    ]


def test_summaries_do_not_push_files_down_in_fusion() -> None:
    def is_summary(key: str) -> bool:
        return key.endswith("/.abstract.md") or key.endswith("/.overview.md")

    dense = ["d/.overview.md", "d/.abstract.md", "d/a.md", "d/b.md"]
    lexical = ["d/.abstract.md", "d/b.md", "d/a.md"]
    fused = rrf_fuse(dense, lexical, is_summary=is_summary)
    # Files rank among files only: a.md is first of the files in the dense list.
    assert fused["d/a.md"] == rrf_contribution(1) + rrf_contribution(2)
    assert fused["d/b.md"] == rrf_contribution(2) + rrf_contribution(1)
    # Summaries keep their rank among every item.
    assert fused["d/.overview.md"] == rrf_contribution(1)
    assert fused["d/.abstract.md"] == rrf_contribution(2) + rrf_contribution(1)
    # The files' fused scores are those of the same lists without any summary.
    bare = rrf_fuse(
        [k for k in dense if not is_summary(k)], [k for k in lexical if not is_summary(k)]
    )
    assert {k: v for k, v in fused.items() if not is_summary(k)} == bare
    # Without the rule, summaries above a file cost it rank.
    assert rrf_fuse(dense, lexical)["d/a.md"] < fused["d/a.md"]
