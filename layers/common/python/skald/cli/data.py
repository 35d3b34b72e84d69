"""Data commands over the viking:// filesystem: browse, read, write, match, retrieve, wait."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from skald.cli import output as out
from skald.cli.base import State, app, json_option, wants_json
from skald.cli.connect import CliError

pass_state = click.pass_obj


@app.command("ls")
@click.argument("uri", default="viking://")
@click.option("-r", "--recursive", is_flag=True, help="List everything below URI.")
@click.option(
    "-a",
    "--all",
    "show_all",
    is_flag=True,
    help="Show hidden entries (.abstract.md, .overview.md, ...).",
)
@click.option("-n", "--limit", default=1000, show_default=True, help="At most this many.")
@json_option
@pass_state
def ls(state: State, uri: str, recursive: bool, show_all: bool, limit: int, as_json: bool) -> None:
    """List a directory: kind, size, modified time, URI and abstract."""
    with state.client() as c:
        items = c.ls(
            uri, recursive=recursive, output="agent", show_all_hidden=show_all, node_limit=limit
        )
    out.emit(items, wants_json(state, as_json), out.entries)


@app.command("tree")
@click.argument("uri", default="viking://resources")
@click.option("-L", "--level", default=3, show_default=True, help="Depth to descend.")
@click.option("-d", "--dirs-only", is_flag=True, help="Directories only.")
@click.option("-a", "--all", "show_all", is_flag=True, help="Show hidden entries.")
@click.option("-n", "--limit", default=1000, show_default=True, help="At most this many.")
@json_option
@pass_state
def tree(
    state: State, uri: str, level: int, dirs_only: bool, show_all: bool, limit: int, as_json: bool
) -> None:
    """Show the tree below a directory."""
    with state.client() as c:
        items = c.tree(
            uri,
            level_limit=level,
            directories_only=dirs_only,
            show_all_hidden=show_all,
            node_limit=limit,
        )
    out.emit(items, wants_json(state, as_json), lambda data: out.tree(uri, data))


@app.command("read")
@click.argument("uri")
@click.option("--offset", default=0, show_default=True, help="First line (0-based).")
@click.option("--limit", default=-1, show_default=True, help="Lines to read (-1: all).")
@click.option("--raw", is_flag=True, help="Keep hidden metadata blocks of memory files.")
@json_option
@pass_state
def read(state: State, uri: str, offset: int, limit: int, raw: bool, as_json: bool) -> None:
    """Print a file's content."""
    with state.client() as c:
        text = (c.read_raw if raw else c.read)(uri, offset=offset, limit=limit)
    out.emit(
        {"uri": uri, "content": text} if wants_json(state, as_json) else text,
        wants_json(state, as_json),
        lambda t: out.plain(str(t)),
    )


@app.command("write")
@click.argument("uri")
@click.argument("content", required=False)
@click.option(
    "-f",
    "--from-file",
    "source",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read the content from this local file ('-' for stdin).",
)
@click.option(
    "--mode",
    type=click.Choice(["replace", "append", "create"]),
    default="replace",
    show_default=True,
)
@click.option("--wait", is_flag=True, help="Return once the file is summarised and indexed.")
@json_option
@pass_state
def write(
    state: State,
    uri: str,
    content: str | None,
    source: Path | None,
    mode: str,
    wait: bool,
    as_json: bool,
) -> None:
    """Write a file: CONTENT, or --from-file, or stdin when CONTENT is '-' or absent."""
    if content == "-":
        content = None if source is None else content
    if content is not None and source is not None:
        raise CliError("INVALID_ARGUMENT", "give CONTENT or --from-file, not both")
    if content is None:
        if source is None or str(source) == "-":
            content = sys.stdin.read()
        else:
            try:
                content = source.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise CliError("INVALID_ARGUMENT", f"cannot read {source}: {exc}") from exc
    with state.client() as c:
        result = c.write(uri, content, mode=mode, wait=wait)
    out.emit(
        result,
        wants_json(state, as_json),
        lambda r: out.line(
            escape(
                f"wrote {r.get('written_bytes', len(content.encode()))} bytes "
                f"to {r.get('uri', uri)}"
            )
        ),
    )


@app.command("rm")
@click.argument("uri")
@click.option("-r", "--recursive", is_flag=True, help="Remove a directory and what it holds.")
@click.option("--wait", is_flag=True, help="Return once the index is cleaned up.")
@json_option
@pass_state
def rm(state: State, uri: str, recursive: bool, wait: bool, as_json: bool) -> None:
    """Remove a file, or a directory with -r."""
    with state.client() as c:
        c.rm(uri, recursive=recursive, wait=wait)
    out.emit(
        {"uri": uri, "removed": True},
        wants_json(state, as_json),
        lambda _: out.line(escape(f"removed {uri}")),
    )


@app.command("mv")
@click.argument("from_uri")
@click.argument("to_uri")
@json_option
@pass_state
def mv(state: State, from_uri: str, to_uri: str, as_json: bool) -> None:
    """Move or rename a file or directory."""
    with state.client() as c:
        c.mv(from_uri, to_uri)
    out.emit(
        {"from": from_uri, "to": to_uri},
        wants_json(state, as_json),
        lambda _: out.line(escape(f"moved {from_uri} -> {to_uri}")),
    )


