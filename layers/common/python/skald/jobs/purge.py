"""Purge worker jobs: remove what a deleted user or account owned; the sweep of lost purges."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from skald.catalog import JOB_PURGE, JOB_RESUME_PURGES, QUEUE_PURGE
from skald.jobs.deadline import current_deadline
from skald.jobs.registry import JobHandlers

if TYPE_CHECKING:
    from skald.ports import JobQueue
    from skald.services.tasks import TaskService
    from skald.services.tenancy import TenantDeletion, TenantPurge

log = logging.getLogger("skald.jobs.purge")


class PurgeJobServices(Protocol):
    @property
    def tenant_purge(self) -> TenantPurge: ...

    @property
    def tenant_deletion(self) -> TenantDeletion: ...

    @property
    def tasks(self) -> TaskService: ...

    @property
    def queue(self) -> JobQueue: ...


def handle(container: PurgeJobServices, payload: dict[str, Any]) -> None:
    if not container.tenant_purge.run(payload, current_deadline()):
        # Short of time: the rest in a new job, from the step reached (deduplicated on it: a
        # redelivered job short of time at the same step queues the rest once).
        container.queue.enqueue(
            QUEUE_PURGE,
            JOB_PURGE,
            payload,
            dedup_key=f"{payload['task_id']}#{payload.get('step', 0)}",
        )
        log.info("purge of %s continues in a new job", payload.get("account"))


def on_dead(container: PurgeJobServices, payload: dict[str, Any], error: str) -> None:
    """Out of attempts: the task says so; the purge sweep (or the next DELETE) starts a new
    purge of the same tombstone."""
    task_id = payload.get("task_id")
    if task_id:
        container.tasks.abandon(str(task_id), f"the purge failed: {error}")


def handle_resume(container: PurgeJobServices, payload: dict[str, Any]) -> None:
    resumed = container.tenant_deletion.resume()
    if resumed:
        log.info("re-queued %d purge(s)", resumed)


JOBS = {
    JOB_PURGE: JobHandlers(handle, dead=on_dead),
    JOB_RESUME_PURGES: JobHandlers(handle_resume),
}
