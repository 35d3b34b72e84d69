"""Autocommit worker jobs: the commit of an idle session and the sweep of half-done
commits."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from skald.catalog import JOB_AUTO_COMMIT, JOB_RECOVER_COMMITS
from skald.domain.errors import FailedPrecondition, NotFound
from skald.jobs.registry import JobHandlers
from skald.services.ingest.processing import identity_from_payload

if TYPE_CHECKING:
    from skald.ports import SessionStore
    from skald.services.sessions.service import SessionService


class AutoCommitJobServices(Protocol):
    @property
    def session_store(self) -> SessionStore: ...

    @property
    def sessions(self) -> SessionService: ...

    @property
    def clock(self) -> Callable[[], float]: ...


def handle_auto_commit(container: AutoCommitJobServices, payload: dict[str, Any]) -> None:
    """Commits a session whose idle deadline passed; a no-op when it is no longer due."""
    identity = identity_from_payload(payload)
    store = container.session_store
    rec = store.get_session(identity.account_id, identity.user_id, payload["session_id"])
    now = container.clock()
    if rec is None or rec.live_count == 0 or rec.idle_deadline is None or rec.idle_deadline > now:
        return
    try:
        container.sessions.commit(identity, rec.session_id)
    except (NotFound, FailedPrecondition):
        # deleted meanwhile, or blocked by a failed archive: nothing to retry
        store.update_session(
            identity.account_id, identity.user_id, rec.session_id, idle_deadline=None
        )


class RecoveryJobServices(Protocol):
    def recover_commits(self, grace_s: float | None = None) -> dict[str, int]: ...


def handle_recover_commits(container: RecoveryJobServices, payload: dict[str, Any]) -> None:
    """Finishes or rolls back commits left half-done (a function that died mid-commit)."""
    grace = payload.get("grace_s")
    container.recover_commits(float(grace) if isinstance(grace, int | float) else None)


JOBS = {
    JOB_AUTO_COMMIT: JobHandlers(handle_auto_commit),
    JOB_RECOVER_COMMITS: JobHandlers(handle_recover_commits),
}
