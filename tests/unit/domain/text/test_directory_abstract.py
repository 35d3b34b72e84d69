"""A directory's L0 without an LLM (domain/text/outline.py): what it holds, counted over every
child, then the first listed child's abstract."""

from __future__ import annotations

from skald.domain.text.outline import directory_abstract


def test_counts_files_and_folders_with_plurals() -> None:
    assert directory_abstract("docs", 2, 38, []) == "docs: 38 files and 2 folders"
    assert directory_abstract("docs", 1, 1, []) == "docs: 1 file and 1 folder"
    assert directory_abstract("docs", 3, 0, []) == "docs: 3 folders"
    assert directory_abstract("docs", 0, 0, []) == "docs: empty"


def test_the_first_listed_child_with_an_abstract_follows() -> None:
    lines = ["- a.md", "- b.md: Notes on the release.", "- c/: Other notes."]
    assert (
        directory_abstract("docs", 1, 2, lines)
        == "docs: 2 files and 1 folder. Notes on the release."
    )


def test_the_counts_are_the_callers_not_the_listings() -> None:
    # 32 listed lines (a sample) of 100 files: the abstract says 100
    lines = [f"- n{i:02d}.md: Note {i}." for i in range(32)]
    assert directory_abstract("l0000", 0, 100, lines) == "l0000: 100 files. Note 0."
