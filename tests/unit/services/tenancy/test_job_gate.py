"""Workers drop the jobs of removed tenants: a tombstoned account or user, a user gone, or a
job queued for a removed user whose id a new user holds now (its generation differs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skald import catalog
from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.jobs import registry
from skald.services.ingest.processing import identity_payload
from skald.services.tenancy.gate import JobGate
from tests.support.compose import local_services

ROOT = Identity("_root", "root", "root")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Composition]:
    c = local_services(Settings(backend="local", data_dir=tmp_path / "d", root_api_key="r"))
    c.accounts.create_account(ROOT, "acme", "alice")
    c.accounts.register_user(ROOT, "acme", "bob", "user")
    yield c
    c.close()


def bob(c: Composition) -> Identity:
    row = c.state.get_user("acme", "bob")
    assert row is not None
    return Identity("acme", "bob", "user", generation=row.generation)


def test_a_removed_users_jobs_are_dropped_and_their_tasks_cancelled(
    services: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[dict[str, Any]] = []
    monkeypatch.setitem(
        registry.HANDLERS, catalog.JOB_SEMANTIC, lambda _c, payload: ran.append(payload)
    )
    old = bob(services)
    task = services.tasks.create(old, "write")
    job = {**identity_payload(old), "task_id": task.task_id}
    registry.run_job(services, catalog.JOB_SEMANTIC, job)
    assert len(ran) == 1  # an active user's job runs
    services.accounts.remove_user(Identity("acme", "alice", "admin"), "acme", "bob")
    services.job_gate._seen.clear()  # the test does not wait out the gate's bound
    registry.run_job(services, catalog.JOB_SEMANTIC, job)
    assert len(ran) == 1
    dropped = services.tasks.store.get_task(task.task_id)
    assert dropped is not None and dropped.status == "cancelled"
    assert "being deleted" in (dropped.error or "")
    # the purge itself is not gated
    assert not registry.refused(
        services, catalog.JOB_PURGE, {"account": "acme", "user": "bob", "task_id": "x"}
    )


def test_a_job_of_a_former_holder_of_the_id_never_runs_for_the_new_one(
    services: Composition,
) -> None:
    gate = JobGate(lambda: services.state, ttl_s=0.0)
    old = identity_payload(bob(services))
    services.accounts.remove_user(ROOT, "acme", "bob")
    removed = services.state.get_user("acme", "bob")
    assert removed is not None and removed.deletion is not None
    assert services.state.finish_user_deletion("acme", "bob", removed.deletion.task_id)
    assert gate.refusal(old) == "user bob does not exist in acme"
    services.accounts.register_user(ROOT, "acme", "bob", "user")
    assert "removed user bob" in (gate.refusal(old) or "")
    assert gate.refusal(identity_payload(bob(services))) is None
    # jobs without a generation (dev mode, sweeps) are stopped by tombstones only
    assert gate.refusal({"account": "nobody", "user": "x"}) is None
    assert gate.refusal({"kind": "sweep"}) is None


def test_the_gate_remembers_for_its_bound_only(services: Composition) -> None:
    clock = Clock()
    lookups: list[str] = []
    real = services.state

    class Counting:
        def get_account(self, account_id: str) -> Any:
            lookups.append(account_id)
            return real.get_account(account_id)

        def get_user(self, account_id: str, user_id: str) -> Any:
            return real.get_user(account_id, user_id)

    gate = JobGate(lambda: Counting(), ttl_s=2.0, clock=clock)  # type: ignore[arg-type,return-value]
    payload = identity_payload(bob(services))
    for _ in range(5):
        assert gate.refusal(payload) is None
    assert len(lookups) == 1
    services.accounts.delete_account(ROOT, "acme")
    clock.now += 1.9
    assert gate.refusal(payload) is None  # within the bound: still the old answer
    clock.now += 0.1
    assert gate.refusal(payload) == "account acme is being deleted"
