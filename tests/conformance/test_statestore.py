"""StateStore conformance (accounts, users, keys, tasks): every adapter, through the port only."""

from __future__ import annotations

import sqlite3
import threading
import traceback
from pathlib import Path
from typing import Any

import pytest

from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
from skald.adapters.local.sqlite.statestore import SqliteDb, SqliteStateStore
from skald.domain.errors import InvalidArgument
from skald.ports import (
    Account,
    AccountStore,
    StateConflict,
    StateNotFound,
    StateStore,
    Task,
    TaskStatus,
    TaskStore,
)
from tests.conformance.conftest import StateOpener

T0 = 1_700_000_000.0


def make_task(task_id: str, **overrides: Any) -> Task:
    fields: dict[str, Any] = {
        "task_id": task_id,
        "task_type": "add_resource",
        "status": "pending",
        "account_id": "acme",
        "user_id": "alice",
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(overrides)
    return Task(**fields)


def test_implements_port(state_store: StateStore) -> None:
    assert isinstance(state_store, StateStore)
    assert isinstance(state_store, AccountStore)
    assert isinstance(state_store, TaskStore)


def test_delete_tasks(state_store: StateStore) -> None:
    for i in range(5):
        state_store.create_task(make_task(f"a{i}", user_id="alice", created_at=T0 + i))
    for i in range(3):
        state_store.create_task(make_task(f"b{i}", user_id="bob", created_at=T0 + i))
    state_store.create_task(make_task("other", account_id="beta", user_id="bob"))
    removed = 0
    while (n := state_store.delete_tasks("acme", user_id="bob", limit=2)) > 0:
        assert n <= 2
        removed += n
    assert removed == 3
    assert [t.task_id for t in state_store.list_tasks("acme", limit=100).items] == [
        "a4",
        "a3",
        "a2",
        "a1",
        "a0",
    ]
    assert state_store.delete_tasks("acme") == 5 and state_store.delete_tasks("acme") == 0
    assert state_store.get_task("other") is not None


# --------------------------------------------------------------------------------------------
# tasks


def test_task_round_trip(state_store: StateStore) -> None:
    task = make_task(
        "t1",
        resource_id="viking://resources/x",
        meta={"uri": "viking://resources/x", "n": [1, 2]},
        stage="parse",
        result={"files": 3, "nested": {"ok": True}},
        error=None,
        internal=True,
    )
    state_store.create_task(task)
    assert state_store.get_task("t1") == task
    assert state_store.get_task("nope") is None
    plain = make_task("t2")
    state_store.create_task(plain)
    got = state_store.get_task("t2")
    assert got == plain
    assert got is not None and got.meta == {} and got.result is None and got.internal is False


def test_task_duplicate_id_conflicts(state_store: StateStore) -> None:
    state_store.create_task(make_task("t1"))
    with pytest.raises(StateConflict):
        state_store.create_task(make_task("t1", status="running"))
    got = state_store.get_task("t1")
    assert got is not None and got.status == "pending"


def test_update_task(state_store: StateStore) -> None:
    state_store.create_task(make_task("t1"))
    updated = state_store.update_task("t1", status="running", stage="embed")
    assert updated.status == "running" and updated.stage == "embed"
    assert updated.updated_at > T0
    assert updated.created_at == T0
    assert state_store.get_task("t1") == updated
    done = state_store.update_task(
        "t1", status="completed", result={"count": 2}, meta={"k": "v"}, updated_at=T0 + 100
    )
    assert done.updated_at == T0 + 100
    assert done.result == {"count": 2} and done.meta == {"k": "v"}
    assert done.stage == "embed"  # untouched fields keep their values
    failed = state_store.update_task("t1", status="failed", error="boom", result=None)
    assert failed.error == "boom" and failed.result is None
    with pytest.raises(StateNotFound):
        state_store.update_task("ghost", status="running")


@pytest.fixture
def many_tasks(state_store: StateStore) -> StateStore:
    # 25 tasks, newest = t24; a mix of users, types, statuses, resources; some internal.
    for i in range(25):
        state_store.create_task(
            make_task(
                f"t{i:02d}",
                created_at=T0 + i,
                updated_at=T0 + i,
                user_id="alice" if i % 2 == 0 else "bob",
                task_type="add_resource" if i % 3 else "session_commit",
                status="completed" if i < 20 else "running",
                resource_id="r1" if i % 5 == 0 else None,
                internal=(i == 24),
            )
        )
    state_store.create_task(make_task("other", account_id="beta", created_at=T0 + 99))
    return state_store


def test_list_tasks_newest_first_excluding_internal(many_tasks: StateStore) -> None:
    page = many_tasks.list_tasks("acme", limit=100)
    assert [t.task_id for t in page.items] == [f"t{i:02d}" for i in range(23, -1, -1)]
    assert page.next_cursor is None
    with_internal = many_tasks.list_tasks("acme", include_internal=True, limit=100)
    assert with_internal.items[0].task_id == "t24"
    assert len(with_internal.items) == 25


def test_list_tasks_pagination(many_tasks: StateStore) -> None:
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = many_tasks.list_tasks("acme", include_internal=True, limit=10, cursor=cursor)
        pages += 1
        assert len(page.items) <= 10
        seen.extend(t.task_id for t in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
        assert isinstance(cursor, str)
    assert pages == 3
    assert seen == [f"t{i:02d}" for i in range(24, -1, -1)]


def test_list_tasks_pagination_with_equal_timestamps(state_store: StateStore) -> None:
    for i in range(7):
        state_store.create_task(make_task(f"same{i}"))
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = state_store.list_tasks("acme", limit=3, cursor=cursor)
        seen.extend(t.task_id for t in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == [f"same{i}" for i in range(7)]
    assert len(seen) == 7


@pytest.mark.parametrize("cursor", ["abc", "null", "not a cursor!", "WyJhIl0", "eyJ4Ijog"])
def test_a_cursor_the_store_did_not_make_is_an_invalid_argument(
    state_store: StateStore, cursor: str
) -> None:
    state_store.create_task(make_task("t1"))
    with pytest.raises(InvalidArgument):
        state_store.list_tasks("acme", limit=3, cursor=cursor)


def test_list_tasks_filters(many_tasks: StateStore) -> None:
    def ids(**kw: Any) -> list[str]:
        return [t.task_id for t in many_tasks.list_tasks("acme", limit=100, **kw).items]

    assert ids(user_id="bob") == [f"t{i:02d}" for i in range(23, -1, -1) if i % 2]
    assert ids(task_type="session_commit") == [f"t{i:02d}" for i in (21, 18, 15, 12, 9, 6, 3, 0)]
    assert ids(status="running") == ["t23", "t22", "t21", "t20"]
    assert ids(status="running", include_internal=True) == ["t24", "t23", "t22", "t21", "t20"]
    assert ids(resource_id="r1") == ["t20", "t15", "t10", "t05", "t00"]
    assert ids(user_id="alice", status="running") == ["t22", "t20"]
    assert ids(user_id="alice", task_type="session_commit", resource_id="r1") == ["t00"]
    assert ids(status="cancelled") == []
    # filtered pagination
    first = many_tasks.list_tasks("acme", user_id="bob", limit=5)
    second = many_tasks.list_tasks("acme", user_id="bob", limit=5, cursor=first.next_cursor)
    assert [t.task_id for t in first.items + second.items] == ids(user_id="bob")[:10]


def test_list_tasks_is_per_account(many_tasks: StateStore) -> None:
    assert [t.task_id for t in many_tasks.list_tasks("beta").items] == ["other"]
    assert many_tasks.list_tasks("ghost").items == []
    assert all(t.account_id == "acme" for t in many_tasks.list_tasks("acme", limit=100).items)


def test_concurrent_task_writes_and_reads(state_store: StateStore) -> None:
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(20):
                state_store.create_task(make_task(f"w{i}-{j}", created_at=T0 + j))
                state_store.update_task(f"w{i}-{j}", status="running")
                assert state_store.get_task(f"w{i}-{j}") is not None
                state_store.list_tasks("acme", limit=5)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "".join(traceback.format_exception(errors[0])) if errors else ""
    page = state_store.list_tasks("acme", status=TaskStatus.RUNNING, limit=1000)
    assert len(page.items) == 160


def test_state_persists_across_instances(state_backend: StateOpener) -> None:
    first = state_backend()
    first.create_account(Account("acme", created_at=T0))
    first.create_task(make_task("t1", meta={"x": 1}))
    second = state_backend()
    assert second.get_account("acme") is not None
    task = second.get_task("t1")
    assert task is not None and task.meta == {"x": 1}


# --------------------------------------------------------------------------------------------
# local adapter specifics


def test_local_schema_is_versioned_and_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteStateStore(path)
    store.create_account(Account("acme", created_at=T0))
    assert store.db.schema_version("state") == 2
    store.close()
    again = SqliteStateStore(path)  # re-running the schema setup keeps the data
    assert again.get_account("acme") is not None
    assert again.db.schema_version("state") == 2
    mode = again.db.conn().execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    again.close()
    with pytest.raises(sqlite3.ProgrammingError):
        again.get_account("acme")


def test_local_state_and_queue_share_one_file(tmp_path: Path) -> None:
    db = SqliteDb(tmp_path / "skald.db")
    state = SqliteStateStore(db.path, db=db)
    queue = SqliteJobQueue(db.path, db=db)
    state.create_account(Account("acme", created_at=T0))
    job_id = queue.enqueue("semantic", "summarise", {"uri": "viking://resources"})
    assert db.schema_version("state") == 2 and db.schema_version("jobqueue") == 2
    # a state change and its job commit or roll back together
    with pytest.raises(RuntimeError), db.write() as conn:
        conn.execute("UPDATE accounts SET settings = '{\"x\": 1}' WHERE account_id = 'acme'")
        queue.enqueue_in(conn, "semantic", "summarise", {"never": True})
        raise RuntimeError("abort")
    assert queue.stats("semantic").pending == 1
    assert (state.get_account("acme") or Account("x", 0.0)).settings == {}
    state.close()
    queue.close()  # neither owns the shared db
    assert state.get_account("acme") is not None
    db.close()
    reopened_queue = SqliteJobQueue(tmp_path / "skald.db")
    reopened_state = SqliteStateStore(tmp_path / "skald.db")
    assert reopened_queue.lease("semantic")[0].job.job_id == job_id
    assert reopened_state.get_account("acme") is not None
    reopened_queue.close()
    reopened_state.close()


def test_local_update_task_rejects_identity_fields(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "s.db")
    store.create_task(make_task("t1"))
    for field in ("account_id", "created_at", "bogus"):
        with pytest.raises(ValueError):
            store.update_task("t1", **{field: "x"})
    assert store.get_task("t1") == make_task("t1")
    with pytest.raises(InvalidArgument):  # a client's bad cursor is a 400, not a 500
        store.list_tasks("acme", cursor="not a cursor!")
    store.close()


def test_local_threads_that_end_release_their_connections(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "s.db")
    store.create_account(Account("acme", created_at=T0))

    def work() -> None:
        assert store.get_account("acme") is not None

    for _ in range(20):  # thread pools (anyio) retire idle threads: no connection may leak
        t = threading.Thread(target=work)
        t.start()
        t.join()
    assert len(store.db._holders) <= 2  # this thread's, plus at most one not yet collected
    store.close()
