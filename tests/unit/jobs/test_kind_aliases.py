"""Jobs queued by the release before each worker had one name carry its kinds (queue rows,
SQS messages, the rate schedules' envelopes, idle timers): every job runner takes each of them
as the kind it became (catalog.KIND_ALIASES)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skald import catalog
from skald.compose.serve import ServeRuntime
from skald.config import Settings
from skald.jobs import registry
from skald.jobs.lambda_workers import make_sqs_worker
from skald.ports import Job
from tests.support.compose import local_services
from tests.support.lambda_events import Ctx, sqs_event

OLD_KINDS = sorted(catalog.KIND_ALIASES)


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Each current kind's handler replaced by one noting (kind, payload)."""
    calls: list[tuple[str, dict[str, Any]]] = []

    def noting(kind: str) -> Any:
        return lambda _services, payload: calls.append((kind, payload))

    for job in catalog.JOBS:
        monkeypatch.setitem(registry.HANDLERS, job.kind, noting(job.kind))
    yield calls


def test_the_old_kinds_are_those_of_the_earlier_release() -> None:
    assert catalog.KIND_ALIASES == {
        "session.extract_memories": "memory.extract",
        "session.auto_commit": "autocommit.commit",
        "session.recover_commits": "autocommit.recover",
        "resource.fetch": "fetch.source",
        "resource.watches_due": "fetch.watches_due",
        "tenant.purge": "purge.tenant",
        "tenant.resume_purges": "purge.resume",
    }


@pytest.mark.parametrize("old", OLD_KINDS)
def test_the_registry_runs_an_old_kind_as_its_new_one(
    old: str, ran: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    services = local_services(Settings(backend="local", data_dir=tmp_path))
    try:
        registry.run_job(services, old, {"n": 1})
    finally:
        services.close()
    assert ran == [(catalog.KIND_ALIASES[old], {"n": 1})]


def test_an_old_kinds_dead_handler_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    died: list[str] = []
    monkeypatch.setitem(
        registry.DEAD_HANDLERS, catalog.JOB_FETCH, lambda _s, _p, error: died.append(error)
    )
    registry.job_died(object(), "resource.fetch", {}, "boom")
    assert died == ["boom"]


@pytest.mark.parametrize("old", OLD_KINDS)
def test_a_worker_lambda_runs_an_old_kinds_message(
    old: str, ran: list[tuple[str, dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.delenv("SKALD_IDEMPOTENCY_TABLE", raising=False)
    services = local_services(Settings(backend="local", data_dir=tmp_path))
    queue = catalog.job(old).queue  # type: ignore[union-attr]
    handler = make_sqs_worker(lambda: services, max_attempts=5, queue=queue)
    try:
        out = handler(sqs_event(Job("j-1", queue, old, {"n": 2}, 1)), Ctx())
    finally:
        services.close()
    assert out == {"batchItemFailures": []}
    assert ran == [(catalog.KIND_ALIASES[old], {"n": 2})]


@pytest.mark.parametrize(
    "old", ["session.recover_commits", "resource.watches_due", "tenant.resume_purges"]
)
def test_an_old_rate_schedules_envelope_runs(
    old: str, ran: list[tuple[str, dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schedule of the earlier stack sends {"kind", "payload"} without attributes."""
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.delenv("SKALD_IDEMPOTENCY_TABLE", raising=False)
    services = local_services(Settings(backend="local", data_dir=tmp_path))
    queue = catalog.job(old).queue  # type: ignore[union-attr]
    handler = make_sqs_worker(
        lambda: services,
        max_attempts=5,
        queue=queue,
        default_kind=catalog.queue(queue).default_kind,
    )
    event = sqs_event(Job("j-1", queue, "unused", {}, 1))
    record = event["Records"][0]
    record["messageAttributes"] = {}
    record["body"] = json.dumps({"kind": old, "payload": {}})
    try:
        assert handler(event, Ctx()) == {"batchItemFailures": []}
    finally:
        services.close()
    assert ran == [(catalog.KIND_ALIASES[old], {})]


def test_skald_serves_pool_runs_the_old_kinds_rows(
    ran: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    runtime = ServeRuntime(Settings(backend="local", data_dir=tmp_path))
    try:
        for i, old in enumerate(OLD_KINDS):
            runtime.services.queue.enqueue(
                catalog.job(old).queue,  # type: ignore[union-attr]
                old,
                {"n": i},
            )
        runtime.start_workers()
        deadline = time.monotonic() + 60
        while len(ran) < len(OLD_KINDS) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        runtime.stop()
    assert sorted(ran, key=lambda r: r[1]["n"]) == [
        (catalog.KIND_ALIASES[old], {"n": i}) for i, old in enumerate(OLD_KINDS)
    ]
