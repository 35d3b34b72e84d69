"""bm25_scores gives, bit for bit, what the straightforward per-term loop gives: same
statistics, same formula, same order of additions per row."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from skald.adapters.local.index import bm25
from skald.domain.retrieval.scores import bm25_idf

VOCAB = [f"t{i}" for i in range(40)]


def reference_scores(
    postings: bm25.Postings,
    terms: list[str],
    doclen: npt.NDArray[np.float32],
    stats_mask: npt.NDArray[np.bool_],
    mask: npt.NDArray[np.bool_],
) -> npt.NDArray[np.float64]:
    """BM25 the plain way: one term at a time, added into a per-row accumulator."""
    n = mask.size
    acc = np.zeros(n, dtype=np.float64)
    n_docs = int(stats_mask.sum())
    if n_docs == 0:
        return acc
    avgdl = max(float(doclen[:n][stats_mask].sum()) / n_docs, 1e-9)
    for term in terms:
        rows, tf = postings.get(term)
        if rows.size == 0:
            continue
        df = max(int(stats_mask[rows].sum()), 1)  # rows outside the statistics score as rare
        idf = bm25_idf(n_docs, df)
        sel = mask[rows]
        r = rows[sel]
        f = tf[sel].astype(np.float64)
        acc[r] += (
            idf * f * (bm25.K1 + 1.0) / (f + bm25.K1 * (1.0 - bm25.B + bm25.B * doclen[r] / avgdl))
        )
    return acc


def corpus(
    rng: np.random.Generator, n: int, merged_at: int | None
) -> tuple[bm25.Postings, npt.NDArray[np.float32]]:
    """n documents of Zipf-ish words; postings compacted after `merged_at` documents, so
    terms have postings in both the base and the delta."""
    postings = bm25.Postings()
    doclen = np.zeros(n, dtype=np.float32)
    weights = 1.0 / np.arange(1, len(VOCAB) + 1)
    weights /= weights.sum()
    for row in range(n):
        words = [VOCAB[i] for i in rng.choice(len(VOCAB), size=int(rng.integers(1, 60)), p=weights)]
        terms, tfs, length = bm25.term_counts(" ".join(words), stemming=False)
        postings.add([row], [terms], [tfs])
        doclen[row] = length
        if merged_at is not None and row == merged_at:
            postings = postings.compacted()
    return postings, doclen


def assert_bitwise_equal(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("merged_at", [None, 150])
def test_scores_are_bitwise_the_reference(seed: int, merged_at: int | None) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    postings, doclen = corpus(rng, n, merged_at)
    # The account's live rows: some of the rows, or all of them (one account, no deletes).
    for stats in (rng.random(n) < 0.8, np.ones(n, dtype=np.bool_)):
        narrow = stats & (rng.random(n) < 0.5)  # a filter keeping some of them
        for _ in range(20):
            terms = list(
                dict.fromkeys(rng.choice([*VOCAB, "absent"], size=int(rng.integers(1, 8))))
            )
            for mask in (stats, stats.copy(), narrow, np.zeros(n, dtype=np.bool_)):
                got = bm25.bm25_scores(postings, terms, doclen, stats, mask)
                want = reference_scores(postings, terms, doclen, stats, mask)
                assert_bitwise_equal(got, want)
    stats = np.ones(n, dtype=np.bool_)
    # Scores are nonzero where terms matched, so the equality above was not vacuous.
    assert bm25.bm25_scores(postings, VOCAB[:3], doclen, stats, stats).max() > 0.0


def test_long_documents_and_inexact_lengths_still_match() -> None:
    # Lengths whose float32 sum is inexact: the average comes out as the reference's.
    rng = np.random.default_rng(7)
    postings, doclen = corpus(rng, 300, None)
    doclen[:] = rng.integers(50_000, 65_000, size=300).astype(np.float32) * 1000
    stats = np.ones(300, dtype=np.bool_)
    got = bm25.bm25_scores(postings, VOCAB[:10], doclen, stats, stats)
    assert_bitwise_equal(got, reference_scores(postings, VOCAB[:10], doclen, stats, stats))


def test_no_statistics_rows_or_no_match_scores_zero() -> None:
    rng = np.random.default_rng(3)
    postings, doclen = corpus(rng, 50, None)
    none = np.zeros(50, dtype=np.bool_)
    every = np.ones(50, dtype=np.bool_)
    assert not bm25.bm25_scores(postings, VOCAB[:5], doclen, none, none).any()
    assert not bm25.bm25_scores(postings, ["absent"], doclen, every, every).any()
    assert not bm25.bm25_scores(postings, [], doclen, every, every).any()
    assert bm25.bm25_scores(postings, [], doclen, every, every).shape == (50,)
