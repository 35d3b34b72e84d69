"""Semantic worker job: index changed files, drop removed ones, refresh sidecars.

A job that runs short of time (the deadline of jobs/deadline.py) hands the rest of its work
to a new job on the same queue, under the same task: a folder larger than one Lambda
invocation can index is indexed over several. The job that finishes completes the task with
the totals of the whole change.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from skald.catalog import JOB_SEMANTIC, QUEUE_SEMANTIC
from skald.domain.errors import QuotaExceeded
from skald.jobs.deadline import current_deadline, current_slice
from skald.jobs.registry import JobHandlers

if TYPE_CHECKING:
    from skald.ports import JobQueue
    from skald.services.ingest.semantic import SemanticService
    from skald.services.tasks import TaskService

log = logging.getLogger("skald.jobs.semantic")


class SemanticJobServices(Protocol):
    """What a semantic job needs (a Composition offers it)."""

    @property
    def tasks(self) -> TaskService: ...

    @property
    def semantic(self) -> SemanticService: ...

    @property
    def queue(self) -> JobQueue: ...


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
    from skald.services.ingest.semantic import Continuation

    outcomes = container.semantic.process_many(
        [payloads[i] for i in todo], deadline=current_deadline(), slice_s=current_slice()
    )
    for i, outcome in zip(todo, outcomes, strict=True):
        task_id = payloads[i].get("task_id")
        if isinstance(outcome, QuotaExceeded) and task_id:
            # A plan limit: retrying cannot help before it resets or is raised.
            container.tasks.fail(task_id, f"{outcome.code}: {outcome}")
            continue
        if isinstance(outcome, Exception):
            failures[i] = outcome
            continue
        if isinstance(outcome, Continuation):
            try:
                _hand_on(container, task_id, outcome.payload)
            except Exception as exc:  # retried from its start: re-indexing is harmless
                failures[i] = exc
            continue
        if task_id:
            container.tasks.complete(task_id, outcome)
    return failures


def _hand_on(container: SemanticJobServices, task_id: Any, payload: dict[str, Any]) -> None:
    """Queues the rest of a job (any worker may take it) and records the progress so far;
    the task stays running until the job that finishes completes it."""
    container.queue.enqueue(QUEUE_SEMANTIC, JOB_SEMANTIC, payload)
    log.info("semantic job continues in a new job: %d files left", len(payload.get("written", [])))
    if task_id:
        container.tasks.progress(str(task_id), payload.get("so_far", {}))


def handle(container: SemanticJobServices, payload: dict[str, Any]) -> None:
    [failure] = _run(container, [payload])
    if failure is not None:
        raise failure


def handle_batch(
    container: SemanticJobServices, payloads: list[dict[str, Any]]
) -> list[str | None]:
    """Several queued jobs in one pass; one error (None = done) per payload."""
    return [None if f is None else f"{type(f).__name__}: {f}" for f in _run(container, payloads)]


def on_dead(container: SemanticJobServices, payload: dict[str, Any], error: str) -> None:
    task_id = payload.get("task_id")
    if task_id:
        container.tasks.fail(task_id, error)


JOBS = {JOB_SEMANTIC: JobHandlers(handle, batch=handle_batch, dead=on_dead)}
