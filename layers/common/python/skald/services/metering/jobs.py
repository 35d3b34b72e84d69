"""A background job as the meters see it: metered to its payload's account and user, its
handler time recorded as worker time by kind, and a job stopped by a plan limit failing its
task with that error at once (retrying cannot help before the limit resets or is raised)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from skald.domain.errors import QuotaExceeded
from skald.domain.metering.subject import subject_scope
from skald.domain.metering.units import Unit, billed_kind

log = logging.getLogger("skald")


def payload_subject(payload: dict[str, Any]) -> tuple[str | None, str | None]:
    account = payload.get("account")
    user = payload.get("user")
    return (
        account if isinstance(account, str) and account else None,
        user if isinstance(user, str) else None,
    )


@contextmanager
def metered_job(
    services: Any, kind: str, payload: dict[str, Any], share: float = 1.0
) -> Iterator[None]:
    """Runs a job's handler as its payload's account and user; records its time (`share` of
    it for a job handled in a batch of several). A QuotaExceeded fails the job's task with
    the error and ends the job (no retry)."""
    account, user = payload_subject(payload)
    started = time.perf_counter()
    try:
        with subject_scope(account, user):
            yield
    except QuotaExceeded as exc:
        task_id = payload.get("task_id")
        tasks = getattr(services, "tasks", None)
        if not (isinstance(task_id, str) and task_id and tasks is not None):
            raise
        log.warning("a %s job stopped at a plan limit: %s", kind, exc)
        tasks.fail(task_id, f"{exc.code}: {exc}")
    finally:
        meter = getattr(services, "meter", None)
        if meter is not None and account and billed_kind(kind):
            ms = int((time.perf_counter() - started) * 1000 * share)
            meter.record(account, user or "", Unit.WORKER_MS, max(ms, 1), {"kind": kind})


@contextmanager
def metered_batch(services: Any, kind: str, payloads: list[dict[str, Any]]) -> Iterator[None]:
    """One account's jobs handled together: metered to the first job's user (a batch is one
    account's), each job recording its share of the time. A QuotaExceeded fails every task of
    the batch."""
    started = time.perf_counter()
    first = payloads[0] if payloads else {}
    account, user = payload_subject(first)
    try:
        with subject_scope(account, user):
            yield
    except QuotaExceeded as exc:
        tasks = getattr(services, "tasks", None)
        ids = [p.get("task_id") for p in payloads]
        if tasks is None or not all(isinstance(t, str) and t for t in ids):
            raise
        log.warning("%d %s jobs stopped at a plan limit: %s", len(ids), kind, exc)
        for task_id in ids:
            tasks.fail(task_id, f"{exc.code}: {exc}")
    finally:
        meter = getattr(services, "meter", None)
        share = (time.perf_counter() - started) * 1000 / max(len(payloads), 1)
        for p in payloads:
            a, u = payload_subject(p)
            if a and meter is not None and billed_kind(kind):
                meter.record(a, u or "", Unit.WORKER_MS, max(int(share), 1), {"kind": kind})
