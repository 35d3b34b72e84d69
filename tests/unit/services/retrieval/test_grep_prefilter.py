"""grep's whole-file prefilter may let a file through that no line matches, never the reverse:
checked against the per-line search it stands in front of, over the text grep searches (the
bytes decoded, bad bytes as U+FFFD, a memory file's trailer stripped)."""

from __future__ import annotations

import pytest

from skald.domain.text.memoryfile import strip_memory_fields, with_memory_fields
from skald.services.retrieval.matching import compile_regex, file_prefilter

TEXTS = [
    b"alpha\nfoo bar\nomega\n",
    b"first\r\nfoo\r\nlast",
    "one\u2028foo two\rthree".encode(),
    "one\x85foo".encode(),
    b"no match here\n",
    b"foo",
    b"",
    b"a\n\nfoo\n",
    "caf\u00e9 foo\nna\u00efve\n".encode(),  # non-ASCII, valid UTF-8
    b"caf\xe9 foo\n\xff\xfe\n",  # not UTF-8: decoded with U+FFFD
    "\ufeffFOO at the start".encode(),
    with_memory_fields("a memory about foo", {"category": "events"}).encode(),
    b'ends in foo<!-- MEMORY_FIELDS\n{"a": 1}\n-->',  # the trailer cuts its line
    "\u212aelvin and foo bar".encode(),  # the Kelvin sign: `k` folds to it
    b"\xe2foo bar\xc3",  # bad bytes around a literal
]
PATTERNS = [
    r"foo",
    r"^foo",
    r"foo$",
    r"\Afoo",
    r"foo\z",
    r"(?-m)^foo",
    r"(?i)^FOO",
    r"[^x]foo",
    r"\bfoo\b",
    r"^$",
    r"o\s*$",
    r"caf.",
    r"na.ve$",
    "\ufffd",
    "(?i)CAF\u00c9",
    r"^\x{FEFF}?foo",
    r"ry about foo$",
    # literals, searched as bytes
    "foo bar",
    "FOO at",
    "elvin and",
    "caf\u00e9 foo",
    "\u212aelvin",
]


def searched_lines(data: bytes) -> list[str]:
    return strip_memory_fields(data.decode("utf-8", errors="replace")).splitlines()


@pytest.mark.parametrize("case_insensitive", [False, True])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_no_file_is_skipped_when_a_line_matches(pattern: str, case_insensitive: bool) -> None:
    may_match = file_prefilter(pattern, case_insensitive)
    line_regex = compile_regex(pattern, case_insensitive)
    matched = 0
    for data in TEXTS:
        if any(line_regex.search(line) for line in searched_lines(data)):
            matched += 1
            assert may_match(data), (pattern, data)
    assert matched, f"no text exercises {pattern!r}"


def test_files_without_a_match_are_skipped() -> None:
    assert not file_prefilter("foo", False)(b"alpha\nomega\n")
    assert not file_prefilter("^foo", False)(b"alpha\nomega\n")
    assert not file_prefilter("caf\u00e9", False)("cafe na\u00efve\n".encode())
    assert not file_prefilter("foo", False)(b"caf\xe9 bar\n")  # not UTF-8 either
    # A whole-text anchor lets every file through to the per-line pass.
    assert file_prefilter(r"\Afoo", False)(b"alpha\nomega\n")
    # So does an anchored pattern in a file with a memory trailer.
    assert file_prefilter("^foo", False)(with_memory_fields("bar", {"category": "events"}).encode())


def test_literals_fold_case_as_the_regex_does() -> None:
    assert file_prefilter("kelvin", True)("\u212aelvin".encode())
    assert file_prefilter("\u212aELVIN", True)(b"kelvin")
    assert file_prefilter("KELVIN", True)(b"a kelvin")
    assert not file_prefilter("kelvin", False)(b"a Kelvin")
    assert not file_prefilter("foo bar", True)(b"foo  bar\nfoo\nbar")
    assert not file_prefilter("caf\u00e9", True)(b"caf\xe9")  # Latin-1, not UTF-8
