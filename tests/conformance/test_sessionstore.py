"""SessionStore conformance: every adapter, through the port only (local specifics at the end)."""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from skald.adapters.local.sqlite.sessionstore import SqliteSessionStore
from skald.adapters.local.sqlite.statestore import SqliteDb, SqliteStateStore
from skald.domain.memory.archives import ArchiveStatus
from skald.ports import (
    Account,
    ArchiveRecord,
    SessionMessage,
    SessionRecord,
    SessionStore,
    StateConflict,
    StateNotFound,
)
from tests.conformance.conftest import SessionOpener

T0 = 1_700_000_000.0
A, U = "acme", "alice"


def make_session(
    session_id: str, account: str = A, user: str = U, **overrides: Any
) -> SessionRecord:
    fields: dict[str, Any] = {
        "account_id": account,
        "user_id": user,
        "session_id": session_id,
        "created_at": T0,
        "updated_at": T0,
        "last_activity": T0,
    }
    fields.update(overrides)
    return SessionRecord(**fields)


def msg(n: int, tokens: int = 1, **overrides: Any) -> SessionMessage:
    fields: dict[str, Any] = {
        "seq": 0,
        "message_id": f"m{n}",
        "role": "user" if n % 2 else "assistant",
        "parts": [{"type": "text", "text": f"message {n}"}],
        "created_at": f"2024-01-01T00:00:{n % 60:02d}Z",
        "tokens": tokens,
    }
    fields.update(overrides)
    return SessionMessage(**fields)


def seqs(messages: list[SessionMessage]) -> list[int]:
    return [m.seq for m in messages]


def session(store: SessionStore, session_id: str, account: str = A, user: str = U) -> SessionRecord:
    record = store.get_session(account, user, session_id)
    assert record is not None
    return record


def append(
    store: SessionStore,
    session_id: str,
    *messages: SessionMessage,
    now: float = T0 + 10,
    idle_deadline: float | None = None,
) -> SessionRecord:
    return store.append_messages(
        A, U, session_id, list(messages), now=now, idle_deadline=idle_deadline
    )


def reserve(
    store: SessionStore,
    session_id: str,
    keep_recent: int = 0,
    *,
    reset: bool = False,
    task_id: str | None = None,
) -> ArchiveRecord | None:
    return store.reserve_archive(
        A, U, session_id, keep_recent=keep_recent, now=T0 + 100, task_id=task_id, reset=reset
    )


def raise_first(errors: list[BaseException]) -> None:
    assert not errors, "".join(traceback.format_exception(errors[0])) if errors else ""


def test_implements_port(session_store: SessionStore) -> None:
    assert isinstance(session_store, SessionStore)


# --------------------------------------------------------------------------------------------
# sessions


def test_session_crud(session_store: SessionStore) -> None:
    assert session_store.get_session(A, U, "s1") is None
    assert session_store.list_sessions(A, U) == []
    session_store.create_session(make_session("s1"))
    session_store.create_session(make_session("s2", created_at=T0 + 1))
    session_store.create_session(make_session("s3", user="bob"))
    assert session_store.get_session(A, U, "s1") == make_session("s1")
    assert sorted(s.session_id for s in session_store.list_sessions(A, U)) == ["s1", "s2"]
    assert [s.session_id for s in session_store.list_sessions(A, "bob")] == ["s3"]
    assert session_store.delete_session(A, U, "s2") is True
    assert session_store.delete_session(A, U, "s2") is False
    assert session_store.get_session(A, U, "s2") is None
    assert [s.session_id for s in session_store.list_sessions(A, U)] == ["s1"]
    assert session_store.get_session(A, "bob", "s3") is not None


def test_count_sessions_of_an_account(session_store: SessionStore) -> None:
    assert session_store.count_sessions(A) == 0
    session_store.create_session(make_session("s1"))
    session_store.create_session(make_session("s2"))
    session_store.create_session(make_session("s3", user="bob"))
    session_store.create_session(make_session("s4", account="beta"))
    assert session_store.count_sessions(A) == 3
    assert session_store.count_sessions("beta") == 1
    session_store.delete_session(A, U, "s2")
    assert session_store.count_sessions(A) == 2
    session_store.delete_account_sessions(A)
    assert session_store.count_sessions(A) == 0 and session_store.count_sessions("beta") == 1


