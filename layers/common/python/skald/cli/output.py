"""How the data commands print: `--json` gives the server's result as JSON on stdout; otherwise
one line per item (easy to pipe into grep or cut), styled with Rich on a terminal."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape

# soft_wrap: long URIs stay on one line instead of being folded at the terminal's width.
stdout = Console(soft_wrap=True, highlight=False)
stderr = Console(stderr=True, soft_wrap=True, highlight=False)


def emit(data: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    else:
        render(data)


def line(text: str) -> None:
    stdout.print(text)


def plain(text: str) -> None:
    """Content as-is (no markup, no trailing newline added beyond the text's own)."""
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def error(code: str, message: str) -> None:
    # One line: newlines in a server message would split it.
    flat = " ".join(message.split())
    stderr.print(f"[bold red]error:[/] {escape(code)}: {escape(flat)}")


def _size(n: Any) -> str:
    if not isinstance(n, int):
        return ""
    for unit in ("B", "K", "M", "G"):
        if n < 1024:
            return f"{n}{unit}"
        n //= 1024
    return f"{n}T"


def entries(items: Iterable[Any]) -> None:
    """ls: `d|-  size  modified  uri`, then the abstract when the server gave one."""
    for item in items:
        if isinstance(item, str):
            line(escape(item))
            continue
        is_dir = bool(item.get("isDir"))
        uri = str(item.get("uri", item.get("name", "")))
        kind = "[blue]d[/]" if is_dir else "-"
        shown = f"[bold blue]{escape(uri)}/[/]" if is_dir else escape(uri)
        row = f"{kind} {_size(item.get('size')):>6}  {escape(str(item.get('modTime', '')))}  "
        abstract = " ".join(str(item.get("abstract") or "").split())
        line(row + shown + (f"  [dim]{escape(abstract[:120])}[/]" if abstract else ""))


def tree(root: str, items: Iterable[dict[str, Any]]) -> None:
    """tree: the root, then its entries with `├──` / `└──` guides, like tree(1)."""
    children: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        rel = str(item.get("rel_path") or item.get("name") or "").strip("/")
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        children.setdefault(parent, []).append({**item, "rel_path": rel})
    line(f"[bold blue]{escape(root.rstrip('/'))}/[/]")

    def walk(parent: str, prefix: str) -> None:
        kids = children.get(parent, [])
        for i, item in enumerate(kids):
            last = i == len(kids) - 1
            name = escape(item["rel_path"].rsplit("/", 1)[-1])
            label = f"[bold blue]{name}/[/]" if item.get("isDir") else name
            line(prefix + ("└── " if last else "├── ") + label)
            walk(item["rel_path"], prefix + ("    " if last else "│   "))

    walk("", "")


def hits(result: dict[str, Any]) -> None:
    """find / search (list mode): `score  uri`, then the abstract, grouped by context type."""
    groups = [(k, result.get(k) or []) for k in ("memories", "resources", "skills")]
    if not any(items for _, items in groups):
        line("[dim]no matches[/]")
        return
    for kind, items in groups:
        for hit in items:
            score = hit.get("score")
            shown = f"{score:.3f}" if isinstance(score, int | float) else "  -  "
            abstract = " ".join(str(hit.get("abstract") or "").split())
            line(
                f"{shown}  [dim]{kind[:-1]}[/]  {escape(str(hit.get('uri')))}"
                + (f"  [dim]{escape(abstract[:120])}[/]" if abstract else "")
            )


def context(result: dict[str, Any]) -> None:
    """search --mode context: the rendered block an agent would put in its prompt."""
    plain(str(result.get("rendered") or ""))


def grep_matches(result: dict[str, Any]) -> None:
    for m in result.get("matches") or []:
        line(
            f"[magenta]{escape(str(m.get('uri')))}[/]:[green]{m.get('line')}[/]:"
            f"{escape(str(m.get('content', '')))}"
        )
    if not result.get("matches"):
        line("[dim]no matches[/]")


def uris(result: dict[str, Any]) -> None:
    for uri in result.get("matches") or []:
        line(escape(str(uri)))
    if not result.get("matches"):
        line("[dim]no matches[/]")


def fields(data: dict[str, Any], keys: Iterable[str] | None = None) -> None:
    """`key: value` lines; nested values as compact JSON."""
    for key in keys if keys is not None else data:
        if key not in data:
            continue
        value = data[key]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        line(f"[bold]{escape(key)}[/]: {escape(str(shown))}")


def queues(counters: dict[str, Any]) -> None:
    """status / wait: one line per queue with its counters."""
    for name, c in counters.items():
        if not isinstance(c, dict):
            continue
        line(
            f"[bold]{escape(name):<14}[/] processed={c.get('processed', 0)} "
            f"pending={c.get('pending', 0)} in_progress={c.get('in_progress', 0)} "
            f"errors={c.get('error_count', 0)}"
        )
