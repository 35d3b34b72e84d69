"""`skald session`: open a session, add messages, commit it (memories are extracted in the
background), show it."""

from __future__ import annotations

import sys
import time
from typing import Any

import click
from rich.markup import escape

from skald.cli import output as out
from skald.cli.base import State, app, json_option, wants_json
from skald.cli.connect import CliError
from skald.ports import TASK_FINAL, TaskStatus

FINAL = TASK_FINAL
SHOWN = (
    "session_id",
    "uri",
    "created_at",
    "updated_at",
    "message_count",
    "total_message_count",
    "commit_count",
    "last_commit_at",
    "memories_extracted",
    "llm_token_usage",
    "pending_tokens",
)


@app.group("session")
def session() -> None:
    """Conversations: new, add, commit, show, list."""


@session.command("new")
@click.option("--id", "session_id", help="Use this id (default: generated).")
@json_option
@click.pass_obj
def new(state: State, session_id: str | None, as_json: bool) -> None:
    """Open a session; prints its id."""
    with state.client() as c:
        result = c.create_session(session_id)
    out.emit(
        result, wants_json(state, as_json), lambda r: out.line(escape(str(r.get("session_id"))))
    )


@session.command("add")
@click.argument("session_id")
@click.argument("text", nargs=-1)
@click.option(
    "--role",
    default="user",
    show_default=True,
    help="Who said it: user, assistant, system, tool...",
)
@json_option
@click.pass_obj
def add(state: State, session_id: str, text: tuple[str, ...], role: str, as_json: bool) -> None:
    """Add a message: TEXT (words are joined), or stdin when TEXT is '-' or absent."""
    content = " ".join(text)
    if not text or content == "-":
        content = sys.stdin.read()
    if not content.strip():
        raise CliError("INVALID_ARGUMENT", "the message is empty")
    with state.client() as c:
        result = c.add_message(session_id, role, content)
    out.emit(
        result,
        wants_json(state, as_json),
        lambda r: out.line(
            escape(f"{r.get('session_id')}: {r.get('message_count')} pending message(s)")
        ),
    )


@session.command("commit")
@click.argument("session_id")
@click.option("--wait", is_flag=True, help="Return once memory extraction has finished.")
@json_option
@click.pass_obj
def commit(state: State, session_id: str, wait: bool, as_json: bool) -> None:
    """Archive the pending messages and extract memories from them."""
    timeout_s = state.connection().timeout
    with state.client() as c:
        result = c.commit_session(session_id)
        task_id = result.get("task_id")
        if wait and task_id:
            result["task"] = _await(c, str(task_id), timeout_s)
    task = result.get("task") or {}
    if task and task.get("status") != TaskStatus.COMPLETED:
        raise CliError(
            "PROCESSING_ERROR", f"commit of {session_id}: {task.get('status')}: {task.get('error')}"
        )

    def render(r: dict[str, Any]) -> None:
        if r.get("status") == "skipped":
            out.line(escape(f"{session_id}: nothing to commit ({r.get('reason', 'no messages')})"))
            return
        done = "memories extracted" if r.get("task") else f"extracting (task {task_id})"
        out.line(escape(f"{session_id}: archived to {r.get('archive_uri')}; {done}"))

    out.emit(result, wants_json(state, as_json), render)


def _await(client: Any, task_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    with out.stderr.status("extracting memories"):
        while True:
            task = client.get_task(task_id)
            if task is None:
                raise CliError("NOT_FOUND", f"task {task_id} not found or expired")
            if task.get("status") in FINAL:
                return dict(task)
            if time.monotonic() > deadline:
                raise CliError("DEADLINE_EXCEEDED", f"commit task {task_id} still running")
            time.sleep(0.5)


@session.command("show")
@click.argument("session_id")
@click.option("-m", "--messages", is_flag=True, help="Also print the pending messages.")
@json_option
@click.pass_obj
def show(state: State, session_id: str, messages: bool, as_json: bool) -> None:
    """A session's counters (messages, commits, memories, tokens)."""
    with state.client() as c:
        result = dict(c.get_session(session_id))
        if messages:
            result["messages"] = c.get_session_context(session_id).get("messages", [])

    def render(r: dict[str, Any]) -> None:
        out.fields(r, SHOWN)
        for m in r.get("messages") or []:
            parts = m.get("parts") or []
            text = " ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
            out.line(f"  [bold]{escape(str(m.get('role')))}[/]: {escape(' '.join(text.split()))}")

    out.emit(result, wants_json(state, as_json), render)


@session.command("list")
@json_option
@click.pass_obj
def list_(state: State, as_json: bool) -> None:
    """The caller's sessions."""
    with state.client() as c:
        result = c.list_sessions()

    def render(sessions: list[dict[str, Any]]) -> None:
        for s in sessions:
            out.line(escape(str(s.get("session_id"))))

    out.emit(result, wants_json(state, as_json), render)
