"""Fixtures for the conformance suites: each port's adapters behind one parametrised fixture.

To run a suite against another adapter, write a backend factory (a context manager that takes
pytest's tmp_path, sets the backing service up, yields an opener and tears it down) and add
one entry to the port's table below, e.g. `BLOB_BACKENDS["s3"] = s3_blobs`.

An opener returns a *new* client on the *same* backing storage each time it is called, which
is how the suites test persistence (close, reopen, read back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from skald.adapters.local.blobstore import LocalBlobStore
from skald.adapters.local.jobqueue import SqliteJobQueue
from skald.adapters.local.statestore import SqliteStateStore
from skald.ports import BlobStore, JobQueue, StateStore


class QueueOpener(Protocol):
    def __call__(
        self,
        *,
        max_attempts: int = 5,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
    ) -> JobQueue: ...


@dataclass(frozen=True)
class QueueBackend:
    name: str
    open: QueueOpener
    # Shortest duration (visibility, delay, backoff) the backend honours reliably; the suite
    # expresses its waits in ticks (SQS works in whole seconds, so it would use 1.0).
    tick_s: float


T = TypeVar("T")
BlobOpener = Callable[[], BlobStore]
StateOpener = Callable[[], StateStore]


# --------------------------------------------------------------------------------------------
# local backends


@contextmanager
def local_blobs(tmp_path: Path) -> Iterator[BlobOpener]:
    root = tmp_path / "blobs"
    yield lambda: LocalBlobStore(root)


@contextmanager
def local_state(tmp_path: Path) -> Iterator[StateOpener]:
    path = tmp_path / "state.db"
    yield lambda: SqliteStateStore(path)


@contextmanager
def local_queue(tmp_path: Path) -> Iterator[QueueBackend]:
    path = tmp_path / "jobs.db"

    def open_queue(
        *, max_attempts: int = 5, backoff_base_s: float = 1.0, backoff_max_s: float = 60.0
    ) -> JobQueue:
        return SqliteJobQueue(
            path,
            max_attempts=max_attempts,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
        )

    yield QueueBackend(name="local", open=open_queue, tick_s=0.1)


BLOB_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[BlobOpener]]] = {
    "local": local_blobs,
}
STATE_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[StateOpener]]] = {
    "local": local_state,
}
QUEUE_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[QueueBackend]]] = {
    "local": local_queue,
}


# --------------------------------------------------------------------------------------------


def close_quietly(obj: object) -> None:
    close = getattr(obj, "close", None)
    if callable(close):
        close()


class _Tracker:
    """Closes every client a test opened, at teardown."""

    def __init__(self) -> None:
        self.opened: list[object] = []

    def track(self, obj: T) -> T:
        self.opened.append(obj)
        return obj

    def close_all(self) -> None:
        for obj in reversed(self.opened):
            close_quietly(obj)


@pytest.fixture(params=sorted(BLOB_BACKENDS))
def blob_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlobOpener]:
    tracker = _Tracker()
    with BLOB_BACKENDS[request.param](tmp_path) as opener:
        yield lambda: tracker.track(opener())
        tracker.close_all()


@pytest.fixture
def blob_store(blob_backend: BlobOpener) -> BlobStore:
    return blob_backend()


@pytest.fixture(params=sorted(STATE_BACKENDS))
def state_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateOpener]:
    tracker = _Tracker()
    with STATE_BACKENDS[request.param](tmp_path) as opener:
        yield lambda: tracker.track(opener())
        tracker.close_all()


@pytest.fixture
def state_store(state_backend: StateOpener) -> StateStore:
    return state_backend()


@pytest.fixture(params=sorted(QUEUE_BACKENDS))
def queue_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QueueBackend]:
    tracker = _Tracker()
    with QUEUE_BACKENDS[request.param](tmp_path) as backend:

        def open_tracked(
            *, max_attempts: int = 5, backoff_base_s: float = 1.0, backoff_max_s: float = 60.0
        ) -> JobQueue:
            queue = backend.open(
                max_attempts=max_attempts,
                backoff_base_s=backoff_base_s,
                backoff_max_s=backoff_max_s,
            )
            return tracker.track(queue)

        yield QueueBackend(name=backend.name, open=open_tracked, tick_s=backend.tick_s)
        tracker.close_all()


@pytest.fixture
def job_queue(queue_backend: QueueBackend) -> JobQueue:
    return queue_backend.open()


# --------------------------------------------------------------------------------------------
# sessions (appended as a block, imports included, so the fixtures above stay untouched)

from skald.adapters.local.sessionstore import SqliteSessionStore  # noqa: E402
from skald.ports import SessionStore  # noqa: E402

SessionOpener = Callable[[], SessionStore]


@contextmanager
def local_sessions(tmp_path: Path) -> Iterator[SessionOpener]:
    path = tmp_path / "state.db"
    yield lambda: SqliteSessionStore(path)


SESSION_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[SessionOpener]]] = {
    "local": local_sessions,
}


@pytest.fixture(params=sorted(SESSION_BACKENDS))
def session_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionOpener]:
    tracker = _Tracker()
    with SESSION_BACKENDS[request.param](tmp_path) as opener:
        yield lambda: tracker.track(opener())
        tracker.close_all()


@pytest.fixture
def session_store(session_backend: SessionOpener) -> SessionStore:
    return session_backend()
