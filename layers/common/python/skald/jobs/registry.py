"""Which handler runs which job kind: the catalogue's "module:function" paths, imported on
first use (a worker imports only the handlers of the kinds it receives).

A handler takes the services of the entry point running it (a Composition, or anything
offering what that handler's module asks for) and the job's payload.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, TypeVar

from skald import catalog
from skald.domain.access.call_context import tenant_scope

Handler = Callable[[Any, dict[str, Any]], None]
DeadHandler = Callable[[Any, dict[str, Any], str], None]
BatchHandler = Callable[[Any, list[dict[str, Any]]], list[str | None]]
F = TypeVar("F")
log = logging.getLogger("skald.jobs")


def resolve(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class HandlerTable(MutableMapping[str, F]):
    """kind -> handler, resolved from the catalogue on first lookup. Entries set by hand
    (tests: a failing kind) live beside the catalogue's and go away with `del`."""

    def __init__(self, paths: Callable[[], dict[str, str]]) -> None:
        self._paths = paths
        self._resolved: dict[str, F] = {}
        self._extra: dict[str, F] = {}

    def __getitem__(self, kind: str) -> F:
        if kind in self._extra:
            return self._extra[kind]
        if kind not in self._resolved:
            path = self._paths().get(kind)
            if path is None:
                raise KeyError(kind)
            self._resolved[kind] = resolve(path)
        return self._resolved[kind]

    def __setitem__(self, kind: str, handler: F) -> None:
        self._extra[kind] = handler

    def __delitem__(self, kind: str) -> None:
        del self._extra[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._paths(), *self._extra]))

    def __len__(self) -> int:
        return len(list(iter(self)))


HANDLERS: HandlerTable[Handler] = HandlerTable(
    lambda: {j.kind: j.handler for j in catalog.JOBS})
# Kinds whose queued jobs run together when several are waiting (one error per job).
BATCH_HANDLERS: HandlerTable[BatchHandler] = HandlerTable(
    lambda: {j.kind: j.batch_handler for j in catalog.JOBS if j.batch_handler})
DEAD_HANDLERS: HandlerTable[DeadHandler] = HandlerTable(
    lambda: {j.kind: j.dead_handler for j in catalog.JOBS if j.dead_handler})


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
    with tenant_scope(payload_tenant(payload)):
        if not refused(services, kind, payload):
            handler(services, payload)


def job_died(services: Any, kind: str, payload: dict[str, Any], error: str) -> None:
    dead = DEAD_HANDLERS.get(kind)
    if dead is not None:
        with tenant_scope(payload_tenant(payload)):
            dead(services, payload, error)
