"""Semantic processing job: index changed files, drop removed ones, refresh sidecars."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skald.container import Container


def handle(container: Container, payload: dict[str, Any]) -> None:
    task_id = payload.get("task_id")
    if task_id and not container.tasks.start(task_id, "processing"):
        return  # cancelled before it started
    result = container.semantic.process(payload)
    if task_id:
        container.tasks.complete(task_id, result)


def handle_batch(container: Container, payloads: list[dict[str, Any]]) -> list[str | None]:
    """Several queued jobs in one pass (shared directories refreshed once); each task completes
    or stays for a retry on its own. One error (None = done) per payload."""
    errors: list[str | None] = [None] * len(payloads)
    todo: list[int] = []
    for i, payload in enumerate(payloads):
        task_id = payload.get("task_id")
        if task_id and not container.tasks.start(task_id, "processing"):
            continue  # cancelled before it started
        todo.append(i)
    outcomes = container.semantic.process_many([payloads[i] for i in todo])
    for i, outcome in zip(todo, outcomes, strict=True):
        if isinstance(outcome, Exception):
            errors[i] = f"{type(outcome).__name__}: {outcome}"
            continue
        task_id = payloads[i].get("task_id")
        if task_id:
            container.tasks.complete(task_id, outcome)
    return errors


def on_dead(container: Container, payload: dict[str, Any], error: str) -> None:
    task_id = payload.get("task_id")
    if task_id:
        container.tasks.fail(task_id, error)
