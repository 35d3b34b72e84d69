"""What parsing a file gives (Markdown text, or the reason there is none, plus metadata) and how
it is kept: a hidden JSON sidecar `.<name>.parsed.json` beside the file, stamped with the
sha256 of the bytes it came from, so a stale one is never used."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skald.domain.text.decoding import clean_text
from skald.domain.text.formats import BINARY, DOCUMENT, FileFormat

EXTRACTED = "extracted"
UNPARSEABLE = "unparseable"
SKIPPED = "binary"  # a binary file of no known format: stored, never indexed
SIDECAR_VERSION = 1


@dataclass(frozen=True)
class ParseLimits:
    """Bounds on one file's parsing: whatever hits a cap is cut there and marked truncated."""

    max_seconds: float = 30.0
    max_pages: int = 500  # PDF pages, slides, sheets, chapters, notebook cells / 10
    max_rows: int = 2000  # rows of a sheet or a CSV
    max_chars: int = 2_000_000  # extracted Markdown
    max_unzipped_bytes: int = 256 * 1024 * 1024  # office files, EPUB: a zip bomb stops here
    max_zip_entries: int = 10_000
    max_pixels: int = 200_000_000  # larger images are described from their header only


@dataclass(frozen=True)
class ParseOutcome:
    """Markdown `text` (None when there is none, with `reason`), metadata and, for images, a
    small `preview` a vision model can caption (never stored)."""

    format: FileFormat
    text: str | None = None
    reason: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    truncated: str | None = None  # the cap that cut the text
    preview: bytes | None = None
    preview_format: str = "jpeg"

    @property
    def status(self) -> str:
        if self.text is not None:
            return EXTRACTED
        return SKIPPED if self.format.kind == BINARY else UNPARSEABLE


def unparseable(fmt: FileFormat, reason: str, **meta: Any) -> ParseOutcome:
    return ParseOutcome(fmt, None, reason, meta)


@dataclass(frozen=True)
class StoredParse:
    sha256: str
    etag: str  # of the blob it was parsed from: `stat` checks freshness without reading it
    kind: str
    format: str
    status: str
    text: str | None
    reason: str | None
    meta: dict[str, Any]
    truncated: str | None

    def view(self) -> dict[str, Any]:
        """What `stat` shows of it."""
        out: dict[str, Any] = {"kind": self.kind, "format": self.format, "status": self.status}
        if self.reason:
            out["reason"] = self.reason
        if self.truncated:
            out["truncated"] = self.truncated
        out.update({k: v for k, v in self.meta.items() if k != "caption"})
        return out


def restamp(raw: bytes, etag: str) -> bytes:
    """The same sidecar for a blob with equal content under a new etag (a copy)."""
    d = json.loads(raw)
    d["etag"] = etag
    return json.dumps(d, ensure_ascii=False).encode("utf-8")


def sidecar_name(name: str) -> str:
    return f".{name}.parsed.json"


def encode(outcome: ParseOutcome, sha256: str, etag: str) -> bytes:
    text = clean_text(outcome.text) if outcome.text is not None else None
    return json.dumps(
        {
            "version": SIDECAR_VERSION,
            "sha256": sha256,
            "etag": etag,
            "kind": outcome.format.kind,
            "format": outcome.format.format,
            "status": outcome.status,
            "text": text,
            "reason": outcome.reason,
            "meta": dict(outcome.meta),
            "truncated": outcome.truncated,
        },
        ensure_ascii=False,
    ).encode("utf-8")


def decode(raw: bytes) -> StoredParse | None:
    """None for anything but a sidecar of this version (it is then parsed again)."""
    try:
        d = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(d, dict) or d.get("version") != SIDECAR_VERSION:
        return None
    text = d.get("text")
    return StoredParse(
        str(d.get("sha256", "")),
        str(d.get("etag", "")),
        str(d.get("kind", BINARY)),
        str(d.get("format", "")),
        str(d.get("status", SKIPPED)),
        text if isinstance(text, str) else None,
        str(d["reason"]) if d.get("reason") else None,
        d["meta"] if isinstance(d.get("meta"), dict) else {},
        str(d["truncated"]) if d.get("truncated") else None,
    )


def describe(name: str, stored: StoredParse | None, size: int) -> str:
    """A one-line account of a file that has no text of its own (read, listings)."""
    what = _label(stored)
    if stored is None:
        return (
            f"[{name}: {what}, {size} bytes; its text is not extracted yet. "
            "content/download returns the original]"
        )
    if stored.status == UNPARSEABLE:
        return (
            f"[{name}: {what}, {size} bytes; it could not be parsed: {stored.reason}. "
            "content/download returns the original]"
        )
    return (
        f"[{name}: {what}, {size} bytes; binary content is not shown. "
        "content/download returns the original]"
    )


def _label(stored: StoredParse | None) -> str:
    if stored is None:
        return "file"
    fmt = stored.format.upper()
    if stored.kind == DOCUMENT:
        return f"{fmt} document"
    if stored.kind == BINARY:
        return f"binary file ({fmt})" if fmt else "binary file"
    return f"{fmt} {stored.kind}"


def unparseable_abstract(stored: StoredParse) -> str:
    """The abstract a directory listing shows for a file with no text."""
    if stored.status == UNPARSEABLE:
        return f"{_label(stored)}; not parsed: {stored.reason}"
    return _label(stored)
