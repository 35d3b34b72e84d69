"""Fetch worker jobs: a remote source (web page, git repository) into its reserved root; an
uploaded archive too large for a request into its reserved root; the sweep of due watches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from skald.catalog import JOB_FETCH, JOB_IMPORT, JOB_WATCHES_DUE
from skald.jobs.deadline import current_deadline
from skald.jobs.registry import JobHandlers

if TYPE_CHECKING:
    from skald.services.ingest.fetch import RemoteSources
    from skald.services.ingest.imports import ArchiveImports
    from skald.services.ingest.watches import WatchService


class FetchJobServices(Protocol):
    """What a fetch job needs (a Composition offers it)."""

    @property
    def remote(self) -> RemoteSources: ...

    @property
    def watches(self) -> WatchService: ...

    @property
    def imports(self) -> ArchiveImports: ...


def handle(container: FetchJobServices, payload: dict[str, Any]) -> None:
    container.remote.run(payload)


def handle_watches_due(container: FetchJobServices, payload: dict[str, Any]) -> None:
    container.watches.run_due()


def handle_import(container: FetchJobServices, payload: dict[str, Any]) -> None:
    container.imports.run(payload, current_deadline())


def on_import_dead(container: FetchJobServices, payload: dict[str, Any], error: str) -> None:
    container.imports.on_dead(payload, error)


def on_dead(container: FetchJobServices, payload: dict[str, Any], error: str) -> None:
    container.remote.on_dead(payload, error)


JOBS = {
    JOB_FETCH: JobHandlers(handle, dead=on_dead),
    JOB_WATCHES_DUE: JobHandlers(handle_watches_due),
    JOB_IMPORT: JobHandlers(handle_import, dead=on_import_dead),
}
