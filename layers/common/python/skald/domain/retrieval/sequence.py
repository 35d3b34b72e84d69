"""Sequence context: files whose names end in a number are parts of a sequence, and a part is
ranked with its neighbours' relevance.

`.../session_03/D3_5.md` is part 5 of the sequence `D3_*.md` of its directory; `part-2.md`
and `chapter10.md` are parts 2 and 10 of theirs. Parts of one sequence are consecutive pieces
of one text (turns of a conversation, chapters, pages): a question is often answered across a
boundary, and a part whose neighbours also match is more likely the answer than an isolated
match of a common word.

The score of every candidate becomes

    (own + w1 * best neighbour at distance 1 + w2 * best neighbour at distance 2) / (1 + w1 + w2)

where neighbours are the parts of the same sequence with index +-1 / +-2 found among the
candidates (a missing one scores 0). A candidate that is no part (a plain file, a directory
summary) is scored as a part without context, so neither kind is advantaged, and scores stay
in [0, 1]. Weights 0.5 and 0.25 (halving with distance) were chosen on the LoCoMo dev split
(bench/README.md, ablation); when no candidate has a neighbour among the candidates the
scores are left as they are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# Weight of the best neighbour at distance 1, 2, ... (a neighbour further away adds nothing).
NEIGHBOUR_WEIGHTS: tuple[float, ...] = (0.5, 0.25)

# A name (extension removed) ending in digits: everything before them is the stem. At most 9
# digits: a longer run is an identifier or a timestamp, not a position.
_PART = re.compile(r"(.*\D)?(\d{1,9})")


@dataclass(frozen=True)
class Part:
    """Where a file sits in its sequence: `key` names the sequence (directory, stem and
    extension), `index` its position."""

    key: tuple[str, str, str]
    index: int


def sequence_part(uri: str) -> Part | None:
    """The part a file URI is, or None when its name does not end in a number (directory
    summaries `.abstract.md` / `.overview.md` never do)."""
    directory, sep, name = uri.rstrip("/").rpartition("/")
    if not sep or not name or name.startswith("."):
        return None
    base, dot, ext = name.rpartition(".")
    if not dot or not base:
        base, ext = name, ""
    m = _PART.fullmatch(base)
    if m is None:
        return None
    return Part((directory, m.group(1) or "", ext), int(m.group(2)))


def sequence_scores(candidates: Sequence[tuple[str, float]]) -> list[float] | None:
    """New scores of `candidates` ((uri, score) pairs) with their sequence context, in the
    same order; None when no candidate has a neighbour among them (nothing changes)."""
    weights = NEIGHBOUR_WEIGHTS
    parts = [sequence_part(uri) for uri, _ in candidates]
    best: dict[tuple[tuple[str, str, str], int], float] = {}
    for part, (_, score) in zip(parts, candidates, strict=True):
        if part is not None:
            at = (part.key, part.index)
            best[at] = max(best.get(at, score), score)
    total = 1.0 + sum(weights)
    absent = absent_neighbour_score([score for _, score in candidates])
    out: list[float] = []
    found = False
    for part, (_, score) in zip(parts, candidates, strict=True):
        context = 0.0
        for distance, weight in enumerate(weights, start=1):
            near = absent
            if part is not None:
                near = max(
                    best.get((part.key, part.index - distance), absent),
                    best.get((part.key, part.index + distance), absent),
                )
                found = (
                    found
                    or (part.key, part.index - distance) in best
                    or (part.key, part.index + distance) in best
                )
            context += weight * near
        out.append((score + context) / total)
    return out if found else None


def absent_neighbour_score(scores: Sequence[float]) -> float:
    """What a neighbour missing from the candidates counts as, given the candidates' scores:
    0. Its true score is below every candidate's; counting it as the lowest candidate's (an
    upper bound, kinder to small pools) was measured lower on LoCoMo dev (bench/README.md)."""
    return 0.0
