"""What SQS does not keep for the job queue: durable per-queue counters (processed, failed
attempts) and the registry of pending dedup claims, as protocols with in-memory versions
(the DynamoDB ones live in dynamo/extras.py)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Protocol, runtime_checkable


@runtime_checkable
class JobCounters(Protocol):
    """Durable per-queue counters ("processed", "failed_attempts", ...)."""

    def incr(self, queue: str, name: str, by: int = 1) -> None: ...

    def get(self, queue: str) -> dict[str, int]: ...


class InMemoryJobCounters:
    """JobCounters for tests and single-process use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[str, int]] = defaultdict(dict)

    def incr(self, queue: str, name: str, by: int = 1) -> None:
        with self._lock:
            row = self._values[queue]
            row[name] = row.get(name, 0) + by

    def get(self, queue: str) -> dict[str, int]:
        with self._lock:
            return dict(self._values.get(queue, {}))


@runtime_checkable
class DedupRegistry(Protocol):
    """Which never-delivered job currently holds each (queue, dedup_key)."""

    def claim(self, queue: str, key: str, job_id: str, ttl_s: float) -> str:
        """Atomically: the job id holding (queue, key) if a live claim exists, else registers
        `job_id` for `ttl_s` seconds and returns it."""
        ...

    def release(self, queue: str, key: str, job_id: str) -> None:
        """Drops the claim on (queue, key) if `job_id` still holds it."""
        ...


class InMemoryDedupRegistry:
    """DedupRegistry for tests and single-process use."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], tuple[str, float]] = {}
        self._clock = clock

    def claim(self, queue: str, key: str, job_id: str, ttl_s: float) -> str:
        now = self._clock()
        with self._lock:
            held = self._claims.get((queue, key))
            if held is not None and held[1] > now:
                return held[0]
            self._claims[(queue, key)] = (job_id, now + ttl_s)
            return job_id

    def release(self, queue: str, key: str, job_id: str) -> None:
        with self._lock:
            held = self._claims.get((queue, key))
            if held is not None and held[0] == job_id:
                del self._claims[(queue, key)]
