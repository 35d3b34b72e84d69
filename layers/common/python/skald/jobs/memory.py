"""Memory worker jobs: commit phase 2, the extraction of memories from an archive."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from skald.catalog import JOB_MEMORY
from skald.jobs.registry import JobHandlers

if TYPE_CHECKING:
    from skald.services.sessions.memory import MemoryCommitService


class ExtractJobServices(Protocol):
    @property
    def memory_commit(self) -> MemoryCommitService: ...


def handle_extract(container: ExtractJobServices, payload: dict[str, Any]) -> None:
    container.memory_commit.run(payload)


def on_extract_dead(container: ExtractJobServices, payload: dict[str, Any], error: str) -> None:
    container.memory_commit.fail(payload, error)


JOBS = {JOB_MEMORY: JobHandlers(handle_extract, dead=on_extract_dead)}
