"""read_ahead and WriteBehind: order, bounds, errors at their turn, stopping, context."""

from __future__ import annotations

import contextvars
import random
import threading
import time

import pytest

from skald.services.ingest.read_ahead import WriteBehind, read_ahead

LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("label", default="none")


class Tracker:
    """Counts the calls started and running at once, and what the consumer has taken."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = 0
        self.running = 0
        self.peak_running = 0
        self.taken = 0
        self.peak_ahead = 0  # started and not yet taken

    def call(self, x: int, delay: float = 0.0) -> int:
        with self.lock:
            self.started += 1
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
            self.peak_ahead = max(self.peak_ahead, self.started - self.taken)
        try:
            if delay:
                time.sleep(delay)
            return x * x
        finally:
            with self.lock:
                self.running -= 1

    def take(self) -> None:
        with self.lock:
            self.taken += 1


def test_results_come_in_order_whatever_order_they_finish_in() -> None:
    rng = random.Random(7)
    delays = [rng.uniform(0, 0.01) for _ in range(60)]
    t = Tracker()
    out = list(
        read_ahead(
            lambda i: t.call(i, delays[i]),
            list(range(60)),
            workers=4,
            weight=lambda _: 1,
            max_weight=8,
        )
    )
    assert out == [i * i for i in range(60)]
    assert t.peak_running > 1  # the work did overlap
    assert t.peak_running <= 4


def test_the_work_ahead_of_a_slow_consumer_stays_bounded() -> None:
    t = Tracker()
    workers, max_weight = 2, 3
    results = read_ahead(
        lambda i: t.call(i),
        list(range(200)),
        workers=workers,
        weight=lambda _: 1,
        max_weight=max_weight,
    )
    for _ in range(20):
        next(results)
        t.take()
        time.sleep(0.01)  # the consumer's own work: the threads run ahead meanwhile
    results.close()
    # done and not taken: under max_weight, plus one; in the works: 2 x workers
    assert t.peak_ahead <= max_weight + 2 * workers + 1
    assert t.started < 20 + max_weight + 2 * workers + 2  # not the 200 items


def test_the_weight_bound_counts_what_each_result_weighs() -> None:
    t = Tracker()
    # each result weighs 10: past max_weight=10 only one waits ready, whatever the workers
    results = read_ahead(
        lambda i: t.call(i), list(range(100)), workers=1, weight=lambda _: 10, max_weight=10
    )
    next(results)
    t.take()
    time.sleep(0.1)
    ahead = t.started - t.taken
    results.close()
    assert ahead <= 1 + 2  # one ready (the bound), two in the works at most


def test_an_error_is_raised_at_its_turn_after_the_results_before_it() -> None:
    def fn(i: int) -> int:
        if i == 5:
            raise ValueError("item 5")
        time.sleep(0.002 * (10 - i))  # later items finish first
        return i

    got: list[int] = []
    with pytest.raises(ValueError, match="item 5"):
        for v in read_ahead(fn, list(range(10)), workers=4, weight=lambda _: 1, max_weight=100):
            got.append(v)
    assert got == [0, 1, 2, 3, 4]


def test_stopping_early_waits_for_the_running_calls_and_leaves_no_thread() -> None:
    before = set(threading.enumerate())
    t = Tracker()
    results = read_ahead(
        lambda i: t.call(i, 0.005), list(range(1000)), workers=3, weight=lambda _: 1, max_weight=4
    )
    assert [next(results), next(results)] == [0, 1]
    results.close()
    assert t.running == 0  # close returned after the calls in the works ended
    started = t.started
    time.sleep(0.05)
    assert t.started == started  # nothing starts after close
    assert started < 2 + 4 + 2 * 3 + 2
    assert set(threading.enumerate()) <= before  # none started here is left (others may end)


def test_no_items_no_threads() -> None:
    before = set(threading.enumerate())
    assert list(read_ahead(lambda i: i, [], workers=4, weight=lambda _: 1, max_weight=1)) == []
    assert set(threading.enumerate()) <= before  # none started here is left (others may end)


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        read_ahead(lambda i: i, [1], workers=0, weight=lambda _: 1, max_weight=1)
    with pytest.raises(ValueError):
        read_ahead(lambda i: i, [1], workers=1, weight=lambda _: 1, max_weight=0)


def test_the_callers_context_variables_hold_in_the_threads() -> None:
    token = LABEL.set("job-42")
    try:
        seen = list(
            read_ahead(
                lambda _: (LABEL.get(), threading.current_thread().name),
                list(range(8)),
                workers=2,
                weight=lambda _: 1,
                max_weight=2,
            )
        )
    finally:
        LABEL.reset(token)
    assert {label for label, _ in seen} == {"job-42"}
    assert all(name.startswith("skald-read-ahead") for _, name in seen)

    wrote: list[str] = []
    w = WriteBehind()
    LABEL.set("job-43")
    w.submit(lambda: wrote.append(LABEL.get()))
    w.wait()
    w.close()
    assert wrote == ["job-43"]


def test_write_behind_runs_one_write_at_a_time_behind_the_caller() -> None:
    w = WriteBehind()
    events: list[str] = []
    gate = threading.Event()

    def first() -> None:
        gate.wait(5)
        events.append("first")

    w.submit(first)
    events.append("caller works")  # while the first write waits
    gate.set()
    w.submit(lambda: events.append("second"))  # waits for the first before it starts
    w.wait()
    w.close()
    assert events == ["caller works", "first", "second"]


def test_write_behind_raises_a_failed_write_at_the_next_step() -> None:
    w = WriteBehind()

    def broken() -> None:
        raise OSError("index down")

    w.submit(broken)
    with pytest.raises(OSError, match="index down"):
        w.submit(lambda: None)
    w.submit(broken)
    with pytest.raises(OSError, match="index down"):
        w.wait()
    w.wait()  # reported once
    w.submit(broken)
    w.close()  # the caller is already failing: close does not raise


def test_next_ready_tells_whether_taking_the_next_result_would_wait() -> None:
    gate = threading.Event()

    def fn(i: int) -> int:
        if i == 1:
            gate.wait(5)
        return i

    results = read_ahead(fn, [0, 1, 2], workers=1, weight=lambda _: 1, max_weight=4)
    assert not results.next_ready()  # not started
    assert next(results) == 0
    assert not results.next_ready()  # item 1 waits for the gate
    gate.set()
    deadline = time.monotonic() + 5
    while not results.next_ready() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert results.next_ready()
    assert list(results) == [1, 2]
