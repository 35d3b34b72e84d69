"""Recovery of half-done commits: finish phase 1 of every archive whose outbox is still set,
or roll it back when it keeps failing.

Runs at `skald serve` startup (before the workers, nothing else is running: every unsealed
commit is an orphan), then periodically in the idle timer, and on AWS as the
`session.recover_commits` job that an EventBridge Scheduler rate schedule sends to the
auto-commit queue. Only commits older than a grace period are touched by the periodic runs: a
younger one may still be on its way in a live request (finishing it twice would be harmless,
since every step is idempotent, but rolling it back would not).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from skald.catalog import JOB_RECOVER_COMMITS as JOB_RECOVER_COMMITS
from skald.domain.access.call_context import tenant_scope
from skald.domain.access.identity import Identity
from skald.ports import ArchiveRecord, SessionStore
from skald.services.sessions.commit import SessionCommitter

log = logging.getLogger("skald.sessions")

MAX_ATTEMPTS = 3  # failed finishing runs before a commit is rolled back


class CommitRecovery:
    def __init__(
        self,
        store: SessionStore,
        committer: SessionCommitter,
        *,
        max_attempts: int = MAX_ATTEMPTS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.committer = committer
        self.max_attempts = max_attempts
        self.clock = clock

    def run(self, *, grace_s: float, limit: int = 100) -> dict[str, int]:
        """One pass over up to `limit` unsealed commits created `grace_s` ago or earlier.
        Counts what became of them: finished, retry (failed, attempts left), rolled_back,
        failed (could not be rolled back: marked failed), gone (sealed or deleted meanwhile),
        error (the recovery itself failed: the next pass tries again)."""
        report: Counter[str] = Counter()
        for stale in self.store.stale_commits(self.clock() - grace_s, limit):
            try:
                # A sweep over every account acts on each commit as its account's call.
                with tenant_scope(stale.account_id):
                    report[self._recover(stale)] += 1
            except Exception:  # one bad commit must not stop the others
                log.exception("recovering %s of %s failed", stale.archive_id, stale.session_id)
                report["error"] += 1
        if report:
            log.info("commit recovery: %s", dict(report))
        return dict(report)

    def _recover(self, stale: ArchiveRecord) -> str:
        # the listing may lag (an eventually consistent index): act on a fresh read
        arch = self.store.get_archive(
            stale.account_id, stale.user_id, stale.session_id, stale.number
        )
        if arch is None or arch.outbox is None:
            return "gone"
        identity = Identity(arch.account_id, arch.user_id, str(arch.outbox.get("role") or "user"))
        try:
            self.committer.finish(identity, arch)
            return "finished"
        except Exception as exc:  # counted on the archive; rolled back after the last try
            error = f"{type(exc).__name__}: {exc}"
            log.warning("finishing %s of %s failed: %s", arch.archive_id, arch.session_id, error)
        attempts = int(arch.outbox.get("attempts") or 0) + 1
        if attempts >= self.max_attempts:
            return self.committer.roll_back(identity, arch, error)
        self.store.update_archive(
            arch.account_id,
            arch.user_id,
            arch.session_id,
            arch.number,
            outbox={**arch.outbox, "attempts": attempts, "error": error},
        )
        return "retry"
