"""Hybrid retrieval rules shared by every SearchIndex adapter and the retrieval service:
reciprocal rank fusion of the dense and BM25 rankings (its depth, the fused order and the
normalised score), and the keyword form of a query.

RRF_K: each list contributes 1 / (RRF_K + rank). The classic k = 60 was tuned for fusing many
long TREC runs; here two lists of a few dozen candidates are fused, and with k = 60 an item at
rank 30 in one list weighs almost as much as rank 1 in the other. k = 10 keeps the top of each
list decisive. On the LoCoMo development split (bench/) it raised hybrid recall@10 in each of the
five conversations (0.672 -> 0.698 overall at the same depth), and the fixture ranking tests
hold. It was chosen on that split, the only one available here: see bench/RESULTS.md.

Stop words: BM25 gives every query term a weight; in a natural-language question ("what did
Melanie paint after the trip?") the function words match most documents and add noise to the
ranking. They are dropped from the keyword side only (the dense side embeds the whole query),
and only when something remains, so a query made of stop words alone still matches.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from skald.domain.retrieval.scores import TieKey

K = TypeVar("K")

RRF_K = 10

# English function words (the common IR list: articles, pronouns, auxiliaries, prepositions,
# conjunctions, question words). Negations are kept out of the keyword side too: BM25 cannot
# apply them anyway.
_STOP_WORDS_TEXT = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it its itself just
me more most my myself no nor not now of off on once only or other our ours ourselves out over
own same she should so some such than that the their theirs them themselves then there these
they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours yourself yourselves s t d ll m re ve
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

_WORD = re.compile(r"[^\W_]+")


def rrf_contribution(rank: int) -> float:
    """What a 1-based rank in one ranking adds to a document's fused score."""
    return 1.0 / (RRF_K + rank)


# The fused score of a document ranked first in both lists: hybrid scores are divided by it so
# they fall in (0, 1].
RRF_BEST = 2.0 / (RRF_K + 1)


def keyword_query(text: str) -> str:
    """The query BM25 sees: `text` without stop words, or `text` itself when only stop words
    (or nothing) would remain."""
    words = _WORD.findall(text)
    kept = [w for w in words if w.lower() not in STOP_WORDS]
    return " ".join(kept) if kept else text


def hybrid_depth(limit: int) -> int:
    """How deep each of the dense and keyword rankings goes before fusion: four times the
    requested hits, at least 50, so a document ranked modestly on both sides still meets the
    other side's candidates."""
    return max(limit * 4, 50)


def rrf_fuse(
    *rankings: Sequence[K], is_summary: Callable[[K], bool] | None = None
) -> dict[K, float]:
    """The fused RRF score of every key found in any ranking (best first in each). Keys keep
    the order they were first seen in; contributions add in ranking order.

    With `is_summary` (directory sidecars, levels 0/1), a file's rank in each list counts
    the files above it only: summaries ranked above a file do not push it down, so the
    fused order of files is the one a corpus without summaries would give (summaries repeat
    their files' words and meaning, and would otherwise cost every file below them). A
    summary keeps its rank among all items."""
    fused: dict[K, float] = {}
    for ranking in rankings:
        files_above = 0
        for rank, key in enumerate(ranking, start=1):
            if is_summary is not None and not is_summary(key):
                files_above += 1
                rank = files_above
            fused[key] = fused.get(key, 0.0) + rrf_contribution(rank)
    return fused


def hybrid_score(fused: float) -> float:
    """A fused RRF score divided by the best possible one: in (0, 1], 1 for rank 1 in both."""
    return min(fused / RRF_BEST, 1.0)


def fused_top(
    fused: Mapping[K, float], tie_key: Callable[[K], TieKey], limit: int
) -> list[tuple[K, float]]:
    """The best `limit` keys of `fused` with their hybrid score; equal fused scores are
    ordered by `tie_key` (see skald.domain.retrieval.scores.tie_key)."""
    order = sorted(fused, key=lambda key: (-fused[key], tie_key(key)))[:limit]
    return [(key, hybrid_score(fused[key])) for key in order]
