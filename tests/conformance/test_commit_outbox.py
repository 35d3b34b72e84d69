"""SessionStore conformance, the commit outbox: the reservation that also creates the commit's
task, unsealed commits (per session and across accounts), sealing, and rolling back. Every
adapter, through the ports only, with the state store on the same backing store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skald.adapters.local.sqlite.sessionstore import SqliteSessionStore
from skald.adapters.local.sqlite.statestore import SqliteDb
from skald.ports import (
    ArchiveRecord,
    SessionStore,
    StateConflict,
    StateNotFound,
    Task,
    TaskStatus,
)
from tests.conformance.conftest import CommitOpener
from tests.conformance.test_sessionstore import T0, A, U, make_session, msg, session

OUTBOX = {"role": "user", "event_tags": ["trip"], "attempts": 0}


def commit_task(task_id: str, account: str = A, user: str = U) -> Any:
    """The task factory a commit passes: the task names the archive it tracks."""

    def build(archive: ArchiveRecord) -> Task:
        return Task(
            task_id,
            "session_commit",
            TaskStatus.PENDING,
            account,
            user,
            T0,
            T0,
            resource_id=f"{archive.session_id}/{archive.archive_id}",
            meta={"archive_id": archive.archive_id},
            stage="queued",
        )

    return build


def reserve(
    store: SessionStore,
    session_id: str,
    task_id: str,
    *,
    now: float = T0 + 100,
    keep_recent: int = 0,
    account: str = A,
    user: str = U,
    reset: bool = False,
) -> ArchiveRecord | None:
    return store.reserve_archive(
        account,
        user,
        session_id,
        keep_recent=keep_recent,
        now=now,
        task_id=task_id,
        reset=reset,
        task=commit_task(task_id, account, user),
        outbox=OUTBOX,
    )


def setup_session(
    store: SessionStore, session_id: str, *tokens: int, account: str = A, user: str = U
) -> None:
    store.create_session(make_session(session_id, account=account, user=user))
    if tokens:
        store.append_messages(
            account,
            user,
            session_id,
            [msg(i + 1, t) for i, t in enumerate(tokens)],
            now=T0 + 10,
            idle_deadline=None,
        )


def test_reservation_creates_the_task_and_the_outbox(commit_backend: CommitOpener) -> None:
    sessions, state = commit_backend()
    setup_session(sessions, "s1", 2, 3)
    arch = reserve(sessions, "s1", "t1")
    assert arch is not None and arch.outbox == OUTBOX and arch.task_id == "t1"
    task = state.get_task("t1")
    assert task is not None
    assert (task.status, task.task_type, task.resource_id, task.meta) == (
        "pending",
        "session_commit",
        "s1/archive_001",
        {"archive_id": "archive_001"},
    )
    assert task.account_id == A and task.user_id == U
    again, _ = commit_backend()  # persisted, read back by another client
    stored = again.get_archive(A, U, "s1", 1)
    assert stored is not None and stored.outbox == OUTBOX and stored.status == "pending"
    assert [a.number for a in again.open_commits(A, U, "s1")] == [1]


def test_a_taken_task_id_reserves_nothing(commit_backend: CommitOpener) -> None:
    sessions, state = commit_backend()
    setup_session(sessions, "s1", 2, 3)
    state.create_task(Task("t1", "write", TaskStatus.RUNNING, A, U, T0, T0))
    with pytest.raises(StateConflict):
        reserve(sessions, "s1", "t1")
    got = session(sessions, "s1")
    assert (got.archived_seq, got.commit_count, got.next_archive, got.live_tokens) == (0, 0, 1, 5)
    assert sessions.list_archives(A, U, "s1") == []
    assert sessions.stale_commits(None) == []
    kept = state.get_task("t1")
    assert kept is not None and (kept.task_type, kept.status) == ("write", "running")


def test_a_reservation_without_outbox_is_sealed(commit_backend: CommitOpener) -> None:
    sessions, _ = commit_backend()
    setup_session(sessions, "s1", 1)
    arch = sessions.reserve_archive(A, U, "s1", keep_recent=0, now=T0, task_id="t1")
    assert arch is not None and arch.outbox is None
    assert sessions.open_commits(A, U, "s1") == [] and sessions.stale_commits(None) == []


def test_open_commits_are_per_session_and_sealing_clears_them(commit_backend: CommitOpener) -> None:
    sessions, _ = commit_backend()
    setup_session(sessions, "s1", 1, 1)
    setup_session(sessions, "s2", 1)
    reserve(sessions, "s1", "t1", keep_recent=1)
    reserve(sessions, "s2", "t2")
    sessions.append_messages(A, U, "s1", [msg(3)], now=T0 + 20, idle_deadline=None)
    reserve(sessions, "s1", "t3")
    assert [a.number for a in sessions.open_commits(A, U, "s1")] == [1, 2]
    assert [a.task_id for a in sessions.open_commits(A, U, "s2")] == ["t2"]
    # an attempt recorded on the outbox keeps the commit open
    noted = {**OUTBOX, "attempts": 1, "error": "OSError: disk full"}
    sessions.update_archive(A, U, "s1", 1, outbox=noted)
    first = sessions.get_archive(A, U, "s1", 1)
    assert first is not None and first.outbox == noted
    sealed = sessions.update_archive(A, U, "s1", 1, outbox=None)
    assert sealed.outbox is None and sealed.status == "pending"
    assert [a.number for a in sessions.open_commits(A, U, "s1")] == [2]
    assert sorted(a.task_id or "" for a in sessions.stale_commits(None)) == ["t2", "t3"]
    # sealing is idempotent, and independent of the phase 2 status
    sessions.update_archive(A, U, "s1", 2, status="done")
    sessions.update_archive(A, U, "s1", 2, outbox=None)
    sessions.update_archive(A, U, "s1", 2, outbox=None)
    assert sessions.open_commits(A, U, "s1") == []
    done = sessions.get_archive(A, U, "s1", 2)
    assert done is not None and done.status == "done"


def test_stale_commits_span_accounts_oldest_first(commit_backend: CommitOpener) -> None:
    sessions, _ = commit_backend()
    made = [
        ("acme", "alice", "s1", T0 + 30),
        ("beta", "bob", "s1", T0 + 10),
        ("acme", "carol", "s9", T0 + 20),
        ("gamma", "dan", "x", T0 + 40),
    ]
    for i, (account, user, sid, now) in enumerate(made):
        setup_session(sessions, sid, 1, account=account, user=user)
        reserve(sessions, sid, f"t{i}", now=now, account=account, user=user)
    order = [(a.account_id, a.user_id, a.created_at) for a in sessions.stale_commits(None)]
    assert order == [
        ("beta", "bob", T0 + 10),
        ("acme", "carol", T0 + 20),
        ("acme", "alice", T0 + 30),
        ("gamma", "dan", T0 + 40),
    ]
    # `before` is inclusive
    assert [a.task_id for a in sessions.stale_commits(T0 + 20)] == ["t1", "t2"]
    assert sessions.stale_commits(T0 + 9.5) == []
    assert [a.task_id for a in sessions.stale_commits(None, limit=1)] == ["t1"]
    assert sessions.stale_commits(None, limit=0) == []
    stale = sessions.stale_commits(T0 + 10)[0]
    assert (stale.session_id, stale.number, stale.outbox) == ("s1", 1, OUTBOX)


def test_rollback_gives_the_messages_back(commit_backend: CommitOpener) -> None:
    sessions, _ = commit_backend()
    setup_session(sessions, "s1", 2, 3, 4)
    arch = reserve(sessions, "s1", "t1", keep_recent=1)
    assert arch is not None and (arch.start_seq, arch.end_seq) == (1, 2)
    assert session(sessions, "s1").live_tokens == 4
    assert sessions.rollback_commit(A, U, "s1", 1) is True
    got = session(sessions, "s1")
    assert (got.archived_seq, got.commit_count, got.live_tokens, got.last_seq) == (0, 0, 9, 3)
    assert got.next_archive == 2  # numbers are never reused
    assert sessions.get_archive(A, U, "s1", 1) is None
    assert sessions.open_commits(A, U, "s1") == [] and sessions.stale_commits(None) == []
    assert [m.message_id for m in sessions.list_messages(A, U, "s1", after_seq=0)] == [
        "m1",
        "m2",
        "m3",
    ]
    again = reserve(sessions, "s1", "t2")
    assert again is not None and (again.number, again.start_seq, again.end_seq) == (2, 1, 3)
    assert sessions.rollback_commit(A, U, "s1", 2) is True
    assert session(sessions, "s1").live_tokens == 9


def test_rollback_is_refused_after_a_later_archive_or_a_seal(commit_backend: CommitOpener) -> None:
    sessions, _ = commit_backend()
    setup_session(sessions, "s1", 1, 1)
    reserve(sessions, "s1", "t1", keep_recent=1)
    reserve(sessions, "s1", "t2")
    before = session(sessions, "s1")
    assert sessions.rollback_commit(A, U, "s1", 1) is False  # archive 2 starts after it
    assert session(sessions, "s1") == before
    assert sessions.get_archive(A, U, "s1", 1) is not None
    sessions.update_archive(A, U, "s1", 2, outbox=None)
    assert sessions.rollback_commit(A, U, "s1", 2) is False  # sealed: phase 1 is complete
    assert session(sessions, "s1") == before
    with pytest.raises(StateNotFound):
        sessions.rollback_commit(A, U, "s1", 7)
    with pytest.raises(StateNotFound):
        sessions.rollback_commit(A, U, "nope", 1)


def test_rollback_of_an_empty_reset_after_a_commit(commit_backend: CommitOpener) -> None:
    """An empty reset archive covers no seq: the commit before it is not the newest."""
    sessions, _ = commit_backend()
    setup_session(sessions, "s1", 1)
    reserve(sessions, "s1", "t1")
    empty = reserve(sessions, "s1", "t2", reset=True)
    assert empty is not None and (empty.start_seq, empty.end_seq, empty.status) == (2, 1, "reset")
    assert sessions.rollback_commit(A, U, "s1", 1) is False
    assert sessions.rollback_commit(A, U, "s1", 2) is True
    assert session(sessions, "s1").archived_seq == 1
    assert sessions.rollback_commit(A, U, "s1", 1) is False  # next_archive moved past it


def test_rollback_lifts_the_block_of_its_own_failure(commit_backend: CommitOpener) -> None:
    sessions, _ = commit_backend()
    setup_session(sessions, "s1", 1)
    reserve(sessions, "s1", "t1")
    sessions.update_archive(A, U, "s1", 1, status="failed", error="boom")
    assert session(sessions, "s1").failed_archive == "archive_001"
    assert sessions.rollback_commit(A, U, "s1", 1) is True
    assert session(sessions, "s1").failed_archive is None
    assert reserve(sessions, "s1", "t2") is not None


def test_deleting_the_session_drops_its_open_commits(commit_backend: CommitOpener) -> None:
    sessions, _ = commit_backend()
    setup_session(sessions, "s1", 1)
    setup_session(sessions, "s2", 1)
    reserve(sessions, "s1", "t1")
    reserve(sessions, "s2", "t2")
    assert sessions.delete_session(A, U, "s1") is True
    assert [a.session_id for a in sessions.stale_commits(None)] == ["s2"]
    assert sessions.open_commits(A, U, "s1") == []


# --------------------------------------------------------------------------------------------
# local adapter specifics


def test_local_upgrades_a_v1_database(tmp_path: Path) -> None:
    """A data dir from before the outbox: its archives read back sealed."""
    from skald.adapters.local.sqlite import session_rows

    db = SqliteDb(tmp_path / "state.db")
    db.ensure_schema("sessions", session_rows.SESSION_MIGRATIONS[:1])
    with db.write() as conn:
        conn.execute(
            "INSERT INTO sessions (account_id, user_id, session_id, created_at,"
            " updated_at, last_activity, archived_seq, next_archive, commit_count)"
            " VALUES (?, ?, 's1', 1, 1, 1, 0, 2, 1)",
            (A, U),
        )
        conn.execute(
            "INSERT INTO session_archives (account_id, user_id, session_id, number,"
            " start_seq, end_seq, created_at, status) VALUES (?, ?, 's1', 1, 1, 0,"
            " 1, 'done')",
            (A, U),
        )
    db.close()
    store = SqliteSessionStore(tmp_path / "state.db")
    assert store.db.schema_version("sessions") == 2
    arch = store.get_archive(A, U, "s1", 1)
    assert arch is not None and arch.outbox is None and arch.status == "done"
    assert store.stale_commits(None) == []
    store.close()
