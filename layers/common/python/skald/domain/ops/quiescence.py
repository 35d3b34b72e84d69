"""When a set of job queues may be called idle.

Queues are read one after another, so one quiet reading is no snapshot: a fetch job can queue
its follow-up on the semantic queue after that queue was read, and be acked before the fetch
queue is read. A reading therefore returns a mark, the counts of jobs each queue has settled
(acked, failed, dead-lettered), or None when some job is pending or in flight. Two quiet
readings in a row with the same mark mean the queues were idle at the instant between them:
any job not settled at that instant is seen pending or in flight by the second reading, or is
settled before its queue is read there, which changes the mark; a job queued after that
instant can only come from a job not settled at it, or from a new request.

This needs settle counts that change with the job's state in one step (the SQLite queue's ack
bumps its counter in the same transaction). Where counts are approximate (SQS), the rule still
asks for two quiet readings, one of which may miss a job whose delay ends mid-read: both cannot.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Protocol

Reading = Callable[[], Hashable | None]


class QueueCounts(Protocol):
    @property
    def pending(self) -> int: ...
    @property
    def inflight(self) -> int: ...
    @property
    def processed(self) -> int: ...
    @property
    def failed_attempts(self) -> int: ...
    @property
    def dead(self) -> int: ...


def settle_mark(counts: Iterable[QueueCounts]) -> tuple[int, ...] | None:
    """A reading of queues' counts, drawn one queue at a time: None at the first queue with a
    job pending or in flight, else every queue's settled counts."""
    mark: list[int] = []
    for c in counts:
        if c.pending or c.inflight:
            return None
        mark += (c.processed, c.failed_attempts, c.dead)
    return tuple(mark)


def wait_quiet(
    read: Reading,
    timeout_s: float,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    first_delay_s: float = 0.01,
    max_delay_s: float = 0.2,
) -> bool:
    """Reads until two quiet readings in a row carry the same mark (True) or `timeout_s` has
    passed (False). A quiet reading is confirmed at once, even at the deadline: a wait of 0 on
    idle queues is a valid probe."""
    deadline = clock() + timeout_s
    delay = first_delay_s
    last: Hashable | None = None
    while True:
        mark = read()
        if mark is not None and mark == last:
            return True
        confirm = mark is not None and last is None
        last = mark
        if confirm:
            continue
        now = clock()
        if now >= deadline:
            return False
        sleep(min(delay, deadline - now))
        delay = min(delay * 2, max_delay_s)
