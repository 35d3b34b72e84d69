"""CSV and TSV to Markdown tables (the standard library's csv module): the header row is
repeated over every chunk of rows, so each indexed section names its columns."""

from __future__ import annotations

import csv
import io

from skald.adapters.parsers.common import Unparseable, Writer, chunked_table
from skald.domain.text.decoding import decode_text


def parse_delimited(data: bytes, out: Writer, *, name: str, tsv: bool) -> None:
    text = decode_text(data)
    if text is None:
        raise Unparseable("not UTF-8 text")
    delimiter = "\t" if tsv else _sniff(text[:8192])
    csv.field_size_limit(1 << 20)
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    stem = name.rsplit(".", 1)[0] or name
    out.add(f"# {stem}\n\n")
    rows = chunked_table(out, stem, (r for r in reader if any(c.strip() for c in r)))
    out.meta.update(rows=rows, delimiter=delimiter)


def _sniff(sample: str) -> str:
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        return ","
