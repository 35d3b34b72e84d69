"""Score rules every SearchIndex adapter applies the same way (see IndexHit in skald.ports).

- Dense score: the cosine of the query and the record vector, both unit length.
- Lexical score: bm25 / (bm25 + 1), so any BM25 score maps into [0, 1) and keeps its order.
- Hybrid score: normalised reciprocal rank fusion (skald.domain.fusion).
- Ties, in every mode, go to the smaller (uri, level, section): a ranking never depends on the
  order records were written in.
"""

from __future__ import annotations

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


def tie_key(uri: str, level: int, section: int) -> TieKey:
    """What orders records of equal score."""
    return (uri, int(level), int(section))
