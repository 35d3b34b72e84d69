"""What SQS does not keep for fairness: each account's count of jobs not done yet (per-account
admission reads it) and the slots of the jobs of each account running on a queue (the worker
Lambdas' per-account cap), as a protocol with an in-memory version (the DynamoDB one is
dynamo/account_jobs.py).

Counts are kept in day buckets: a job is counted (+1) in the bucket of the day it is queued,
and the message carries that day (the `counted` attribute) so its settling (-1: done, or
dead-lettered) goes to the same bucket. A bucket stops counting once no job of its day can be
left (the queues' retention and a day more: domain/ops/fairness.bucket_expiry), so a count
that drifted (a worker crashed between settling a job and counting it, a message expired
unprocessed) heals then, and a count never goes below zero where it is read.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from skald.domain.ops.fairness import bucket_expiry


@runtime_checkable
class AccountCounts(Protocol):
    def add(self, account: str, day: int, by: int) -> None:
        """Counts `by` jobs (negative: settled) in the account's bucket of `day`."""
        ...

    def count(self, account: str) -> int:
        """The account's jobs not done yet: its live buckets' sum, at least 0."""
        ...

    def take_slot(self, key: str, holder: str, cap: int, hold_s: float) -> bool: ...

    def release_slot(self, key: str, holder: str) -> None: ...

    def drop(self, account: str) -> None:
        """Forgets everything kept of the account (its removal's purge)."""
        ...


class InMemoryAccountCounts:
    """AccountCounts for tests and single-process use."""

    def __init__(self, *, retention_days: int = 4, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._retention_days = retention_days
        self._clock = clock
        self._buckets: dict[str, dict[int, int]] = defaultdict(dict)
        self._slots: dict[str, dict[str, float]] = defaultdict(dict)

    def add(self, account: str, day: int, by: int) -> None:
        with self._lock:
            buckets = self._buckets[account]
            if by < 0 and day not in buckets:
                return  # an expired bucket is not brought back
            buckets[day] = buckets.get(day, 0) + by

    def count(self, account: str) -> int:
        now = self._clock()
        with self._lock:
            buckets = self._buckets.get(account, {})
            live = sum(
                n for day, n in buckets.items() if bucket_expiry(day, self._retention_days) > now
            )
        return max(0, live)

    def take_slot(self, key: str, holder: str, cap: int, hold_s: float) -> bool:
        now = self._clock()
        with self._lock:
            slots = self._slots[key]
            for h in [h for h, until in slots.items() if until <= now]:
                del slots[h]
            if holder not in slots and len(slots) >= cap:
                return False
            slots[holder] = now + hold_s
            return True

    def release_slot(self, key: str, holder: str) -> None:
        with self._lock:
            self._slots.get(key, {}).pop(holder, None)

    def drop(self, account: str) -> None:
        with self._lock:
            self._buckets.pop(account, None)
            for key in [k for k in self._slots if k.partition("/")[0] == account]:
                del self._slots[key]
