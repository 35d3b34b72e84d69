"""Office Open XML to Markdown: DOCX with python-docx, PPTX with python-pptx, XLSX with openpyxl
(all MIT). Headings, lists and tables are kept, so sections and outlines follow the document."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from typing import Any

from skald.adapters.parsers.common import Truncated, Writer, chunked_table, open_zip, table

_HEADING_STYLE = re.compile(r"^heading\s*([1-6])$", re.IGNORECASE)


def parse_docx(data: bytes, out: Writer) -> None:
    import docx
    from docx.table import Table

    open_zip(data, out.limits, "DOCX document").close()
    document = docx.Document(io.BytesIO(data))
    title = (document.core_properties.title or "").strip()
    if title:
        out.meta["title"] = title
        out.add(f"# {title}\n\n")
    paragraphs = tables = 0
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            tables += 1
            out.tick()
            out.add(table([[c.text for c in row.cells] for row in block.rows]))
            continue
        text = block.text.strip()
        if not text:
            continue
        paragraphs += 1
        style = (block.style.name if block.style is not None else "") or ""
        match = _HEADING_STYLE.match(style)
        if match:
            out.add(f"{'#' * int(match.group(1))} {text}\n\n")
        elif style.lower() == "title":
            out.add(f"# {text}\n\n")
        elif style.lower().startswith("list"):
            out.add(f"- {text}\n")
        else:
            out.add(f"{text}\n\n")
        if paragraphs % 200 == 0:
            out.tick()
    out.meta.update(paragraphs=paragraphs, tables=tables)


def parse_pptx(data: bytes, out: Writer) -> None:
    from pptx import Presentation

    open_zip(data, out.limits, "PPTX presentation").close()
    deck = Presentation(io.BytesIO(data))
    slides = list(deck.slides)
    out.meta["slides"] = len(slides)
    title = (deck.core_properties.title or "").strip()
    if title:
        out.meta["title"] = title
        out.add(f"# {title}\n\n")
    for number, slide in enumerate(slides, 1):
        if number > out.limits.max_pages:
            raise Truncated(f"stopped after {out.limits.max_pages} slides")
        out.tick()
        heading = slide.shapes.title
        name = heading.text_frame.text.strip() if heading is not None else ""
        out.add(f"## Slide {number}: {name}\n\n" if name else f"## Slide {number}\n\n")
        for shape in _shapes(slide.shapes):
            if heading is None or shape.shape_id != heading.shape_id:
                _add_shape(out, shape)
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            text = notes.text.strip() if notes is not None else ""
            if text:
                out.add(f"Notes: {text}\n\n")


def _add_shape(out: Writer, shape: Any) -> None:
    """A table as a table, a text frame as a list of its paragraphs (indented by level)."""
    if getattr(shape, "has_table", False) and shape.has_table:
        out.add(table([[c.text for c in row.cells] for row in shape.table.rows]))
    elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        for para in shape.text_frame.paragraphs:
            text = "".join(run.text for run in para.runs).strip()
            if text:
                out.add(f"{'  ' * para.level}- {text}\n")
        out.add("\n")


def _shapes(shapes: Any) -> Iterator[Any]:
    for shape in shapes:
        if hasattr(shape, "shapes"):  # a group: its members in order
            yield from _shapes(shape.shapes)
        else:
            yield shape


def parse_xlsx(data: bytes, out: Writer) -> None:
    import openpyxl

    open_zip(data, out.limits, "XLSX workbook").close()
    # read_only streams rows; data_only gives the values cached for formulas.
    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sheets = book.worksheets
        out.meta["sheets"] = [ws.title for ws in sheets]
        for number, sheet in enumerate(sheets, 1):
            if number > out.limits.max_pages:
                raise Truncated(f"stopped after {out.limits.max_pages} sheets")
            out.tick()
            out.add(f"# {sheet.title}\n\n")
            chunked_table(out, sheet.title, _rows(sheet.iter_rows(values_only=True)))
    finally:
        book.close()


def _rows(rows: Iterator[Sequence[Any]]) -> Iterator[Sequence[Any]]:
    """Non-empty rows without their trailing empty cells."""
    for row in rows:
        values = list(row)
        while values and (values[-1] is None or values[-1] == ""):
            values.pop()
        if values:
            yield values
