"""The semantic worker reads the next files while it embeds a group, and writes a group to the
index while it embeds the next; on a remote store it reads several files at once. Whatever
overlaps, every file ends up indexed with its own text, and an error stops the job at its
file, after the groups before it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.paths.uri import parse_uri
from skald.services.ingest import semantic_files
from tests.support.compose import local_services
from tests.support.semantic_jobs import written_job

ME = Identity("acme", "ann", "user")
FILES = 24


class Timeline:
    """What happened while the model was embedding."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.embedding = False
        self.reads_while_embedding = 0
        self.writes_while_embedding = 0
        self.reads_at_once = 0
        self.peak_reads_at_once = 0
        self.reader: dict[str, str] = {}  # file name -> the thread that read it
        self.lists_at_once = 0
        self.peak_lists_at_once = 0


def spike(n: int) -> list[float]:
    vector = [0.0] * 384
    vector[n % 384] = 1.0
    return vector


class SlowEmbedder:
    dimension = 384
    model_id = "all-MiniLM-L6-v2-int8"

    def __init__(self, timeline: Timeline) -> None:
        self.t = timeline

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self.t.lock:
            self.t.embedding = True
        time.sleep(0.05)
        with self.t.lock:
            self.t.embedding = False
        return [spike(len(t)) for t in texts]  # a vector per text that tells texts apart


class WatchedBlobs:
    """The file system's blob store, noting its reads of content files."""

    def __init__(
        self, inner: Any, t: Timeline, *, delay: float = 0.0, broken: str | None = None
    ) -> None:
        self._inner, self._t, self._delay, self._broken = inner, t, delay, broken

    def get(self, key: str) -> bytes:
        if "/note" in key and not key.rsplit("/", 1)[1].startswith("."):
            with self._t.lock:
                self._t.reads_while_embedding += self._t.embedding
                self._t.reads_at_once += 1
                self._t.reader[key.rsplit("/", 1)[1]] = threading.current_thread().name
                self._t.peak_reads_at_once = max(self._t.peak_reads_at_once, self._t.reads_at_once)
            try:
                if self._broken and key.endswith(self._broken):
                    raise OSError(f"cannot read {self._broken}")
                time.sleep(self._delay)
            finally:
                with self._t.lock:
                    self._t.reads_at_once -= 1
        return bytes(self._inner.get(key))

    def list(self, prefix: str, **options: Any) -> Any:
        with self._t.lock:  # a directory's listing: its refresh
            self._t.lists_at_once += 1
            self._t.peak_lists_at_once = max(self._t.peak_lists_at_once, self._t.lists_at_once)
        try:
            time.sleep(self._delay)
            return self._inner.list(prefix, **options)
        finally:
            with self._t.lock:
                self._t.lists_at_once -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class WatchedIndex:
    def __init__(self, inner: Any, t: Timeline) -> None:
        self._inner, self._t = inner, t

    def replace_many(self, account: str, groups: Any) -> Any:
        time.sleep(0.02)  # a bulk write's round trip
        with self._t.lock:
            self._t.writes_while_embedding += self._t.embedding
        return self._inner.replace_many(account, groups)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Composition]:
    monkeypatch.setattr(semantic_files, "INDEX_GROUP_RECORDS", 4)  # six groups of four files
    c = local_services(Settings(backend="local", data_dir=tmp_path / "data"))
    yield c
    c.close()


def write_job(c: Composition) -> dict[str, Any]:
    return written_job(
        c,
        ME,
        (
            (
                f"viking://resources/lib/note{i:02d}.md",
                f"# Note {i}\n\n{'word ' * i}end {i}\n".encode(),
            )
            for i in range(FILES)
        ),
    )


def watch(c: Composition, t: Timeline, **blob_options: Any) -> None:
    c.semantic.embedder = SlowEmbedder(t)
    c.semantic.fs.blobs = WatchedBlobs(c.semantic.fs.blobs, t, **blob_options)
    c.semantic.index = WatchedIndex(c.semantic.index, t)


def run_watched(c: Composition, readers: int, **blob_options: Any) -> Timeline:
    """Writes the files, runs their job with `readers` watched, checks every file indexed."""
    t = Timeline()
    job = write_job(c)
    c.semantic.limits.read_workers = readers
    watch(c, t, **blob_options)
    (outcome,) = c.semantic.process_many([job])
    assert isinstance(outcome, dict) and outcome["indexed_files"] == FILES
    assert_all_indexed(c)
    return t


