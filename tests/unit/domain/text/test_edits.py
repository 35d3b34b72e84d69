"""Exact string replacement, the rule behind the MCP `edit` tool."""

from __future__ import annotations

import pytest

from skald.domain.errors import InvalidArgument
from skald.domain.text.edits import replace_exact


def test_a_unique_occurrence_is_replaced() -> None:
    assert replace_exact("a = 1\nb = 2\n", "b = 2", "b = 3") == ("a = 1\nb = 3\n", 1)


def test_every_occurrence_on_request_only() -> None:
    with pytest.raises(InvalidArgument) as exc:
        replace_exact("x x x", "x", "y")
    assert exc.value.details == {"occurrences": 3} and "3 times" in exc.value.message
    assert replace_exact("x x x", "x", "y", replace_all=True) == ("y y y", 3)


@pytest.mark.parametrize(
    "text,old,new,words",
    [
        ("abc", "", "x", "must not be empty"),
        ("abc", "b", "b", "identical"),
        ("abc", "B", "x", "not found"),
        ("a\tb", "a b", "x", "not found"),  # whitespace counts
    ],
)
def test_refusals(text: str, old: str, new: str, words: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        replace_exact(text, old, new)
    assert words in exc.value.message
