"""Which handler runs which job kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from skald.jobs import memory, semantic
from skald.services.commit_recovery import JOB_RECOVER_COMMITS
from skald.services.processing import JOB_SEMANTIC
from skald.services.sessions import JOB_AUTO_COMMIT, JOB_MEMORY

if TYPE_CHECKING:
    from skald.container import Container

Handler = Callable[["Container", dict[str, Any]], None]
DeadHandler = Callable[["Container", dict[str, Any], str], None]
BatchHandler = Callable[["Container", list[dict[str, Any]]], list[str | None]]

HANDLERS: dict[str, Handler] = {
    JOB_SEMANTIC: semantic.handle,
    JOB_MEMORY: memory.handle_extract,
    JOB_AUTO_COMMIT: memory.handle_auto_commit,
    # sent to the auto-commit queue by a rate schedule (AWS): the half-done commit sweeper
    JOB_RECOVER_COMMITS: memory.handle_recover_commits,
}
# Kinds whose queued jobs run together when several are waiting (one error per job).
BATCH_HANDLERS: dict[str, BatchHandler] = {
    JOB_SEMANTIC: semantic.handle_batch,
}
DEAD_HANDLERS: dict[str, DeadHandler] = {
    JOB_SEMANTIC: semantic.on_dead,
    JOB_MEMORY: memory.on_extract_dead,
}


def run_job(container: Container, kind: str, payload: dict[str, Any]) -> None:
    handler = HANDLERS.get(kind)
    if handler is None:
        raise ValueError(f"unknown job kind '{kind}'")
    handler(container, payload)


def job_died(container: Container, kind: str, payload: dict[str, Any], error: str) -> None:
    dead = DEAD_HANDLERS.get(kind)
    if dead is not None:
        dead(container, payload, error)
