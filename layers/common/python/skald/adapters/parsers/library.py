"""The document parser: bytes and a name (and a content type) in, Markdown text or the reason
there is none out. Each format's library is imported on first use only, so neither an HTTP
cold start nor a worker that never sees that format pays for it."""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Callable

from skald.adapters.parsers.common import Truncated, Unparseable, Writer
from skald.domain.text.decoding import clean_text, decode_text
from skald.domain.text.formats import (
    AUDIO,
    BINARY,
    DOCUMENT,
    IMAGE,
    TEXT,
    VIDEO,
    FileFormat,
    detect,
)
from skald.domain.text.parsed import ParseLimits, ParseOutcome, unparseable

log = logging.getLogger("skald.parsers")

Handler = Callable[[bytes, Writer, str, FileFormat], None]


def _pdf(data: bytes, out: Writer, name: str, fmt: FileFormat) -> None:
    from skald.adapters.parsers.pdf import parse_pdf

    parse_pdf(data, out)


def _docx(data: bytes, out: Writer, name: str, fmt: FileFormat) -> None:
    from skald.adapters.parsers.office import parse_docx

    parse_docx(data, out)


def _pptx(data: bytes, out: Writer, name: str, fmt: FileFormat) -> None:
    from skald.adapters.parsers.office import parse_pptx

    parse_pptx(data, out)


def _xlsx(data: bytes, out: Writer, name: str, fmt: FileFormat) -> None:
    from skald.adapters.parsers.office import parse_xlsx

    parse_xlsx(data, out)


def _delimited(data: bytes, out: Writer, name: str, fmt: FileFormat) -> None:
    from skald.adapters.parsers.delimited import parse_delimited

    parse_delimited(data, out, name=name, tsv=fmt.format == "tsv")


def _html(data: bytes, out: Writer, name: str, fmt: FileFormat) -> None:
    from skald.adapters.parsers.web import parse_html

    parse_html(data, out)


def _epub(data: bytes, out: Writer, name: str, fmt: FileFormat) -> None:
    from skald.adapters.parsers.web import parse_epub

    parse_epub(data, out)


def _notebook(data: bytes, out: Writer, name: str, fmt: FileFormat) -> None:
    from skald.adapters.parsers.notebook import parse_notebook

    parse_notebook(data, out, name=name)


def _media(data: bytes, out: Writer, name: str, fmt: FileFormat) -> None:
    from skald.adapters.parsers.media import parse_media

    parse_media(data, out, name=name, fmt=fmt)


DOCUMENT_HANDLERS: dict[str, Handler] = {
    "pdf": _pdf,
    "docx": _docx,
    "pptx": _pptx,
    "xlsx": _xlsx,
    "csv": _delimited,
    "tsv": _delimited,
    "html": _html,
    "epub": _epub,
    "ipynb": _notebook,
}


class LibraryParsers:
    """Implements the DocumentParser port with well-kept libraries, within `limits`."""

    def __init__(self, limits: ParseLimits | None = None) -> None:
        self.limits = limits or ParseLimits()

    def parse(self, name: str, data: bytes, content_type: str | None = None) -> ParseOutcome:
        fmt = detect(_named(name, content_type), data)
        if fmt.kind == TEXT:
            return ParseOutcome(fmt, clean_text(decode_text(data) or ""))
        if fmt.kind == BINARY:
            return unparseable(fmt, "binary content of no supported format")
        handler = (
            DOCUMENT_HANDLERS.get(fmt.format)
            if fmt.kind == DOCUMENT
            else _media
            if fmt.kind in (IMAGE, AUDIO, VIDEO)
            else None
        )
        if handler is None:
            return unparseable(fmt, f"no parser for {fmt.format or 'this'} files")
        out = Writer(self.limits)
        truncated: str | None = None
        try:
            handler(data, out, name, fmt)
        except Truncated as cut:
            truncated = cut.cap
        except Unparseable as exc:
            return unparseable(fmt, str(exc), **out.meta)
        except Exception as exc:  # any library failure on a damaged file is the file's fault
            log.info("parser for %s failed on %s: %r", fmt.format, name, exc)
            detail = f"{type(exc).__name__}: {exc}"[:200]
            return unparseable(
                fmt, f"corrupt or unsupported {fmt.format.upper()} file ({detail})", **out.meta
            )
        text = clean_text(out.text()).strip()
        if not text:
            return unparseable(fmt, "no text found", **out.meta)
        return ParseOutcome(
            fmt, text + "\n", None, dict(out.meta), truncated, out.preview, out.preview_format
        )


def _named(name: str, content_type: str | None) -> str:
    """The name, with the content type's extension when the name has none."""
    if "." in name.lstrip(".") or not content_type:
        return name
    ext = mimetypes.guess_extension(content_type.split(";")[0].strip())
    return f"{name}{ext}" if ext else name
