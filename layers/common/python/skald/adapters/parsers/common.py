"""What every parser shares: the bounded Markdown writer, the zip guard for zip-based formats
and Markdown tables."""

from __future__ import annotations

import io
import re
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from skald.domain.text.parsed import ParseLimits


class Unparseable(Exception):
    """A file that cannot be parsed; the message is the reason shown to the user."""


class Truncated(Exception):
    """A cap was reached: the text written so far is kept."""

    def __init__(self, cap: str) -> None:
        super().__init__(cap)
        self.cap = cap


class Writer:
    """Collects a parser's Markdown and enforces the limits: characters as it grows, time at
    every `tick()` (once per page, slide, sheet chunk or chapter)."""

    def __init__(self, limits: ParseLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._deadline = clock() + limits.max_seconds
        self._parts: list[str] = []
        self._chars = 0
        self.meta: dict[str, Any] = {}  # kept even when a cap cuts the text
        self.preview: bytes | None = None
        self.preview_format = "jpeg"

    def add(self, text: str) -> None:
        room = self.limits.max_chars - self._chars
        if len(text) > room:
            self._parts.append(text[: max(room, 0)])
            self._chars = self.limits.max_chars
            raise Truncated(f"text cut at {self.limits.max_chars} characters")
        self._parts.append(text)
        self._chars += len(text)

    def tick(self) -> None:
        if self._clock() > self._deadline:
            raise Truncated(f"time limit of {self.limits.max_seconds:g} s reached")

    def text(self) -> str:
        return "".join(self._parts)


def open_zip(data: bytes, limits: ParseLimits, label: str) -> zipfile.ZipFile:
    """A zip-based file (office formats, EPUB) opened only within the limits: declared sizes
    bound what reading can expand to, so a zip bomb is refused before anything is read."""
    if data[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1":
        raise Unparseable(
            f"password-protected or legacy binary {label} (an OLE container, "
            "not an Office Open XML file)"
        )
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise Unparseable(f"corrupt {label}: not a readable zip archive") from None
    infos = zf.infolist()
    if len(infos) > limits.max_zip_entries:
        raise Unparseable(f"{label} has {len(infos)} parts, more than {limits.max_zip_entries}")
    total = sum(i.file_size for i in infos)
    if total > limits.max_unzipped_bytes:
        raise Unparseable(
            f"{label} expands to {total} bytes, more than {limits.max_unzipped_bytes}"
        )
    if any(i.flag_bits & 0x1 for i in infos):
        raise Unparseable(f"encrypted {label}")
    bad = zf.testzip()
    if bad is not None:
        raise Unparseable(f"corrupt {label}: damaged part {bad}")
    return zf


def cell(value: Any) -> str:
    if value is None:
        return ""
    text = str(value).replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    return re.sub(r"\s+", " ", text).strip()


def table(rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; the first row is the header."""
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    lines = []
    for i, row in enumerate(rows):
        cells = [cell(v) for v in row] + [""] * (width - len(row))
        lines.append("| " + " | ".join(cells) + " |")
        if i == 0:
            lines.append("|" + " --- |" * width)
    return "\n".join(lines) + "\n\n"


def chunked_table(out: Writer, title: str, rows: Iterable[Sequence[Any]], chunk: int = 50) -> int:
    """Writes rows as tables of `chunk` rows, each under its own heading with the header
    repeated, so every indexed section of a long table still names its columns. Returns the
    number of data rows written."""
    header: Sequence[Any] | None = None
    batch: list[Sequence[Any]] = []
    written = 0

    def flush() -> None:
        if header is None or not batch:
            return
        first = written - len(batch) + 1
        out.add(f"## {title} (rows {first}-{written})\n\n")
        out.add(table([header, *batch]))
        batch.clear()

    for row in rows:
        if header is None:
            header = row
            continue
        if written >= out.limits.max_rows:
            flush()
            raise Truncated(f"{title} cut at {out.limits.max_rows} rows")
        batch.append(row)
        written += 1
        if len(batch) == chunk:
            out.tick()
            flush()
    flush()
    if header is not None and written == 0:
        out.add(f"## {title}\n\n" + table([header]))
    return written
