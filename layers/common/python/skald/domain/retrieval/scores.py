"""Score rules every SearchIndex adapter applies the same way (see IndexHit in skald.ports).

- Dense score: the cosine of the query and the record vector, both unit length.
- Lexical score: bm25 / (bm25 + 1), so any BM25 score maps into [0, 1) and keeps its order.
  The idf of a term is Lucene's, over a corpus of at least IDF_MIN_DOCS documents
  (`bm25_idf`), so the scale does not depend on how small the corpus is: one occurrence of a
  query's only term in a document of average length scores about 0.87 whether the account
  holds one document or a thousand; a term found in 10% of a large corpus scores about 0.7,
  in half of it about 0.4. Sums over several terms go higher.
- Hybrid score: normalised reciprocal rank fusion (skald.domain.retrieval.fusion).
- Ties, in every mode, go to the smaller (uri, level, section): a ranking never depends on the
  order records were written in.
"""

from __future__ import annotations

import math
from typing import Protocol, TypeVar

S = TypeVar("S", bound="_Ratio")

# The tie-break of every ranking: (uri, level, section), ascending.
TieKey = tuple[str, int, int]


class _Ratio(Protocol):
    # A float, or a vector of them (a numpy array): the mapping is elementwise.
    def __add__(self: S, other: float, /) -> S: ...

    def __truediv__(self: S, other: S, /) -> S: ...


def lexical_score(bm25: S) -> S:
    """bm25 / (bm25 + 1): a BM25 score (>= 0) mapped into [0, 1), elementwise on arrays."""
    return bm25 / (bm25 + 1.0)


# The smallest corpus an idf is computed over. In a handful of documents, document frequency
# says little about how rare a term is (in a one-document account every term is in every
# document, and FTS5's idf makes it worthless): the corpus is read as if padded with documents
# that do not hold the term. From IDF_MIN_DOCS documents on, the idf is Lucene's exactly.
IDF_MIN_DOCS = 1000


def bm25_idf(n_docs: int, df: int) -> float:
    """The idf of a term found in `df` of `n_docs` documents: ln(1 + (N - df + 0.5) /
    (df + 0.5)) with N = max(n_docs, IDF_MIN_DOCS); always > 0."""
    n = max(n_docs, IDF_MIN_DOCS)
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def tie_key(uri: str, level: int, section: int) -> TieKey:
    """What orders records of equal score."""
    return (uri, int(level), int(section))
