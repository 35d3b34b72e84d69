"""The deadline of the job running in this thread: a time.monotonic() value, or None (no limit).

The entry point that runs a job sets it (a worker Lambda: its remaining time; the local
worker pool: a configured budget, if any), and handlers that can split their work (semantic
jobs) read it. A context variable keeps the handler signature `handler(services, payload)`
the same for every job kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("skald_job_deadline", default=None)
# A job's turn (seconds; None: none): how long a job that can split its work works before it
# hands the rest on behind the jobs waiting meanwhile (fairness between accounts).
_SLICE: ContextVar[float | None] = ContextVar("skald_job_slice", default=None)


def current_deadline() -> float | None:
    return _DEADLINE.get()


@contextmanager
def job_deadline(deadline: float | None) -> Iterator[None]:
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def current_slice() -> float | None:
    return _SLICE.get()


@contextmanager
def job_slice(slice_s: float | None) -> Iterator[None]:
    token = _SLICE.set(slice_s)
    try:
        yield
    finally:
        _SLICE.reset(token)