def _context_types(kinds: tuple[str, ...]) -> dict[str, Any]:
    return {"context_type": list(kinds)} if kinds else {}


@app.command("find")
@click.argument("query")
@click.option("-u", "--uri", "target", default="", help="Only below this URI.")
@click.option("-n", "--limit", default=10, show_default=True)
@click.option(
    "-t",
    "--type",
    "kinds",
    multiple=True,
    type=click.Choice(["memory", "resource", "skill"]),
    help="Context type(s).",
)
@click.option("--threshold", type=float, help="Minimum score.")
@json_option
@pass_state
def find(
    state: State,
    query: str,
    target: str,
    limit: int,
    kinds: tuple[str, ...],
    threshold: float | None,
    as_json: bool,
) -> None:
    """Retrieve by meaning (no session): score, type, URI, abstract."""
    options: dict[str, Any] = _context_types(kinds)
    if threshold is not None:
        options["score_threshold"] = threshold
    with state.client() as c:
        result = c.find(query, target_uri=target, limit=limit, options=options or None)
    out.emit(result, wants_json(state, as_json), out.hits)


@app.command("search")
@click.argument("query")
@click.option("-s", "--session", "session_id", help="Plan the search with this session.")
@click.option("-u", "--uri", "target", default="", help="Only below this URI.")
@click.option("-n", "--limit", default=10, show_default=True)
@click.option(
    "-t",
    "--type",
    "kinds",
    multiple=True,
    type=click.Choice(["memory", "resource", "skill"]),
    help="Context type(s).",
)
@click.option("-k", "--keywords", is_flag=True, help="Keyword (BM25) search.")
@click.option(
    "--context",
    "context_mode",
    is_flag=True,
    help="Context mode: a prompt-ready block within --max-tokens.",
)
@click.option("--max-tokens", type=int, help="Token budget for --context.")
@json_option
@pass_state
def search(
    state: State,
    query: str,
    session_id: str | None,
    target: str,
    limit: int,
    kinds: tuple[str, ...],
    keywords: bool,
    context_mode: bool,
    max_tokens: int | None,
    as_json: bool,
) -> None:
    """Retrieve with intent planning; --context renders a token-budgeted block."""
    if max_tokens is not None and not context_mode:
        raise CliError("INVALID_ARGUMENT", "--max-tokens needs --context")
    options: dict[str, Any] = _context_types(kinds)
    if keywords:
        options["search_type"] = "keywords"
    with state.client() as c:
        if context_mode:
            if max_tokens is not None:
                options["max_tokens"] = max_tokens
            result = c.search_context(
                query,
                session_id=session_id,
                target_uri=target,
                limit=limit,
                options=options or None,
            )
            out.emit(result, wants_json(state, as_json), out.context)
            return
        result = c.search(
            query, session_id=session_id, target_uri=target, limit=limit, options=options or None
        )
    out.emit(result, wants_json(state, as_json), out.hits)


@app.command("grep")
@click.argument("pattern")
@click.argument("uri", default="viking://resources")
@click.option("-i", "--ignore-case", is_flag=True)
@click.option("-n", "--limit", default=256, show_default=True, help="At most this many.")
@json_option
@pass_state
def grep(
    state: State, pattern: str, uri: str, ignore_case: bool, limit: int, as_json: bool
) -> None:
    """Lines matching a regular expression below URI: `uri:line:text`."""
    with state.client() as c:
        result = c.grep(uri, pattern, case_insensitive=ignore_case, node_limit=limit)
    out.emit(result, wants_json(state, as_json), out.grep_matches)


@app.command("glob")
@click.argument("pattern")
@click.argument("uri", default="viking://")
@click.option("-n", "--limit", default=256, show_default=True, help="At most this many.")
@json_option
@pass_state
def glob(state: State, pattern: str, uri: str, limit: int, as_json: bool) -> None:
    """URIs matching a glob pattern such as '**/*.md' below URI."""
    with state.client() as c:
        result = c.glob(pattern, uri=uri, node_limit=limit)
    out.emit(result, wants_json(state, as_json), out.uris)


@app.command("wait")
@json_option
@pass_state
def wait(state: State, as_json: bool) -> None:
    """Block until the background queues have drained; print their counters."""
    with state.client() as c:
        counters = c.wait_processed()
    out.emit(counters, wants_json(state, as_json), out.queues)


@app.command("status")
@json_option
@pass_state
def status(state: State, as_json: bool) -> None:
    """Server version, auth mode, backend, checks and queue counters."""
    conn = state.connection()
    with state.client() as c:
        result = c.get_status()
    if not isinstance(result, dict):
        raise CliError("INTERNAL", f"unexpected status answer: {result!r}")

    def render(r: dict[str, Any]) -> None:
        out.line(f"[bold]server[/]: {escape(conn.url)}")
        out.fields(r, ["version", "auth_mode", "backend", "healthy"])
        checks = r.get("checks") or {}
        out.line("[bold]checks[/]: " + escape(" ".join(f"{k}={v}" for k, v in checks.items())))
        out.queues(r.get("queues") or {})

    out.emit(result, wants_json(state, as_json), render)
