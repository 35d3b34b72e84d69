"""The caps of a repository fetch: file count and bytes, on a clone and on a forge archive;
links and paths that climb out never become files."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from skald.adapters.fetch.archive import _members, archive_url
from skald.adapters.fetch.git_clone import read_tree
from skald.domain.sources.netguard import FetchFailed, FetchLimits


def test_a_checkout_is_read_without_links_and_metadata(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("x")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("a")
    os.symlink("/etc/passwd", tmp_path / "docs" / "passwd")
    assert read_tree(tmp_path, FetchLimits()) == [("docs/a.md", b"a")]


def test_a_checkout_over_the_caps_is_refused(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"{i}.md").write_text("x" * 10)
    with pytest.raises(FetchFailed, match="more than 2 files") as exc:
        read_tree(tmp_path, FetchLimits(max_files=2))
    assert exc.value.cause == "too_large"
    with pytest.raises(FetchFailed, match="above the limit of 25 bytes"):
        read_tree(tmp_path, FetchLimits(max_bytes=25))


def _zip(entries: dict[str, bytes]) -> zipfile.ZipFile:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return zipfile.ZipFile(io.BytesIO(buf.getvalue()))


def test_a_forge_archive_is_unwrapped_and_capped() -> None:
    zf = _zip(
        {"repo-main/README.md": b"# R", "repo-main/../../evil": b"x", "repo-main/src/a.py": b"pass"}
    )
    assert _members(zf, FetchLimits()) == [("README.md", b"# R"), ("src/a.py", b"pass")]
    bomb = _zip({"repo-main/big.txt": b"0" * 1_000_000})
    with pytest.raises(FetchFailed, match="above the limit"):
        _members(bomb, FetchLimits(max_bytes=1000))


def test_forge_archive_urls() -> None:
    assert (
        archive_url("https://github.com/o/r.git", None)
        == "https://codeload.github.com/o/r/zip/HEAD"
    )
    assert (
        archive_url("https://gitlab.com/g/p.git", "v1")
        == "https://gitlab.com/g/p/-/archive/v1/p-v1.zip"
    )
    assert archive_url("https://git.example.org/t/r.git", None) is None
