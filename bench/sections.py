"""Sections of a results file: each benchmark writes its own, between HTML comment markers
(invisible in rendered Markdown), and leaves the rest of the file alone. Standard library only,
so the tests can check it without the benchmarks' dependencies."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, name: str, text: str, *, keep_previous: bool = False) -> None:
    """Puts `text` between `<!-- name:start -->` and `<!-- name:end -->` in `path`, appended
    when the file has no such section. Nothing else in the file changes: other benchmarks'
    sections, and the history of earlier runs kept around them, stay as they are. With
    `keep_previous`, the section's former content (without its heading) goes right below the
    new one, so a rerun adds to the history instead of erasing a run."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    body = text.strip("\n")
    section = f"{start}\n{body}\n{end}"
    old = path.read_text() if path.exists() else ""
    if start in old and end in old.split(start, 1)[1]:
        head, rest = old.split(start, 1)
        previous, tail = rest.split(end, 1)
        lines = previous.strip("\n").splitlines()
        kept = "\n".join(lines[1:] if lines and lines[0].startswith("#") else lines).strip()
        if keep_previous and kept:
            section += "\n\nThe run this section showed before the one above, as it was:\n\n" + kept
        new = head + section + tail
    else:
        new = (old.rstrip("\n") + "\n\n" if old.strip() else "") + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
