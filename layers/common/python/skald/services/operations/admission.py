"""Back-pressure: new background work is refused while the job queues are too deep.

A request that would queue work (a write, an upload, a commit...) is admitted only while
fewer than `limit` jobs are waiting in all queues together; otherwise it is refused up front,
before anything is written, with RESOURCE_EXHAUSTED (HTTP 429) and a `Retry-After`. Reads are
never refused. The depth is read at most once per `cache_s` (SQS answers approximately and
costs a call per queue), so a burst may overshoot the bound by what arrives within that time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from skald.domain.errors import ResourceExhausted
from skald.ports import JobQueue


class Admission:
    def __init__(
        self,
        queue: JobQueue,
        queues: Sequence[str],
        *,
        limit: int,
        cache_s: float,
        retry_after_s: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue = queue
        self.queues = tuple(queues)
        self.limit = limit
        self.cache_s = cache_s
        self.retry_after_s = retry_after_s
        self.clock = clock
        self._depth = 0
        self._read_at: float | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    def fresh(self) -> bool:
        """True while the cached depth may be used without reading the queues (no I/O)."""
        return not self.enabled or (
            self._read_at is not None and self.clock() - self._read_at < self.cache_s
        )

    def depth(self) -> int:
        with self._lock:
            if self._read_at is None or self.clock() - self._read_at >= self.cache_s:
                self._depth = sum(self.queue.depth(q) for q in self.queues)
                self._read_at = self.clock()
            return self._depth

    def admit(self) -> None:
        """Raises ResourceExhausted while the queues hold `limit` jobs or more."""
        if not self.enabled:
            return
        depth = self.depth()
        if depth >= self.limit:
            raise ResourceExhausted(
                f"The server is busy: {depth} background jobs are waiting (limit "
                f"{self.limit}); retry in {self.retry_after_s} s",
                {"queued_jobs": depth, "limit": self.limit, "retry_after_s": self.retry_after_s},
                retry_after_s=self.retry_after_s,
            )
