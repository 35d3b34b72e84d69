"""Plain-text tables of the observer's component statuses: the form OpenViking's observer
returns by default and `ov status` reads (bordered, one `|`-separated row per line, a TOTAL
row where there are several)."""

from __future__ import annotations

from collections.abc import Sequence


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in header], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) + 2 for i in range(len(header))]
    rule = "+" + "+".join("-" * w for w in widths) + "+"

    def line(row: list[str]) -> str:
        return "|" + "|".join(cell.center(w) for cell, w in zip(row, widths, strict=True)) + "|"

    return "\n".join([rule, line(cells[0]), rule, *(line(r) for r in cells[1:]), rule])


def metrics_table(metrics: Sequence[tuple[str, object]]) -> str:
    return table(("Metric", "Value"), list(metrics))
