"""Jupyter notebooks to Markdown with nbformat (BSD-3-Clause): Markdown cells as they are, code
cells fenced in the kernel's language, text outputs after them (long ones cut)."""

from __future__ import annotations

import logging
from typing import Any

from skald.adapters.parsers.common import Truncated, Unparseable, Writer
from skald.domain.text.decoding import decode_text

OUTPUT_CHARS = 2000
# nbformat logs a schema complaint for every slightly non-standard notebook it still reads.
logging.getLogger("nbformat").setLevel(logging.CRITICAL)


def parse_notebook(data: bytes, out: Writer, *, name: str) -> None:
    import nbformat

    text = decode_text(data)
    if text is None:
        raise Unparseable("not UTF-8 text")
    try:
        nb = nbformat.reads(text, as_version=4)  # type: ignore[no-untyped-call]
    except Exception as exc:  # nbformat raises several unrelated types for bad input
        raise Unparseable(f"not a Jupyter notebook: {exc}") from None
    meta = nb.get("metadata", {})
    language = (
        meta.get("kernelspec", {}).get("language")
        or meta.get("language_info", {}).get("name")
        or ""
    )
    cells = nb.get("cells", [])
    out.meta.update(cells=len(cells), language=language)
    has_title = any(
        c.get("cell_type") == "markdown" and str(c.get("source", "")).lstrip().startswith("# ")
        for c in cells[:3]
    )
    if not has_title:
        out.add(f"# {name}\n\n")
    for number, nb_cell in enumerate(cells, 1):
        if number > out.limits.max_pages * 10:
            raise Truncated(f"stopped after {out.limits.max_pages * 10} cells")
        if number % 50 == 0:
            out.tick()
        _add_cell(out, nb_cell, language)


def _add_cell(out: Writer, nb_cell: dict[str, Any], language: str) -> None:
    """A Markdown cell as it is; a code cell fenced, with its text outputs."""
    source = str(nb_cell.get("source", "")).strip()
    if nb_cell.get("cell_type") != "code":
        if source:
            out.add(f"{source}\n\n")
        return
    if source:
        out.add(f"```{language}\n{source}\n```\n\n")
    for output in nb_cell.get("outputs", []):
        shown = _output_text(output)
        if shown:
            out.add(f"Output:\n\n```\n{shown}\n```\n\n")


def _output_text(output: dict[str, object]) -> str:
    kind = output.get("output_type")
    text = ""
    if kind == "stream":
        text = str(output.get("text", ""))
    elif kind in ("execute_result", "display_data"):
        data = output.get("data")
        if isinstance(data, dict):
            text = str(data.get("text/markdown") or data.get("text/plain") or "")
    elif kind == "error":
        text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
    text = text.strip().replace("```", "` ` `")
    return text if len(text) <= OUTPUT_CHARS else text[:OUTPUT_CHARS] + " …"
