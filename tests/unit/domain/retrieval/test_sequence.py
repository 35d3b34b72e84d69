"""Sequence context: parts of a numbered sequence are ranked with their neighbours."""

from __future__ import annotations

import pytest

from skald.domain.retrieval import sequence
from skald.domain.retrieval.sequence import Part, sequence_part, sequence_scores

DIR = "viking://resources/locomo/conv-1/session_03"


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (f"{DIR}/D3_5.md", Part((DIR, "D3_", "md"), 5)),
        ("viking://resources/book/part-2.md", Part(("viking://resources/book", "part-", "md"), 2)),
        (
            "viking://resources/book/chapter10.md",
            Part(("viking://resources/book", "chapter", "md"), 10),
        ),
        ("viking://resources/book/007.txt", Part(("viking://resources/book", "", "txt"), 7)),
        ("viking://resources/book/notes12", Part(("viking://resources/book", "notes", ""), 12)),
    ],
)
def test_names_ending_in_a_number_are_parts(uri: str, expected: Part) -> None:
    assert sequence_part(uri) == expected


@pytest.mark.parametrize(
    "uri",
    [
        f"{DIR}/.abstract.md",
        f"{DIR}/.overview.md",
        "viking://resources/book/intro.md",
        "viking://resources/book/v2.0-notes.md",
        "viking://resources/logs/1733390000123.md",
        "viking://resources/book/",
    ],
)
def test_other_names_are_not_parts(uri: str) -> None:
    assert sequence_part(uri) is None


def test_a_part_gains_from_its_matching_neighbours() -> None:
    w1, w2 = sequence.NEIGHBOUR_WEIGHTS
    total = 1 + w1 + w2
    cands = [
        (f"{DIR}/D3_5.md", 0.6),
        (f"{DIR}/D3_6.md", 0.8),
        (f"{DIR}/D3_3.md", 0.4),
        (f"{DIR}/D3_9.md", 0.7),
        ("viking://resources/locomo/conv-1/session_04/D3_4.md", 0.9),
    ]
    scores = sequence_scores(cands)
    assert scores is not None
    # D3_5: neighbour D3_6 at distance 1, D3_3 at distance 2 (D3_4 of another directory
    # is no neighbour).
    assert scores[0] == pytest.approx((0.6 + w1 * 0.8 + w2 * 0.4) / total)
    assert scores[1] == pytest.approx((0.8 + w1 * 0.6) / total)
    assert scores[2] == pytest.approx((0.4 + w2 * 0.6) / total)
    assert scores[3] == pytest.approx(0.7 / total)  # isolated: no context
    assert scores[4] == pytest.approx(0.9 / total)
    # The isolated part scoring 0.7 falls below D3_5 scoring 0.6 with two matching neighbours.
    assert scores[0] > scores[3]


def test_summaries_and_plain_files_score_as_parts_without_context() -> None:
    cands = [
        (f"{DIR}/D3_1.md", 0.5),
        (f"{DIR}/D3_2.md", 0.5),
        (f"{DIR}/.abstract.md", 0.9),
        ("viking://resources/intro.md", 0.7),
    ]
    scores = sequence_scores(cands)
    assert scores is not None
    total = 1 + sum(sequence.NEIGHBOUR_WEIGHTS)
    assert scores[2] == pytest.approx(0.9 / total)
    assert scores[3] == pytest.approx(0.7 / total)


def test_scores_are_unchanged_without_any_neighbour() -> None:
    assert (
        sequence_scores(
            [(f"{DIR}/D3_1.md", 0.5), (f"{DIR}/D3_4.md", 0.4), ("viking://resources/a.md", 0.3)]
        )
        is None
    )
    assert sequence_scores([]) is None
