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


def on_dead(container: Container, payload: dict[str, Any], error: str) -> None:
    task_id = payload.get("task_id")
    if task_id:
        container.tasks.fail(task_id, error)