def test_session_round_trips_every_field(session_store: SessionStore) -> None:
    record = make_session(
        "s1",
        memories_extracted=3,
        failed_archive=None,
        memory_policy={"types": ["preferences", "events"], "note": "ü ✓"},
        auto_commit_policy={"idle_s": 600, "max_tokens": 8000},
        extraction_config={"model": "x", "nested": {"a": [1, 2.5, None, True]}},
        idle_deadline=T0 + 600,
        meta={"title": "Plans", "tags": []},
    )
    session_store.create_session(record)
    assert session_store.get_session(A, U, "s1") == record
    session_store.create_session(make_session("s2", auto_commit_policy=None))
    assert session(session_store, "s2").auto_commit_policy is None


def test_duplicate_session_conflicts(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1", meta={"v": 1}))
    with pytest.raises(StateConflict):
        session_store.create_session(make_session("s1", meta={"v": 2}))
    assert session(session_store, "s1").meta == {"v": 1}
    # The id is unique per (account, user) only.
    session_store.create_session(make_session("s1", user="bob"))
    session_store.create_session(make_session("s1", account="beta"))


def test_update_session(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    before = time.time()
    got = session_store.update_session(
        A,
        U,
        "s1",
        meta={"title": "t"},
        auto_commit_policy={"idle_s": 60},
        idle_deadline=T0 + 60,
        memories_extracted=4,
    )
    assert got.meta == {"title": "t"} and got.auto_commit_policy == {"idle_s": 60}
    assert got.idle_deadline == T0 + 60 and got.memories_extracted == 4
    assert got.updated_at >= before  # stamped when not given
    assert got == session_store.get_session(A, U, "s1")
    got = session_store.update_session(
        A, U, "s1", updated_at=T0 + 5, idle_deadline=None, auto_commit_policy=None
    )
    assert (got.updated_at, got.idle_deadline, got.auto_commit_policy) == (T0 + 5, None, None)
    assert got.meta == {"title": "t"}  # untouched fields stay
    assert got.created_at == T0 and got.last_seq == 0
    with pytest.raises(StateNotFound):
        session_store.update_session(A, U, "nope", meta={})
    with pytest.raises(StateNotFound):
        session_store.update_session("beta", U, "s1", meta={})


# --------------------------------------------------------------------------------------------
# messages


def test_append_assigns_consecutive_seqs_and_counters(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    first = [msg(1, 10), msg(2, 20), msg(3, 5)]
    got = append(session_store, "s1", *first, now=T0 + 10, idle_deadline=T0 + 610)
    assert seqs(first) == [1, 2, 3]  # the caller's messages carry their seqs
    assert (got.last_seq, got.archived_seq, got.live_tokens, got.live_count) == (3, 0, 35, 3)
    assert (got.last_activity, got.updated_at, got.idle_deadline) == (T0 + 10, T0 + 10, T0 + 610)
    assert got == session_store.get_session(A, U, "s1")
    second = [msg(4, 1), msg(5, 2)]
    got = append(session_store, "s1", *second, now=T0 + 20, idle_deadline=T0 + 620)
    assert seqs(second) == [4, 5]
    assert (got.last_seq, got.live_tokens, got.last_activity, got.idle_deadline) == (
        5,
        38,
        T0 + 20,
        T0 + 620,
    )
    assert got.created_at == T0
    assert seqs(session_store.list_messages(A, U, "s1")) == [1, 2, 3, 4, 5]


def test_message_round_trips_every_field(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    full = msg(
        1,
        7,
        role="assistant",
        parts=[
            {"type": "text", "text": "héllo ✓"},
            {"type": "tool", "name": "grep", "input": {"q": "x"}, "output": None},
        ],
        created_at="2024-05-06T07:08:09.123Z",
        peer_id="peer-1",
        turn_id="turn-9",
        message_kind="tool_result",
        extra={"usage": {"in": 3, "out": 4}, "flag": False},
    )
    bare = msg(2, 0)
    append(session_store, "s1", full, bare)
    assert session_store.list_messages(A, U, "s1") == [full, bare]


def test_append_to_missing_session(session_store: SessionStore) -> None:
    messages = [msg(1)]
    with pytest.raises(StateNotFound):
        append(session_store, "nope", *messages)
    assert messages[0].seq == 0
    assert session_store.list_messages(A, U, "nope") == []


def test_list_messages_ranges(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    append(session_store, "s1", *[msg(n) for n in range(1, 11)])
    assert seqs(session_store.list_messages(A, U, "s1")) == list(range(1, 11))
    assert seqs(session_store.list_messages(A, U, "s1", after_seq=7)) == [8, 9, 10]
    assert seqs(session_store.list_messages(A, U, "s1", upto_seq=3)) == [1, 2, 3]
    assert seqs(session_store.list_messages(A, U, "s1", after_seq=3, upto_seq=6)) == [4, 5, 6]
    assert session_store.list_messages(A, U, "s1", after_seq=5, upto_seq=5) == []
    assert session_store.list_messages(A, U, "s1", after_seq=10) == []
    assert seqs(session_store.list_messages(A, U, "s1", after_seq=9, upto_seq=50)) == [10]
    assert [m.message_id for m in session_store.list_messages(A, U, "s1", upto_seq=2)] == [
        "m1",
        "m2",
    ]


def test_delete_session_cascades(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    session_store.create_session(make_session("s2"))
    append(session_store, "s1", msg(1), msg(2), msg(3))
    append(session_store, "s2", msg(1))
    assert reserve(session_store, "s1", keep_recent=1) is not None
    assert session_store.delete_session(A, U, "s1") is True
    assert session_store.list_messages(A, U, "s1") == []
    assert session_store.list_archives(A, U, "s1") == []
    assert session_store.get_archive(A, U, "s1", 1) is None
    # A new session under the old id starts from scratch: no stale messages or archive rows.
    session_store.create_session(make_session("s1"))
    fresh = [msg(9)]
    append(session_store, "s1", *fresh)
    assert seqs(fresh) == [1]
    archive = reserve(session_store, "s1")
    assert archive is not None and (archive.number, archive.start_seq, archive.end_seq) == (1, 1, 1)
    assert len(session_store.list_messages(A, U, "s2")) == 1  # the sibling is untouched


# --------------------------------------------------------------------------------------------
# archives


def test_reserve_archive_keeps_recent_messages(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    append(session_store, "s1", *[msg(n, tokens=n) for n in range(1, 6)], idle_deadline=T0 + 600)
    archive = session_store.reserve_archive(
        A, U, "s1", keep_recent=2, now=T0 + 50, task_id="task-1"
    )
    assert archive == ArchiveRecord(
        A,
        U,
        "s1",
        number=1,
        start_seq=1,
        end_seq=3,
        created_at=T0 + 50,
        status=ArchiveStatus.PENDING,
        task_id="task-1",
    )
    assert archive.archive_id == "archive_001"
    assert session_store.get_archive(A, U, "s1", 1) == archive
    got = session(session_store, "s1")
    assert (got.archived_seq, got.next_archive, got.commit_count) == (3, 2, 1)
    assert got.live_tokens == 4 + 5 and got.live_count == 2
    assert got.idle_deadline == T0 + 600  # messages stay live, so the idle commit stays due
    # The two kept messages are all that is live: nothing more to archive while kept.
    assert reserve(session_store, "s1", keep_recent=2) is None
    assert reserve(session_store, "s1", keep_recent=5) is None
    assert session(session_store, "s1") == got
    archive = reserve(session_store, "s1", keep_recent=0, task_id="task-2")
    assert archive is not None
    assert (archive.number, archive.start_seq, archive.end_seq) == (2, 4, 5)
    got = session(session_store, "s1")
    assert (got.archived_seq, got.next_archive, got.commit_count) == (5, 3, 2)
    assert (got.live_tokens, got.live_count, got.idle_deadline) == (0, 0, None)
    assert reserve(session_store, "s1") is None
    # Archived messages stay readable by range.
    assert seqs(session_store.list_messages(A, U, "s1", upto_seq=3)) == [1, 2, 3]


def test_reserve_archive_on_empty_and_missing_sessions(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    assert reserve(session_store, "s1") is None
    assert session_store.list_archives(A, U, "s1") == []
    assert session(session_store, "s1").next_archive == 1
    with pytest.raises(StateNotFound):
        reserve(session_store, "nope")


def test_archive_numbers_are_dense_and_ranges_contiguous(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    for batch in range(3):
        append(session_store, "s1", *[msg(batch * 10 + n) for n in range(4)])
        assert reserve(session_store, "s1", keep_recent=1) is not None
    archives = session_store.list_archives(A, U, "s1")
    assert [a.number for a in archives] == [1, 2, 3]
    assert [a.archive_id for a in archives] == ["archive_001", "archive_002", "archive_003"]
    assert [(a.start_seq, a.end_seq) for a in archives] == [(1, 3), (4, 7), (8, 11)]
    assert [session_store.get_archive(A, U, "s1", n) for n in (1, 2, 3)] == archives
    assert session_store.get_archive(A, U, "s1", 4) is None
    got = session(session_store, "s1")
    assert (got.last_seq, got.archived_seq, got.next_archive, got.commit_count) == (12, 11, 4, 3)


def test_reset_archives(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    append(session_store, "s1", msg(1, 3), msg(2, 4), msg(3, 5), idle_deadline=T0 + 600)
    archive = reserve(session_store, "s1", keep_recent=0, reset=True, task_id="t")
    assert archive is not None
    assert (archive.number, archive.start_seq, archive.end_seq, archive.status) == (
        1,
        1,
        3,
        "reset",
    )
    got = session(session_store, "s1")
    assert (got.archived_seq, got.live_tokens, got.idle_deadline, got.commit_count) == (
        3,
        0,
        None,
        1,
    )
    # A reset with nothing live still takes a number, with an empty range after the watermark.
    empty = reserve(session_store, "s1", reset=True)
    assert empty is not None
    assert (empty.number, empty.start_seq, empty.end_seq, empty.status) == (2, 4, 3, "reset")
    got = session(session_store, "s1")
    assert (got.archived_seq, got.next_archive, got.commit_count) == (3, 3, 2)
    # keep_recent applies to resets too; the kept messages stay live.
    append(session_store, "s1", msg(4, 1), msg(5, 2))
    kept = reserve(session_store, "s1", keep_recent=5, reset=True)
    assert kept is not None and (kept.number, kept.start_seq, kept.end_seq) == (3, 4, 3)
    assert session(session_store, "s1").live_tokens == 3
    normal = reserve(session_store, "s1")
    assert normal is not None and (normal.number, normal.start_seq, normal.end_seq) == (4, 4, 5)
    assert normal.status == "pending"


def test_update_archive(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    append(session_store, "s1", msg(1))
    archive = reserve(session_store, "s1")
    assert archive is not None
    got = session_store.update_archive(
        A, U, "s1", 1, status="done", meta={"memories": 2}, task_id="task-9", error=None
    )
    assert (got.status, got.meta, got.task_id, got.error) == (
        "done",
        {"memories": 2},
        "task-9",
        None,
    )
    assert (got.start_seq, got.end_seq, got.created_at) == (1, 1, archive.created_at)
    assert session_store.get_archive(A, U, "s1", 1) == got
    with pytest.raises(StateNotFound):
        session_store.update_archive(A, U, "s1", 2, status="done")
    with pytest.raises(StateNotFound):
        session_store.update_archive(A, U, "nope", 1, status="done")


def test_failed_archive_blocks_commits_until_resolved(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    append(session_store, "s1", msg(1), msg(2))
    assert reserve(session_store, "s1", keep_recent=1) is not None
    assert reserve(session_store, "s1") is not None
    failed = session_store.update_archive(A, U, "s1", 2, status="failed", error="llm down")
    assert (failed.status, failed.error) == ("failed", "llm down")
    assert session(session_store, "s1").failed_archive == "archive_002"
    append(session_store, "s1", msg(3))
    blocked = session(session_store, "s1")
    with pytest.raises(StateConflict):
        reserve(session_store, "s1")
    with pytest.raises(StateConflict):
        reserve(session_store, "s1", reset=True)
    assert session(session_store, "s1") == blocked  # the refused commit changed nothing
    assert len(session_store.list_archives(A, U, "s1")) == 2
    # Resolving another archive does not lift the block.
    session_store.update_archive(A, U, "s1", 1, status="done")
    assert session(session_store, "s1").failed_archive == "archive_002"
    session_store.update_archive(A, U, "s1", 2, meta={"retry": 1})  # no status: still failed
    assert session(session_store, "s1").failed_archive == "archive_002"
    session_store.update_archive(A, U, "s1", 2, status="done", error=None)
    assert session(session_store, "s1").failed_archive is None
    archive = reserve(session_store, "s1")
    assert archive is not None and (archive.number, archive.start_seq, archive.end_seq) == (3, 3, 3)


# --------------------------------------------------------------------------------------------
# idle auto-commit


def test_due_idle_sessions(session_store: SessionStore) -> None:
    for sid in ("late", "early", "future", "nodeadline", "empty", "committed", "kept"):
        session_store.create_session(make_session(sid))
    session_store.create_session(make_session("other", account="beta", user="bob"))
    append(session_store, "late", msg(1), idle_deadline=T0 + 300)
    append(session_store, "early", msg(1), idle_deadline=T0 + 100)
    append(session_store, "future", msg(1), idle_deadline=T0 + 10_000)
    append(session_store, "nodeadline", msg(1), idle_deadline=None)
    session_store.update_session(A, U, "empty", idle_deadline=T0)  # due but nothing live
    append(session_store, "committed", msg(1), idle_deadline=T0 + 50)
    assert reserve(session_store, "committed") is not None
    append(session_store, "kept", msg(1), msg(2), idle_deadline=T0 + 200)
    assert reserve(session_store, "kept", keep_recent=1) is not None  # one message stays live
    session_store.append_messages("beta", "bob", "other", [msg(1)], now=T0, idle_deadline=T0 + 150)
    now = T0 + 1000
    assert session_store.due_idle_sessions(now) == [
        (A, U, "early"),
        ("beta", "bob", "other"),
        (A, U, "kept"),
        (A, U, "late"),
    ]
    assert session_store.due_idle_sessions(now, limit=2) == [
        (A, U, "early"),
        ("beta", "bob", "other"),
    ]
    assert session_store.due_idle_sessions(T0 + 100) == [(A, U, "early")]  # inclusive
    assert session_store.due_idle_sessions(T0 + 99) == []
    # Appending pushes the deadline back.
    append(session_store, "early", msg(2), idle_deadline=T0 + 5000)
    assert (A, U, "early") not in session_store.due_idle_sessions(now)


# --------------------------------------------------------------------------------------------
# isolation, concurrency, persistence


def test_accounts_and_users_are_isolated(session_store: SessionStore) -> None:
    keys = [(A, U), ("beta", U), (A, "bob")]
    for account, user in keys:
        session_store.create_session(make_session("s1", account=account, user=user))
    session_store.append_messages(
        A, U, "s1", [msg(1, 5), msg(2, 5), msg(3, 5)], now=T0, idle_deadline=T0
    )
    other = [msg(7, 1)]
    session_store.append_messages("beta", U, "s1", other, now=T0, idle_deadline=None)
    assert seqs(other) == [1]  # its own sequence
    assert (
        session_store.reserve_archive(A, U, "s1", keep_recent=0, now=T0, task_id=None) is not None
    )
    session_store.update_archive(A, U, "s1", 1, status="failed")
    beta = session_store.get_session("beta", U, "s1")
    bob = session_store.get_session(A, "bob", "s1")
    assert beta is not None and bob is not None
    assert (beta.last_seq, beta.archived_seq, beta.live_tokens, beta.failed_archive) == (
        1,
        0,
        1,
        None,
    )
    assert (bob.last_seq, bob.next_archive) == (0, 1)
    assert [m.message_id for m in session_store.list_messages("beta", U, "s1")] == ["m7"]
    assert session_store.list_archives("beta", U, "s1") == []
    assert session_store.get_archive("beta", U, "s1", 1) is None
    archive = session_store.reserve_archive("beta", U, "s1", keep_recent=0, now=T0, task_id=None)
    assert archive is not None and archive.number == 1  # not blocked by acme's failure
    assert session_store.list_sessions("beta", U) == [session(session_store, "s1", "beta")]
    assert session_store.delete_session("beta", U, "s1") is True
    assert len(session_store.list_messages(A, U, "s1")) == 3
    assert [a.number for a in session_store.list_archives(A, U, "s1")] == [1]
    assert session_store.get_session(A, "bob", "s1") is not None


class _Race:
    """Writers appending to session s1 while committers reserve archives from it."""

    def __init__(self, store: SessionStore, writers: int, per_writer: int, committers: int) -> None:
        self.store, self.per_writer = store, per_writer
        self.start = threading.Barrier(writers + committers)
        self.writing = threading.Event()
        self.writing.set()
        self.reserved: list[ArchiveRecord] = []
        self.errors: list[BaseException] = []

    def tokens(self, writer: int, i: int) -> int:
        return 1 + (writer * self.per_writer + i) % 7

    def write(self, writer: int) -> None:
        try:
            self.start.wait()
            for i in range(self.per_writer):
                m = msg(i, self.tokens(writer, i), message_id=f"w{writer}-{i}")
                self.store.append_messages(A, U, "s1", [m], now=T0 + i, idle_deadline=T0 + 600)
                assert m.seq > 0
        except BaseException as exc:  # pragma: no cover - reported below
            self.errors.append(exc)

    def commit(self, committer: int) -> None:
        rng = random.Random(committer)
        try:
            self.start.wait()
            while self.writing.is_set():
                archive = self.store.reserve_archive(
                    A, U, "s1", keep_recent=rng.randint(0, 3), now=T0, task_id=f"c{committer}"
                )
                if archive is not None:
                    self.reserved.append(archive)
                time.sleep(0.002)
        except BaseException as exc:  # pragma: no cover - reported below
            self.errors.append(exc)


def _race_writers_and_committers(
    store: SessionStore, writers: int, per_writer: int, committers: int
) -> list[ArchiveRecord]:
    """`writers` threads append `per_writer` messages each while `committers` threads reserve
    archives until the writers are done; the archives the committers reserved."""
    race = _Race(store, writers, per_writer, committers)
    write_threads = [threading.Thread(target=race.write, args=(i,)) for i in range(writers)]
    commit_threads = [threading.Thread(target=race.commit, args=(i,)) for i in range(committers)]
    for t in write_threads + commit_threads:
        t.start()
    for t in write_threads:
        t.join()
    race.writing.clear()
    for t in commit_threads:
        t.join()
    raise_first(race.errors)
    return race.reserved


def _assert_each_writer_in_order(
    messages: list[SessionMessage], writers: int, per_writer: int
) -> None:
    # Each writer's messages keep their order, and nothing was lost or duplicated.
    by_writer: dict[int, list[int]] = {}
    for m in messages:
        writer, i = m.message_id[1:].split("-")
        by_writer.setdefault(int(writer), []).append(int(i))
    assert by_writer == {w: list(range(per_writer)) for w in range(writers)}


def _assert_archives_tile(
    archives: list[ArchiveRecord], reserved: list[ArchiveRecord], got: SessionRecord, total: int
) -> None:
    """The archives are the ones reserved, densely numbered, and cover seqs 1..archived_seq
    exactly once, in order."""
    assert archives, "the committers never reserved anything"
    assert sorted(archives, key=lambda a: a.number) == sorted(reserved, key=lambda a: a.number)
    assert [a.number for a in archives] == list(range(1, len(archives) + 1))
    assert archives[0].start_seq == 1
    for before, after in zip(archives, archives[1:], strict=False):
        assert after.start_seq == before.end_seq + 1
    assert all(a.start_seq <= a.end_seq for a in archives)
    assert archives[-1].end_seq == got.archived_seq
    owners = Counter(seq for a in archives for seq in range(a.start_seq, a.end_seq + 1))
    for seq in range(1, total + 1):
        assert owners[seq] == (1 if seq <= got.archived_seq else 0), seq


def test_concurrent_appends_and_commits(session_store: SessionStore) -> None:
    session_store.create_session(make_session("s1"))
    writers, per_writer, committers = 8, 50, 4
    reserved = _race_writers_and_committers(session_store, writers, per_writer, committers)

    total = writers * per_writer
    got = session(session_store, "s1")
    messages = session_store.list_messages(A, U, "s1")
    assert got.last_seq == total and seqs(messages) == list(range(1, total + 1))
    _assert_each_writer_in_order(messages, writers, per_writer)

    archives = session_store.list_archives(A, U, "s1")
    _assert_archives_tile(archives, reserved, got, total)
    assert (got.next_archive, got.commit_count) == (len(archives) + 1, len(archives))
    assert got.live_tokens == sum(m.tokens for m in messages if m.seq > got.archived_seq)


def test_sessions_persist_across_clients(session_backend: SessionOpener) -> None:
    first = session_backend()
    first.create_session(make_session("s1", meta={"x": 1}))
    append(first, "s1", msg(1, 4), msg(2, 6), idle_deadline=T0 + 60)
    assert reserve(first, "s1", keep_recent=1, task_id="t1") is not None
    first.update_archive(A, U, "s1", 1, status="failed", error="boom")
    second = session_backend()
    got = session(second, "s1")
    assert (got.meta, got.last_seq, got.archived_seq, got.live_tokens) == ({"x": 1}, 2, 1, 6)
    assert got.failed_archive == "archive_001"
    assert [m.message_id for m in second.list_messages(A, U, "s1")] == ["m1", "m2"]
    archive = second.get_archive(A, U, "s1", 1)
    assert archive is not None and (archive.status, archive.error, archive.task_id) == (
        "failed",
        "boom",
        "t1",
    )
    assert second.due_idle_sessions(T0 + 60) == [(A, U, "s1")]


# --------------------------------------------------------------------------------------------
# local adapter specifics


def test_local_shares_the_state_db(tmp_path: Path) -> None:
    db = SqliteDb(tmp_path / "state.db")
    state = SqliteStateStore(db.path, db=db)
    sessions = SqliteSessionStore(db.path, db=db)
    state.create_account(Account(A, created_at=T0))
    sessions.create_session(make_session("s1"))
    assert db.schema_version("state") == 2 and db.schema_version("sessions") == 2
    sessions.close()  # does not own the shared db
    assert sessions.get_session(A, U, "s1") is not None
    state.close()
    db.close()
    reopened = SqliteSessionStore(tmp_path / "state.db")  # schema setup is idempotent
    assert reopened.get_session(A, U, "s1") is not None
    assert reopened.db.schema_version("sessions") == 2
    reopened.close()


def test_local_update_session_rejects_managed_fields(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    store.create_session(make_session("s1"))
    # (account_id, user_id and session_id cannot even be passed: they are the key parameters.)
    for name in (
        "created_at",
        "last_seq",
        "archived_seq",
        "next_archive",
        "live_tokens",
        "commit_count",
        "bogus",
    ):
        with pytest.raises(ValueError):
            store.update_session(A, U, "s1", **{name: 1})
    with pytest.raises(ValueError):
        store.update_archive(A, U, "s1", 1, start_seq=2)
    with pytest.raises(ValueError):
        store.update_archive(A, U, "s1", 1, status="lost")
    with pytest.raises(ValueError):
        store.reserve_archive(A, U, "s1", keep_recent=-1, now=T0, task_id=None)
    assert store.get_session(A, U, "s1") == make_session("s1")
    store.close()


def test_local_failed_append_leaves_nothing(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    store.create_session(make_session("s1"))
    append(store, "s1", msg(1))
    batch = [msg(2), msg(3, parts=[{"not json": object()}])]
    with pytest.raises(TypeError):
        append(store, "s1", *batch, now=T0 + 99)
    assert seqs(batch) == [0, 0]
    got = store.get_session(A, U, "s1")
    assert got is not None and (got.last_seq, got.last_activity) == (1, T0 + 10)
    assert seqs(store.list_messages(A, U, "s1")) == [1]
    store.close()


def test_local_idle_query_uses_its_index(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    plan = (
        store.db.conn()
        .execute(
            "EXPLAIN QUERY PLAN SELECT account_id, user_id, session_id FROM sessions"
            " WHERE idle_deadline <= ? AND last_seq > archived_seq"
            " ORDER BY idle_deadline, account_id, user_id, session_id LIMIT ?",
            (T0, 10),
        )
        .fetchall()
    )
    details = " ".join(str(row["detail"]) for row in plan)
    assert "sessions_idle" in details and "TEMP B-TREE" not in details
    store.close()


def _append_from_process(path: str, worker: int, count: int) -> None:
    store = SqliteSessionStore(Path(path))
    for i in range(count):
        store.append_messages(
            A, U, "s1", [msg(i, 2, message_id=f"p{worker}-{i}")], now=T0, idle_deadline=None
        )
        if i % 5 == 4:
            store.reserve_archive(A, U, "s1", keep_recent=1, now=T0, task_id=None)
    store.close()


def test_local_processes_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteSessionStore(path)
    store.create_session(make_session("s1"))
    workers, count = 3, 30
    ctx = multiprocessing.get_context("spawn")  # fork would copy this process's threads
    procs = [
        ctx.Process(target=_append_from_process, args=(str(path), w, count)) for w in range(workers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * workers
    got = store.get_session(A, U, "s1")
    assert got is not None and got.last_seq == workers * count
    assert seqs(store.list_messages(A, U, "s1")) == list(range(1, workers * count + 1))
    archives = store.list_archives(A, U, "s1")
    assert [a.number for a in archives] == list(range(1, len(archives) + 1))
    assert [a.start_seq for a in archives] == [1] + [a.end_seq + 1 for a in archives[:-1]]
    assert archives[-1].end_seq == got.archived_seq
    assert got.live_tokens == 2 * (got.last_seq - got.archived_seq)
    store.close()