def assert_all_indexed(c: Composition, upto: int = FILES) -> None:
    for i in range(upto):
        (rec,) = c.index.get("acme", f"viking://resources/lib/note{i:02d}.md")
        assert rec.text.rstrip().endswith(f"end {i}"), rec.text
        assert rec.vector is not None and list(rec.vector) == spike(len(rec.text))


def test_files_are_read_and_groups_written_while_the_model_embeds(container: Composition) -> None:
    t = run_watched(container, 1)
    assert t.reads_while_embedding > 0  # the next group's files, read ahead
    assert t.writes_while_embedding > 0  # the last group, written behind
    assert t.peak_reads_at_once == 1  # locally, one reader


def test_a_remote_store_has_several_files_read_at_once(container: Composition) -> None:
    t = run_watched(container, 4, delay=0.02)  # a round trip to S3
    assert 1 < t.peak_reads_at_once <= 4


def test_a_file_that_cannot_be_read_fails_the_job_after_the_groups_before_it(
    container: Composition,
) -> None:
    t = Timeline()
    job = write_job(container)
    container.semantic.limits.read_workers = 4
    threads = set(threading.enumerate())
    watch(container, t, broken="note13.md")
    with pytest.raises(OSError, match="cannot read note13.md"):
        container.semantic.process(job)
    assert_all_indexed(container, 12)  # three whole groups before the broken file's
    for i in range(12, FILES):
        assert container.index.get("acme", f"viking://resources/lib/note{i:02d}.md") == []
    assert set(threading.enumerate()) <= threads  # no reader or writer left behind


def test_a_large_file_is_read_at_its_turn_by_the_worker_itself(
    container: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    # notes 0-9 are under 64 bytes, 10-23 over: a parse's memory grows with the file, so
    # only small files are read ahead, several at once
    monkeypatch.setattr(semantic_files, "READ_AHEAD_FILE_BYTES", 64)
    t = run_watched(container, 4, delay=0.01)
    me = threading.current_thread().name
    small = {f"note{i:02d}.md" for i in range(10)}
    assert {t.reader[name] for name in small} != {me}
    assert all(t.reader[name] == me for name in t.reader if name not in small)
    assert len(t.reader) == FILES


@pytest.mark.parametrize("readers", [1, 4])
def test_sibling_directories_are_refreshed_side_by_side_their_parent_after_them(
    container: Composition, readers: int
) -> None:
    job = written_job(
        container,
        ME,
        (
            (
                f"viking://resources/lib/shelf{i % 6}/book{i}.md",
                f"# Book {i}\n\nOn shelf {i % 6}.\n".encode(),
            )
            for i in range(12)
        ),
    )
    t = Timeline()
    container.semantic.limits.read_workers = readers
    watch(container, t, delay=0.01)
    (outcome,) = container.semantic.process_many([job])
    assert isinstance(outcome, dict) and outcome["refreshed_directories"] == 8  # 6, lib, root
    # side by side, at most as many as there are readers (exactly: a loaded machine may
    # start a thread late)
    assert t.peak_lists_at_once > 1 if readers > 1 else t.peak_lists_at_once == 1
    assert t.peak_lists_at_once <= readers
    # the parent lists every shelf with the abstract its refresh just wrote
    _, lib = container.fs.sidecar(
        ME, parse_uri("viking://resources/lib", user_id="ann"), ".overview.md"
    )
    for shelf in range(6):
        _, abstract = container.fs.sidecar(
            ME, parse_uri(f"viking://resources/lib/shelf{shelf}", user_id="ann"), ".abstract.md"
        )
        assert abstract and lib and f"- shelf{shelf}/: {abstract}" in lib
        assert container.index.get("acme", f"viking://resources/lib/shelf{shelf}/.abstract.md")


def test_the_model_starts_on_the_first_records_while_the_rest_are_read(
    container: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one group would hold every file: the model still starts once it has a few records and
    # the next file is not read yet, instead of waiting for the whole group
    monkeypatch.setattr(semantic_files, "INDEX_GROUP_RECORDS", 256)
    monkeypatch.setattr(semantic_files, "EARLY_GROUP_RECORDS", 4)
    t = run_watched(container, 2, delay=0.02)
    assert t.reads_while_embedding > 0
