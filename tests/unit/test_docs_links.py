"""The README and docs/ link only inside the repository, and every relative link lands: on a
file that exists and, when it names a heading (`page.md#section`), on that heading, as GitHub
renders its anchors. A clone has nothing beside the repository, so a link that climbs out of
it is broken for every reader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:, ...


def _prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks, inline code spans blanked."""
    lines, fence = [], None
    for line in text.splitlines():
        marker = _FENCE.match(line.lstrip())
        if marker:
            if fence is None:
                fence = marker.group(1)[0]
            elif marker.group(1)[0] == fence:
                fence = None
            continue
        if fence is None:
            lines.append(_CODE_SPAN.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation other than `-`
    and `_` removed, spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    return [
        m.group(1)
        for line in _prose_lines(page.read_text(encoding="utf-8"))
        for m in _LINK.finditer(line)
    ]


def problems(page: Path, root: Path = ROOT) -> list[str]:
    out = []
    for target in links(page):
        if _EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root)}: {target}"
        if not dest.is_relative_to(root):
            out.append(f"{where} leaves the repository")
        elif not dest.exists():
            out.append(f"{where} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{where} names no heading of {dest.relative_to(root)}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_land(page: Path) -> None:
    assert problems(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_points_beside_the_repository(page: Path) -> None:
    # Paths to a sibling of the clone, written as text rather than a link, are just as dead.
    assert "../shared" not in page.read_text(encoding="utf-8")


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    assert slug("0. Before the first deploy") == "0-before-the-first-deploy"
    assert slug("The `viking://` tree") == "the-viking-tree"
    assert slug("Packs: export, import, backup, restore") == "packs-export-import-backup-restore"
    (tmp_path / "repo" / "docs").mkdir(parents=True)
    root = (tmp_path / "repo").resolve()
    (root / "docs" / "api.md").write_text("# API\n\n## Envelope and errors\n", encoding="utf-8")
    page = root / "docs" / "probe.md"
    page.write_text(
        "# Probe\n\n[ok](api.md#envelope-and-errors) [self](#probe) [gone](nope.md) "
        "[no heading](api.md#nope) [out](../../elsewhere/x.md) [web](https://example.com/x) "
        "`[code](nope.md)`\n\n```\n[fenced](nope.md)\n```\n",
        encoding="utf-8",
    )
    assert problems(page, root) == [
        "docs/probe.md: nope.md does not exist",
        "docs/probe.md: api.md#nope names no heading of docs/api.md",
        "docs/probe.md: ../../elsewhere/x.md leaves the repository",
    ]


def test_the_readme_commands_come_first() -> None:
    """`.ci/run` and `make test` users read the README's first two commands."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```sh\n(.*?)```", text, re.DOTALL)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert [c for c in commands if c][:2] == ["make serve", "make test"]
