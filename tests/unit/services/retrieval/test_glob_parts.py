"""A glob's literal runs may only leave out names its expression does not match."""

from __future__ import annotations

import pytest
import re2

from skald.services.retrieval.matching import glob_parts

NAMES = [
    "a.md",
    "f0123.md",
    "x/f0123.md",
    "x/y/f0123.md",
    "f01.md",
    "[a].md",
    "a[.md",
    "docs/readme.txt",
    "docs/sub/readme.md",
    "café.md",
    "a/b/c",
    "ab",
    "a/b",
    "notes/2024/jan.md",
    "notes/jan.md",
    "x**y.md",
    "weird?name.md",
    "b.md",
    "x\\1\\2y.md",
    "acb",
]
PATTERNS = [
    "*.md",
    "**/*.md",
    "**/f01??.md",
    "**/f0123.md",
    "f01*",
    "[ab].md",
    "[!a].md",
    "a[.md",
    "[a].md",
    "docs/**",
    "docs/**/readme.*",
    "**",
    "a/**/c",
    "caf?.md",
    "notes/**/jan.md",
    "*/*",
    "x\\*\\*y.md",
    "weird?name.md",
    "a?b",
    "**/b/**",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_no_matching_name_lacks_a_literal(pattern: str) -> None:
    expression, literals = glob_parts(pattern)
    regex = re2.compile(expression)
    matched = [n for n in NAMES if regex.fullmatch(n)]
    assert matched, f"no name exercises {pattern!r}"
    for name in matched:
        assert all(part in name for part in literals), (pattern, name, literals)


def test_literal_runs() -> None:
    assert glob_parts("**/f01??.md")[1] == ["f01", ".md"]
    assert glob_parts("docs/**/readme.*")[1] == ["docs/", "readme."]
    assert glob_parts("a[.md")[1] == ["a[.md"]  # no closing bracket: a literal
    assert glob_parts("[ab].md")[1] == [".md"]
    assert glob_parts("**")[1] == []
    assert re2.compile(glob_parts("**/f01??.md")[0]).fullmatch("f0123.md")  # "/" optional
