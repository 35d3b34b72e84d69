"""Float32 rows read from a file (adapters/local/index/row_file.py): the exact re-scoring of the
compact index reads its candidates' vectors this way, cached or not."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from skald.adapters.local.index import row_file
from skald.adapters.local.index.row_file import FileRows, ScratchRows

DIM = 8


def _matrix(rows: int) -> np.ndarray:
    return np.arange(rows * DIM, dtype=np.float32).reshape(rows, DIM) / 7.0


def _saved(tmp_path: Path, rows: int) -> tuple[Path, np.ndarray]:
    mat = _matrix(rows)
    path = tmp_path / "rows.f32.npy"
    np.save(path, mat)
    return path, mat


def _join_warming() -> None:
    for thread in threading.enumerate():
        if thread.name == "skald-vectors-warm":
            thread.join(timeout=10)


_LIBC = ctypes.CDLL(None, use_errno=True)


def _resident(path: Path, offsets: tuple[int, ...]) -> list[bool]:
    """Whether the page cache holds the page at each offset, by mincore(2) on a mapping that
    is never touched: a probe by reading (even without waiting) would start the read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        mapped = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)  # writable view: an address
        try:
            start = ctypes.c_char.from_buffer(mapped)
            try:
                pages = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
                if (
                    _LIBC.mincore(
                        ctypes.c_void_p(ctypes.addressof(start)), ctypes.c_size_t(size), pages
                    )
                    != 0
                ):
                    raise OSError(ctypes.get_errno(), "mincore failed")
                return [bool(pages[at // mmap.PAGESIZE] & 1) for at in offsets]
            finally:
                del start
        finally:
            mapped.close()
    finally:
        os.close(fd)


def _evicted(path: Path, offsets: tuple[int, ...] = (4096 * 8,)) -> bool:
    """Drops the file's pages from the page cache; whether the pages at `offsets` are out of
    it now (a file system that keeps files in memory, such as tmpfs, never drops them). A page
    read a moment ago (the header, by the reader just opened) can escape one drop: it may
    still sit in another core's batch of pages on their way to the cache's lists."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        for _ in range(5):  # a busy machine may keep a page for a moment (writeback, a peer)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if not any(_resident(path, offsets)):
                return True
            time.sleep(0.05)
        return False
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "slots",
    [
        [],
        [0],
        [599],
        [3, 5, 7],
        [0, 64, 128, 129, 130, 598],
        list(range(0, 600, 7)),  # scattered, more than one probe apart
        list(range(100, 1500)),  # dense: one read
    ],
)
def test_take_returns_the_rows_in_order(tmp_path: Path, slots: list[int]) -> None:
    path, mat = _saved(tmp_path, 1_500)
    rows = FileRows(path, DIM)
    try:
        got = rows.take(np.asarray(slots, dtype=np.int64))
        assert got.shape == (len(slots), DIM)
        assert np.array_equal(got, mat[slots])
    finally:
        rows.close()


def test_a_file_shorter_than_its_header_is_an_error(tmp_path: Path) -> None:
    path, _ = _saved(tmp_path, 200)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - DIM * 4 * 10)  # the last 10 rows cut off
    rows = FileRows(path, DIM)
    try:
        assert rows.take(np.asarray([0, 150], dtype=np.int64)).shape == (2, DIM)
        with pytest.raises(OSError, match="shorter"):
            rows.take(np.asarray([0, 195], dtype=np.int64))
    finally:
        rows.close()


ROWS = 20_000
SLOTS = np.arange(0, ROWS, 97, dtype=np.int64)  # 207 rows, about one a page


@pytest.fixture
def uncached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FileRows, np.ndarray, list[tuple[int, int, int]]]]:
    """A file of ROWS rows opened, then dropped from the page cache, and the posix_fadvise
    calls made from then on (offset, length, advice)."""
    if not hasattr(os, "RWF_NOWAIT"):
        pytest.skip("needs preadv with RWF_NOWAIT")
    path, mat = _saved(tmp_path, ROWS)
    rows = FileRows(path, DIM)
    advised: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((offset, length, advice))
        real(fd, offset, length, advice)

    # Every row take() probes must wait: a cached first probe would read on without advice.
    probes = tuple(rows.offset + int(s) * DIM * 4 for s in SLOTS[:: row_file._PROBE_EVERY])
    real_preadv = os.preadv

    def preadv(fd: int, buffers: list[bytearray], offset: int, *flags: int) -> int:
        # A probe's answer, pinned to what RWF_NOWAIT promises: it would block when the page
        # is not in the cache as the call starts. The kernel's own answer is a race on a fast
        # disk: the probe starts a read of its page, which can complete before the kernel
        # looks at the page again and finds it there.
        if flags and flags[0] & os.RWF_NOWAIT and not _resident(path, (offset,))[0]:
            raise BlockingIOError(errno.EAGAIN, "would block")
        return real_preadv(fd, buffers, offset, *flags)

    try:
        try:  # the header's page is cached: just written
            real_preadv(rows._file.fileno(), [bytearray(1)], 0, os.RWF_NOWAIT)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                pytest.skip("this file system does not take RWF_NOWAIT: rows are read plainly")
        if not _evicted(path, probes):
            pytest.skip("this file system keeps the file in memory: nothing to read ahead")
        monkeypatch.setattr(os, "preadv", preadv)
        monkeypatch.setattr(os, "posix_fadvise", record)
        yield rows, mat, advised
    finally:
        rows.close()


def test_uncached_rows_are_all_asked_for_before_the_first_is_waited_for(
    uncached: tuple[FileRows, np.ndarray, list[tuple[int, int, int]]],
) -> None:
    rows, mat, advised = uncached
    assert np.array_equal(rows.take(SLOTS), mat[SLOTS])
    _join_warming()
    per_row = [a for a in advised if a[1] == DIM * 4]
    # The first probe found the file uncached: every row from there on was asked for.
    assert per_row == [
        (rows.offset + int(s) * DIM * 4, DIM * 4, os.POSIX_FADV_WILLNEED) for s in SLOTS
    ]
    # and the whole file, once, in the background (it is far below a quarter of memory),
    # through a description of its own whose readahead is off
    size = rows.offset + ROWS * DIM * 4
    whole = [a for a in advised if a[1] != DIM * 4]
    assert size < row_file._WARM_STEP
    assert whole == [(0, 0, os.POSIX_FADV_RANDOM), (0, size, os.POSIX_FADV_WILLNEED)]
    advised.clear()
    assert np.array_equal(rows.take(SLOTS), mat[SLOTS])  # cached now: no advice
    _join_warming()
    assert advised == []


def test_a_file_above_a_quarter_of_the_available_memory_is_not_read_ahead_whole(
    uncached: tuple[FileRows, np.ndarray, list[tuple[int, int, int]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows, mat, advised = uncached
    size = rows.offset + ROWS * DIM * 4
    monkeypatch.setattr(row_file, "available_memory", lambda: 4 * size - 4)
    assert np.array_equal(rows.take(SLOTS), mat[SLOTS])
    _join_warming()
    assert advised and {length for _, length, _ in advised} == {DIM * 4}  # the rows only


def test_the_background_read_asks_for_one_step_at_a_time(
    uncached: tuple[FileRows, np.ndarray, list[tuple[int, int, int]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each step is waited for before the next is asked for: a query's reads queue behind
    one step on a slow disk, not behind the whole file (measured: 100k records, disk reads
    throttled to 10 MB/s, hybrid find p95 187-204 ms when every step was asked for at once,
    40-50 ms one step at a time)."""
    rows, mat, advised = uncached
    step = 64 * 1024
    monkeypatch.setattr(row_file, "_WARM_STEP", step)
    events: list[tuple[str, int]] = []
    real_preadv = os.preadv

    def preadv(fd: int, buffers: list[bytearray], offset: int, *flags: int) -> int:
        if threading.current_thread().name == "skald-vectors-warm":
            events.append(("read", offset))
        return real_preadv(fd, buffers, offset, *flags)

    monkeypatch.setattr(os, "preadv", preadv)
    assert np.array_equal(rows.take(SLOTS), mat[SLOTS])
    _join_warming()
    size = rows.offset + ROWS * DIM * 4
    steps = [(at, min(step, size - at)) for at in range(0, size, step)]
    asked = [
        (at, length)
        for at, length, advice in advised
        if advice == os.POSIX_FADV_WILLNEED and length != DIM * 4
    ]
    assert asked == steps
    # one read of each step's last byte, in order: the thread waited for every step
    assert events == [("read", at + length - 1) for at, length in steps]


def test_the_background_read_has_its_own_file_description(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = _saved(tmp_path, 100)
    with open(path, "rb") as f:
        fd, own = row_file._reopen(f.fileno())
        try:
            if not own:
                pytest.skip("no /proc/self/fd here: the background read shares the file's")
            os.lseek(fd, 100, os.SEEK_SET)
            assert os.lseek(f.fileno(), 0, os.SEEK_CUR) == 0  # its own offset, its own state
        finally:
            os.close(fd)

        def no_proc(*_: Any) -> int:
            raise FileNotFoundError("/proc/self/fd")

        monkeypatch.setattr(os, "open", no_proc)
        fd, own = row_file._reopen(f.fileno())
        os.close(fd)
        assert own is False  # a duplicate, which is never told to stop reading ahead


def test_available_memory_is_read_from_meminfo() -> None:
    available = row_file.available_memory()
    if not Path("/proc/meminfo").exists():
        assert available is None
    else:
        assert available is not None and 0 < available <= os.sysconf("SC_PAGE_SIZE") * os.sysconf(
            "SC_PHYS_PAGES"
        )


def test_a_file_system_without_nowait_reads_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, mat = _saved(tmp_path, 1_000)
    rows = FileRows(path, DIM)
    calls = 0

    def refuse(*_: Any) -> int:
        nonlocal calls
        calls += 1
        raise OSError(errno.EOPNOTSUPP, "not supported")

    try:
        rows._nowait = 8  # as a platform with the flag would have it
        monkeypatch.setattr(os, "preadv", refuse)
        slots = np.arange(0, 1_000, 3, dtype=np.int64)
        assert np.array_equal(rows.take(slots), mat[slots])
        assert np.array_equal(rows.take(slots), mat[slots])
        assert calls == 1  # asked once, then never again for this file
    finally:
        rows.close()


def test_scratch_rows_read_back_what_was_appended(tmp_path: Path) -> None:
    scratch = ScratchRows(tmp_path / "scratch", DIM)
    try:
        first, second = _matrix(100), _matrix(300)[200:]
        scratch.append(first)
        scratch.append(second)
        assert scratch.shape == (200, DIM)
        slots = np.asarray([0, 99, 100, 150, 199], dtype=np.int64)
        assert np.array_equal(scratch.take(slots), np.concatenate([first, second])[slots])
        assert list(Path(tmp_path / "scratch").iterdir()) == []  # unnamed: nothing to clean
    finally:
        scratch.close()
