"""Which handler runs which job kind. Each worker's job module, skald/jobs/<worker>.py (its
one name), declares `JOBS = {kind: JobHandlers(...)}` with its handlers as symbols; a kind's
worker is the catalogue's, and only that worker's module is imported (a worker Lambda loads its
own services, not the others').

A handler takes the services of the entry point running it (a Composition, or anything
offering what that handler's module asks for) and the job's payload. A kind of an earlier
release (catalog.KIND_ALIASES) runs as the kind it became.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

from skald import catalog
from skald.domain.access.call_context import tenant_scope
from skald.services.metering.jobs import metered_job

Handler = Callable[[Any, dict[str, Any]], None]
DeadHandler = Callable[[Any, dict[str, Any], str], None]
BatchHandler = Callable[[Any, list[dict[str, Any]]], list[str | None]]
F = TypeVar("F")
log = logging.getLogger("skald.jobs")


@dataclass(frozen=True)
class JobHandlers:
    """What runs a job kind: its handler; a batch handler when jobs waiting together run in
    one pass (one error, or None, per payload); a dead handler for a job out of attempts."""

    handle: Handler
    batch: BatchHandler | None = None
    dead: DeadHandler | None = None


def worker_jobs(worker: str) -> Mapping[str, JobHandlers]:
    """The handlers of catalogue worker `worker`: the JOBS of skald/jobs/<worker>.py."""
    module = importlib.import_module(f"{__package__}.{worker}")
    jobs: Mapping[str, JobHandlers] = module.JOBS
    return jobs


def handlers_of(kind: str) -> JobHandlers | None:
    """The handlers of `kind` (or of the kind it became), from its worker's job module."""
    job = catalog.job(kind)
    return None if job is None else worker_jobs(job.queue).get(job.kind)


class HandlerTable(MutableMapping[str, F]):
    """kind -> one of its handlers, from its worker's job module on first lookup. Entries set
    by hand (tests: a failing kind) live beside those and go away with `del`."""

    def __init__(self, pick: Callable[[JobHandlers], F | None]) -> None:
        self._pick = pick
        self._resolved: dict[str, F] = {}
        self._extra: dict[str, F] = {}

    def __getitem__(self, kind: str) -> F:
        kind = catalog.current_kind(kind)
        if kind in self._extra:
            return self._extra[kind]
        if kind not in self._resolved:
            found = handlers_of(kind)
            handler = None if found is None else self._pick(found)
            if handler is None:
                raise KeyError(kind)
            self._resolved[kind] = handler
        return self._resolved[kind]

    def __setitem__(self, kind: str, handler: F) -> None:
        self._extra[kind] = handler

    def __delitem__(self, kind: str) -> None:
        del self._extra[kind]

    def __iter__(self) -> Iterator[str]:
        kinds = [
            j.kind
            for j in catalog.JOBS
            if j.kind in self._extra
            or ((found := handlers_of(j.kind)) is not None and self._pick(found) is not None)
        ]
        return iter(dict.fromkeys([*kinds, *self._extra]))

    def __len__(self) -> int:
        return len(list(iter(self)))


HANDLERS: HandlerTable[Handler] = HandlerTable(lambda h: h.handle)
# Kinds whose queued jobs run together when several are waiting (one error per job).
BATCH_HANDLERS: HandlerTable[BatchHandler] = HandlerTable(lambda h: h.batch)
DEAD_HANDLERS: HandlerTable[DeadHandler] = HandlerTable(lambda h: h.dead)


def payload_tenant(payload: dict[str, Any]) -> str | None:
    """The account a job works for (every tenant job's payload names it); None for the
    control-plane sweeps (commit recovery, due watches), which cross accounts."""
    account = payload.get("account")
    return account if isinstance(account, str) and account else None


def refused(services: Any, kind: str, payload: dict[str, Any]) -> bool:
    """Whether the job must be dropped, not run: its account or user is being deleted or
    gone (services/tenancy/gate.py). A dropped job's task is cancelled, saying why."""
    job = catalog.job(kind)
    gate = getattr(services, "job_gate", None)
    if job is None or not job.gated or gate is None:
        return False
    reason = gate.refusal(payload)
    if reason is None:
        return False
    log.info("dropped a %s job: %s", kind, reason)
    task_id = payload.get("task_id")
    if isinstance(task_id, str) and task_id:
        services.tasks.drop(task_id, reason)
    return True


def run_job(services: Any, kind: str, payload: dict[str, Any]) -> None:
    handler = HANDLERS.get(kind)
    if handler is None:
        raise ValueError(f"unknown job kind '{kind}'")
    kind = catalog.current_kind(kind)
    with tenant_scope(payload_tenant(payload)):
        if not refused(services, kind, payload):
            with metered_job(services, kind, payload):
                handler(services, payload)


def job_died(services: Any, kind: str, payload: dict[str, Any], error: str) -> None:
    dead = DEAD_HANDLERS.get(kind)
    if dead is not None:
        with tenant_scope(payload_tenant(payload)):
            dead(services, payload, error)
