"""PDF to Markdown with pypdf (BSD-3-Clause, pure Python): one `## Page N` section per page,
the document title as the top heading."""

from __future__ import annotations

import io
import logging

from skald.adapters.parsers.common import Truncated, Unparseable, Writer

# pypdf reports every recoverable defect of a damaged file as a warning log line.
logging.getLogger("pypdf").setLevel(logging.ERROR)


def parse_pdf(data: bytes, out: Writer) -> None:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
    except PdfReadError as exc:
        raise Unparseable(f"corrupt PDF: {exc}") from None
    if reader.is_encrypted:
        try:
            opened = reader.decrypt("")
        except (DependencyError, NotImplementedError, FileNotDecryptedError) as exc:
            raise Unparseable(f"encrypted PDF ({exc})") from None
        if not opened:
            raise Unparseable("encrypted PDF: a password is needed to open it")
    pages = reader.pages
    meta = out.meta
    meta["pages"] = len(pages)
    info = reader.metadata
    title = (info.title or "").strip() if info else ""
    if title:
        meta["title"] = title
        out.add(f"# {title}\n\n")
    found = False
    for number, page in enumerate(pages, 1):
        if number > out.limits.max_pages:
            raise Truncated(f"stopped after {out.limits.max_pages} pages")
        out.tick()
        text = (page.extract_text() or "").strip()
        if text:
            found = True
            out.add(f"## Page {number}\n\n{text}\n\n")
    if not found:
        raise Unparseable("the PDF has no text layer (a scan or images only)")
