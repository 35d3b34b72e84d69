"""Hybrid rules shared by the index adapters: RRF contributions and the keyword query."""

from __future__ import annotations

from skald.domain.fusion import RRF_BEST, RRF_K, keyword_query, rrf_contribution


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
