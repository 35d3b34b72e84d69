"""`skald add`: upload local files and directories as resources, with a progress bar for the
upload (bytes sent) and one for processing (files summarised and indexed), or --no-wait."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import click
import httpx
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from skald.cli import output as out
from skald.cli.base import State, app, json_option, wants_json
from skald.cli.connect import CliError
from skald.ports import TASK_FINAL, TaskStatus

REMOTE_PREFIXES = ("http://", "https://", "git@", "ssh://", "git://")
FINAL = TASK_FINAL
POLL_S = 0.5


class _CountingStream(httpx.AsyncByteStream):
    """A request body that reports each chunk as it goes out."""

    def __init__(self, inner: httpx.AsyncByteStream, sent: Callable[[int], None]) -> None:
        self._inner = inner
        self._sent = sent

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._sent(len(chunk))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class UploadMeter:
    """An httpx request hook on the SDK's own client: it wraps the temp_upload body so the
    progress bar follows the bytes actually sent (the SDK zips a directory first)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: Any = None

    def start(self, label: str) -> None:
        self.task = self.progress.add_task(f"upload  {label}", total=None)

    async def hook(self, request: httpx.Request) -> None:
        if not request.url.path.endswith("/resources/temp_upload") or self.task is None:
            return
        total = int(request.headers.get("content-length") or 0) or None
        self.progress.update(self.task, total=total, completed=0)
        if isinstance(request.stream, httpx.AsyncByteStream):
            task = self.task
            request.stream = _CountingStream(
                request.stream, lambda n: self.progress.advance(task, n)
            )

    def finish(self) -> None:
        """Fills the bar: it was not advanced when nothing was uploaded (a remote URL)."""
        task = next(t for t in self.progress.tasks if t.id == self.task)
        size = int(task.total or task.completed or 0)
        self.progress.update(self.task, total=size, completed=size)


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=out.stderr,
        disable=not enabled,
        transient=False,
    )


def _check_sources(paths: tuple[str, ...], to: str | None) -> None:
    if to and len(paths) > 1:
        raise CliError("INVALID_ARGUMENT", "--to names one target: add one path at a time")
    for p in paths:
        if not p.startswith(REMOTE_PREFIXES) and not Path(p).exists():
            raise CliError("NOT_FOUND", f"no such file or directory: {p}")


def _await_tasks(
    client: Any, added: list[dict[str, Any]], show: bool, timeout_s: float | None
) -> list[dict[str, Any]]:
    """Polls each add's task until it ends. The bar counts files in finished adds; until the
    first add finishes it pulses (the server reports no progress inside one add)."""
    pending = {a["task_id"]: a for a in added if a.get("task_id")}
    tasks: dict[str, dict[str, Any]] = {}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("files"),
        TimeElapsedColumn(),
        console=out.stderr,
        disable=not show,
    ) as progress:
        bar = progress.add_task("process", total=None)
        while pending:
            for task_id in list(pending):
                task = client.get_task(task_id)
                if task is None:
                    raise CliError("NOT_FOUND", f"task {task_id} not found or expired")
                tasks[task_id] = task
                if task.get("status") in FINAL:
                    pending.pop(task_id)
            ended = [t for t in tasks.values() if t.get("status") in FINAL]
            total = sum(_files(t) for t in tasks.values())
            stages = sorted(
                {
                    str(t.get("stage") or t.get("status"))
                    for t in tasks.values()
                    if t.get("status") not in FINAL
                }
            )
            progress.update(
                bar,
                total=total if ended else None,
                completed=sum(_files(t) for t in ended),
                description="process " + (", ".join(stages) or "done"),
            )
            if not pending:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise CliError(
                    "DEADLINE_EXCEEDED",
                    f"processing not finished after {timeout_s:.0f}s; it goes on "
                    "in the server (`skald wait` waits for it)",
                )
            time.sleep(POLL_S)
    return [tasks[a["task_id"]] for a in added if a.get("task_id") in tasks]


def _files(task: dict[str, Any]) -> int:
    meta, result = task.get("meta") or {}, task.get("result") or {}
    return int(result.get("indexed_files") or meta.get("files") or 0)


@app.command("add")
@click.argument("paths", nargs=-1, required=True)
@click.option("--to", help="Exact target URI (one PATH only), e.g. viking://resources/docs.")
@click.option("--parent", help="Put the resource(s) under this directory URI.")
@click.option("--reason", default="", help="Why this is being added (kept with the resource).")
@click.option("--instruction", default="", help="Processing instruction for the summariser.")
@click.option("--no-wait", is_flag=True, help="Return once uploaded; processing goes on.")
@click.option(
    "--timeout",
    type=float,
    help="Give up waiting for processing after this many seconds (default: never).",
)
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@json_option
@click.pass_obj
def add(
    state: State,
    paths: tuple[str, ...],
    to: str | None,
    parent: str | None,
    reason: str,
    instruction: str,
    no_wait: bool,
    timeout: float | None,
    no_progress: bool,
    as_json: bool,
) -> None:
    """Add local files or directories (or remote URLs) as resources."""
    if to and parent:
        raise CliError("INVALID_ARGUMENT", "--to and --parent exclude each other")
    _check_sources(paths, to)
    options = {k: v for k, v in (("reason", reason), ("instruction", instruction)) if v}
    show = not no_progress
    added: list[dict[str, Any]] = []
    with _progress(show) as progress:
        meter = UploadMeter(progress)
        with state.client(event_hooks={"request": [meter.hook]}) as c:
            for p in paths:
                meter.start(Path(p).name or p)
                result = c.add_resource(
                    p, to=to, parent=parent, wait=False, options=options or None
                )
                meter.finish()
                added.append(result)
    if no_wait:
        out.emit(added, wants_json(state, as_json), _print_added)
        return
    with state.client() as c:
        finished = _await_tasks(c, added, show, timeout)
    failed = [t for t in finished if t.get("status") != TaskStatus.COMPLETED]
    if failed:
        t = failed[0]
        raise CliError(
            "PROCESSING_ERROR", f"{t.get('resource_id')}: {t.get('status')}: {t.get('error')}"
        )
    by_id = {t["task_id"]: t for t in finished}
    for a in added:
        task = by_id.get(str(a.get("task_id")))
        if task is not None:
            a["task"] = task
    out.emit(added, wants_json(state, as_json), _print_added)


def _print_added(added: list[dict[str, Any]]) -> None:
    for a in added:
        task = a.get("task")
        if task is None:
            out.line(
                f"added {escape(str(a.get('root_uri')))}  [dim]task {a.get('task_id')} "
                "(processing; `skald wait`)[/]"
            )
        else:
            files = (task.get("result") or {}).get("indexed_files", 0)
            out.line(
                f"added {escape(str(a.get('root_uri')))}  [dim]{files} file(s) indexed in "
                f"{task.get('processing_seconds', 0)}s[/]"
            )
