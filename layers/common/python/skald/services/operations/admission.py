"""Back-pressure, per account: new background work is refused while the caller's account has
too many jobs queued or running.

A request that would queue work (a write, an upload, a commit...) is admitted while the
caller's account has fewer jobs not done yet (waiting, delayed or running, in every queue)
than its limit: its plan's `jobs_in_flight`, or `max_queued_jobs` when the plan leaves it
unset (0: no limit). Otherwise it is refused up front, before anything is written, with
RESOURCE_EXHAUSTED (HTTP 429), a `Retry-After` and the limit, its value and the account's
count in the details. Reads are never refused, and one account's backlog never refuses
another account's work: there is no global bound (the total is at most the accounts' limits
added up; each queue's workers drain it at their own pace).

The count (the queue's AccountJobs: an indexed count locally, the counters beside SQS on
AWS) and the limit are read at most once per `cache_s` per account, so a burst may overshoot
the limit by what arrives within that time. A request makes at most one store call for its
checks (services/plans/book.py): when the plan was read in it, a stale count is used once
more. A queue that cannot count per account admits everything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from skald.domain.errors import ResourceExhausted
from skald.ports import AccountJobs, JobQueue
from skald.services.plans.book import note_store_read, store_read_in_request

LIMIT = "jobs_in_flight"
_MAX_CACHED = 10_000  # accounts remembered at once (the cache is cleared beyond)


class Admission:
    def __init__(
        self,
        queue: JobQueue,
        *,
        limit_of: Callable[[str], int | None],
        cache_s: float,
        retry_after_s: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`limit_of(account)`: the account's limit of jobs in flight (None or 0: none)."""
        self.queue = queue
        self.limit_of = limit_of
        self.cache_s = cache_s
        self.retry_after_s = retry_after_s
        self.clock = clock
        self._read: dict[str, tuple[float, int | None, int]] = {}  # account -> at, limit, count
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return isinstance(self.queue, AccountJobs)

    def fresh(self, account_id: str) -> bool:
        """True while the account's cached reading may be used without I/O."""
        if not self.enabled:
            return True
        with self._lock:
            read = self._read.get(account_id)
        return read is not None and self.clock() - read[0] < self.cache_s

    def reading(self, account_id: str) -> tuple[int | None, int]:
        """(the account's limit, its jobs not done yet), read again once `cache_s` old."""
        now = self.clock()
        with self._lock:
            read = self._read.get(account_id)
        if read is not None and (now - read[0] < self.cache_s or store_read_in_request()):
            # fresh; or stale while this request already made its one store call (the plan's):
            # the next request reads it
            return read[1], read[2]
        limit = self.limit_of(account_id) or None
        count = 0
        if limit is not None and isinstance(self.queue, AccountJobs):
            note_store_read()
            count = self.queue.depth_of(account_id)
        with self._lock:
            if len(self._read) >= _MAX_CACHED:
                self._read.clear()
            self._read[account_id] = (now, limit, count)
        return limit, count

    def forget(self, account_id: str) -> None:
        """The account's plan changed: its limit is read again by its next request."""
        with self._lock:
            self._read.pop(account_id, None)

    def admit(self, account_id: str) -> None:
        """Raises ResourceExhausted while the account has its limit of jobs or more."""
        if not self.enabled:
            return
        limit, count = self.reading(account_id)
        if limit is None or count < limit:
            return
        raise ResourceExhausted(
            f"Account {account_id} has {count} background jobs queued or running (its limit "
            f"{LIMIT} is {limit}); retry in {self.retry_after_s} s",
            {
                "limit": LIMIT,
                "value": limit,
                "current": count,
                "retry_after_s": self.retry_after_s,
            },
            retry_after_s=self.retry_after_s,
        )
