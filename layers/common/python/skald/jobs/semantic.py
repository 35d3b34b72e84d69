"""Semantic processing job: index changed files, drop removed ones, refresh sidecars."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from skald.services.semantic import SemanticService
    from skald.services.tasks import TaskService


class SemanticJobServices(Protocol):
    """What a semantic job needs (a Composition offers it)."""

    @property
    def tasks(self) -> TaskService: ...

    @property
    def semantic(self) -> SemanticService: ...


def _run(container: SemanticJobServices, payloads: list[dict[str, Any]]) -> list[Exception | None]:
    """Starts each job's task, processes the jobs together (shared directories refreshed
    once) and completes each task on its own. Per job: its exception, or None (done, or
    cancelled before it started)."""
    failures: list[Exception | None] = [None] * len(payloads)
    todo: list[int] = []
    for i, payload in enumerate(payloads):
        task_id = payload.get("task_id")
        if task_id and not container.tasks.start(task_id, "processing"):
            continue  # cancelled before it started
        todo.append(i)
    outcomes = container.semantic.process_many([payloads[i] for i in todo])
    for i, outcome in zip(todo, outcomes, strict=True):
        if isinstance(outcome, Exception):
            failures[i] = outcome
            continue
        task_id = payloads[i].get("task_id")
        if task_id:
            container.tasks.complete(task_id, outcome)
    return failures


def handle(container: SemanticJobServices, payload: dict[str, Any]) -> None:
    [failure] = _run(container, [payload])
    if failure is not None:
        raise failure


def handle_batch(container: SemanticJobServices,
                 payloads: list[dict[str, Any]]) -> list[str | None]:
    """Several queued jobs in one pass; one error (None = done) per payload."""
    return [None if f is None else f"{type(f).__name__}: {f}" for f in _run(container, payloads)]


def on_dead(container: SemanticJobServices, payload: dict[str, Any], error: str) -> None:
    task_id = payload.get("task_id")
    if task_id:
        container.tasks.fail(task_id, error)
