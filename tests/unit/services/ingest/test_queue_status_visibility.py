"""Queue status (system/wait, the observer routes, add_resource with wait) lists dead-lettered
jobs, whose errors name URIs: each caller sees only those of jobs it may see."""

from __future__ import annotations

from pathlib import Path

from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
from skald.adapters.local.sqlite.statestore import SqliteStateStore
from skald.domain.access.identity import Identity
from skald.services.ingest.processing import QUEUE_SEMANTIC, ProcessingScheduler
from skald.services.tasks import TaskService


def _dead(queue: SqliteJobQueue, account: str, user: str) -> None:
    queue.enqueue(QUEUE_SEMANTIC, "semantic.process", {"account": account, "user": user})
    (lease,) = queue.lease(QUEUE_SEMANTIC)
    queue.nack(lease, f"File not found: viking://user/{user}/secret-of-{account}.md")


def _errors(scheduler: ProcessingScheduler, identity: Identity | None) -> list[str]:
    status = scheduler.queue_status(identity)
    return sorted(e.error for q in status.values() for e in q.errors)


def test_dead_letters_are_listed_to_those_who_may_see_the_job(tmp_path: Path) -> None:
    queue = SqliteJobQueue(tmp_path / "jobs.db", max_attempts=1)
    state = SqliteStateStore(tmp_path / "state.db")
    try:
        scheduler = ProcessingScheduler(queue, TaskService(state))
        for account, user in (("acme", "alice"), ("acme", "bob"), ("beta", "alice")):
            _dead(queue, account, user)
        everything = _errors(scheduler, None)
        assert len(everything) == 3
        assert _errors(scheduler, Identity("acme", "alice", "user")) == [
            "File not found: viking://user/alice/secret-of-acme.md"
        ]
        assert _errors(scheduler, Identity("acme", "boss", "admin")) == [
            "File not found: viking://user/alice/secret-of-acme.md",
            "File not found: viking://user/bob/secret-of-acme.md",
        ]
        assert _errors(scheduler, Identity("_system", "root", "root")) == everything
        assert (
            scheduler.queue_status(Identity("beta", "zed", "user"))["Semantic"].error_count == 3
        )  # counters stay global: they name nothing
    finally:
        queue.close()
        state.close()
