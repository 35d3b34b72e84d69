"""grep's whole-file prefilter may let a file through that no line matches, never the reverse:
checked against the per-line search it stands in front of."""

from __future__ import annotations

import pytest

from skald.services.matching import compile_regex, file_prefilter

TEXTS = [
    "alpha\nfoo bar\nomega\n",
    "first\r\nfoo\r\nlast",
    "one\u2028foo two\rthree",
    "no match here\n",
    "foo",
    "",
]
PATTERNS = [r"foo", r"^foo", r"foo$", r"\Afoo", r"foo\z", r"(?-m)^foo", r"(?i)^FOO",
            r"[^x]foo", r"\bfoo\b", r"^$", r"o\s*$"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_no_file_is_skipped_when_a_line_matches(pattern: str) -> None:
    may_match = file_prefilter(pattern, False)
    line_regex = compile_regex(pattern, False)
    for text in TEXTS:
        if any(line_regex.search(line) for line in text.splitlines()):
            assert may_match(text), (pattern, text)


def test_files_without_a_match_are_skipped() -> None:
    assert not file_prefilter("foo", False)("alpha\nomega\n")
    assert not file_prefilter("^foo", False)("alpha\nomega\n")
    # A whole-text anchor lets every file through to the per-line pass.
    assert file_prefilter(r"\Afoo", False)("alpha\nomega\n")
