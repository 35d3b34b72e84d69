"""A worker's next inputs prepared ahead, and its last output written behind, while it works.

The semantic worker reads, parses and describes a group of files, embeds it, then writes it to
the index. Done one after the other, every blob read, every LLM summary and every index write
waits in line with the model: on S3 a file costs three round trips, which for a group of
small files add up to far more than embedding the group, and OpenSearch's bulk write adds
more. `read_ahead` prepares the next files on a few threads, in order, bounded by
what they weigh; `WriteBehind` keeps one write in flight while the next group is embedded;
`ordered_map` refreshes sibling directories side by side.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def read_ahead(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    workers: int,
    weight: Callable[[R], int],
    max_weight: int,
) -> ReadAhead[T, R]:
    """`fn(item)` for each of `items`, in their order, computed on `workers` threads ahead of
    the consumer. Results done and not yet taken weigh at most `max_weight` (one more is
    always allowed), and at most 2 x `workers` items are in the works, so memory follows the
    bounds, not the number of items. An item's exception is raised at its turn; closing the
    iterator (or an exception) stops the work and waits for what is running. The caller's
    context variables (a job's deadline, an LLM meter) hold in the threads."""
    if workers < 1 or max_weight < 1:
        raise ValueError("workers and max_weight must be >= 1")
    return ReadAhead(fn, items, workers, weight, max_weight)


def ordered_map(fn: Callable[[T], R], items: Sequence[T], *, workers: int) -> list[R]:
    """`[fn(item) for item in items]`, on up to `workers` threads when there is more than
    one item (see read_ahead: order, errors, context)."""
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    return list(
        read_ahead(fn, items, workers=min(workers, len(items)), weight=lambda _: 0, max_weight=1)
    )


class ReadAhead(Generic[T, R]):
    """The results of read_ahead, in order; `next_ready` tells whether taking the next one
    would wait."""

    def __init__(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        workers: int,
        weight: Callable[[R], int],
        max_weight: int,
    ) -> None:
        self._fn, self._items, self._weight = fn, items, weight
        self._workers, self._max_weight = workers, max_weight
        self._cond = threading.Condition()
        self._queue: deque[Future[tuple[R, int]]] = deque()  # submitted, not taken, in order
        self._running = 0
        self._ready_weight = 0
        self._stopped = False
        self._context = contextvars.copy_context()
        self._results = self._take()

    def __iter__(self) -> ReadAhead[T, R]:
        return self

    def __next__(self) -> R:
        return next(self._results)

    def close(self) -> None:
        self._results.close()

    def _take(self) -> Generator[R, None, None]:
        if not self._items:
            return
        pool = ThreadPoolExecutor(self._workers, thread_name_prefix="skald-read-ahead")
        feeder = threading.Thread(
            target=self._submit_all, args=(pool,), daemon=True, name="skald-read-ahead-feed"
        )
        feeder.start()
        try:
            for _ in self._items:
                with self._cond:
                    while not self._queue:
                        self._cond.wait()
                    future = self._queue.popleft()
                value, w = future.result()
                with self._cond:
                    self._ready_weight -= w
                    self._cond.notify_all()
                yield value
        finally:
            with self._cond:
                self._stopped = True
                self._cond.notify_all()
            feeder.join()
            pool.shutdown(wait=True, cancel_futures=True)

    def next_ready(self) -> bool:
        with self._cond:
            return bool(self._queue) and self._queue[0].done()

    def _submit_all(self, pool: ThreadPoolExecutor) -> None:
        for item in self._items:
            with self._cond:
                while not self._stopped and (
                    self._running >= 2 * self._workers
                    or self._queue
                    and self._ready_weight >= self._max_weight
                ):
                    self._cond.wait()
                if self._stopped:
                    return
                self._running += 1
                self._queue.append(pool.submit(self._one, item))
                self._cond.notify_all()

    def _one(self, item: T) -> tuple[R, int]:
        w = 0
        try:
            # Each task runs in a copy: a Context cannot be entered by two threads at once.
            value = self._context.copy().run(self._fn, item)
            w = max(0, self._weight(value))
            return value, w
        finally:
            with self._cond:
                self._running -= 1
                self._ready_weight += w
                self._cond.notify_all()


class WriteBehind:
    """One write at a time runs behind the caller: `submit` waits for the previous write
    (raising its error) before it starts the next, and `wait` for the last. The caller thus
    overlaps a write with its next step and never holds more than one write's data extra."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None

    def submit(self, write: Callable[[], None]) -> None:
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="skald-write-behind")
        self._pending = self._pool.submit(contextvars.copy_context().run, write)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Waits for the last write without raising its error (the caller is already
        failing), then lets the thread go."""
        try:
            if self._pending is not None:
                self._pending.exception()
        finally:
            self._pending = None
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
