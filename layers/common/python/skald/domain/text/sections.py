"""Heading-aware sections of long files: each section is indexed on its own and resolves to its
file, with its line span."""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADING = re.compile(r"^#{1,6}\s+\S")


@dataclass(frozen=True)
class Section:
    index: int  # 0 = the whole file (short files); 1.. = sections of a long file
    line_start: int  # 1-based, inclusive
    line_end: int
    text: str
    heading: str


def split_sections(text: str, max_chars: int) -> list[Section]:
    lines = text.splitlines()
    if len(text) <= max_chars:
        return [Section(0, 1, max(len(lines), 1), text, "")]
    # Cut at headings first, then cut oversize blocks at blank lines, then at any line.
    out: list[Section] = []
    for b_start, b_lines, b_heading in _heading_blocks(lines):
        _cut_block(out, b_start, b_lines, b_heading, max_chars)
    return out or [Section(0, 1, max(len(lines), 1), text, "")]


def _heading_blocks(lines: list[str]) -> list[tuple[int, list[str], str]]:
    """(first line, lines, heading) of the blocks that start at a heading outside a fence."""
    blocks: list[tuple[int, list[str], str]] = []
    current: list[str] = []
    start, heading = 1, ""
    in_fence = False
    for i, line in enumerate(lines, 1):
        if line.strip().startswith("```"):
            in_fence = not in_fence
        if not in_fence and _HEADING.match(line) and current:
            blocks.append((start, current, heading))
            start, current = i, []
        if not in_fence and _HEADING.match(line):
            heading = line.lstrip("#").strip()
        current.append(line)
    if current:
        blocks.append((start, current, heading))
    return blocks


def _cut_block(
    out: list[Section], b_start: int, b_lines: list[str], b_heading: str, max_chars: int
) -> None:
    """Appends the block to `out` in sections of about `max_chars`, cut at a blank line, or
    at any line once a section is half as long again."""
    chunk: list[str] = []
    c_start = b_start
    size = 0
    for offset, line in enumerate(b_lines):
        over = size + len(line) + 1 > max_chars and chunk
        if over and (not line.strip() or size + len(line) + 1 > max_chars * 1.5):
            out.append(_section(len(out) + 1, c_start, chunk, b_heading))
            chunk, size, c_start = [], 0, b_start + offset
        chunk.append(line)
        size += len(line) + 1
    if chunk and any(s.strip() for s in chunk):
        out.append(_section(len(out) + 1, c_start, chunk, b_heading))


def _section(index: int, start: int, lines: list[str], heading: str) -> Section:
    return Section(index, start, start + len(lines) - 1, "\n".join(lines), heading)
