"""The worker Lambdas' per-account cap: a worker handed a job of an account that already runs
`cap` jobs on the queue does not run it now. It puts the job back for `defer_s` (a copy of
the message, sent again: the AccountShares port) and reports the record done, so the
deferral costs no receive count (the redrive policy's maxReceiveCount counts receives of the
message; the copy starts at zero and carries the attempts that really ran).

A running job holds a slot of its account (take_slot) until it ends, or until `hold_s`
(the invocation's time left) has passed: a worker that crashed or timed out frees its slot
then. Jobs without an account (sweeps) are not capped. A queue adapter without AccountShares
(none but SQS needs it: `skald serve` serves accounts round robin itself) caps nothing.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from skald.domain.ops.fairness import job_account
from skald.ports import AccountShares, JobQueue

log = logging.getLogger(__name__)


@dataclass
class AccountCap:
    """One invocation's slots: it runs one record at a time, so it holds at most one."""

    queue: JobQueue
    cap: int
    defer_s: float
    hold_s: float
    holder: str = field(default_factory=lambda: uuid.uuid4().hex)
    _held: tuple[str, str] | None = None

    def admit(self, queue: str | None, payload: dict[str, Any], record: dict[str, Any]) -> bool:
        """True: run the job now (its slot is held until release()). False: the job was put
        back for later; the record is done."""
        account = job_account(payload)
        shares = self.queue
        if (
            queue is None
            or account is None
            or self.cap < 1
            or not isinstance(shares, AccountShares)
        ):
            return True
        try:
            taken = shares.take_slot(queue, account, self.holder, cap=self.cap, hold_s=self.hold_s)
        except Exception:  # the cap is a fairness aid: without its store, the job runs
            log.exception("could not take a running slot of %s", account)
            return True
        if taken:
            self._held = (queue, account)
            return True
        shares.defer(queue, record, self.defer_s)  # raises: the record fails, SQS retries it
        log.info("job of %s deferred: %d of its jobs run on %s already", account, self.cap, queue)
        return False

    def release(self) -> None:
        held, self._held = self._held, None
        if held is None or not isinstance(self.queue, AccountShares):
            return
        try:
            self.queue.release_slot(held[0], held[1], self.holder)
        except Exception:  # the slot expires with hold_s
            log.exception("could not release the running slot of %s", held[1])
