"""StateStore on SQLite (WAL): accounts, users, API keys and tombstones (accountstore.py),
and tasks. The connection handling is db.py's.
"""

from __future__ import annotations

import base64
import binascii
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from skald.adapters.local.sqlite.accountstore import ACCOUNT_MIGRATION, SqliteAccounts
from skald.adapters.local.sqlite.db import Migration as Migration
from skald.adapters.local.sqlite.db import SqliteComponent as SqliteComponent
from skald.adapters.local.sqlite.db import SqliteDb as SqliteDb
from skald.domain.errors import InvalidArgument
from skald.ports import StateConflict, StateNotFound, Task, TaskPage, TaskStatus

STATE_MIGRATIONS: list[Migration] = [
    (
        """CREATE TABLE accounts (
            account_id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            settings TEXT NOT NULL DEFAULT '{}'
        )""",
        """CREATE TABLE users (
            account_id TEXT NOT NULL REFERENCES accounts (account_id) ON DELETE CASCADE,
            user_id TEXT NOT NULL,
            role TEXT NOT NULL,
            created_at REAL NOT NULL,
            key_hash TEXT,
            PRIMARY KEY (account_id, user_id)
        )""",
        "CREATE UNIQUE INDEX users_key_hash ON users (key_hash)",
        """CREATE TABLE tasks (
            task_id TEXT PRIMARY KEY,
            task_type TEXT NOT NULL,
            status TEXT NOT NULL,
            account_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            resource_id TEXT,
            meta TEXT NOT NULL DEFAULT '{}',
            stage TEXT,
            result TEXT,
            error TEXT,
            internal INTEGER NOT NULL DEFAULT 0
        )""",
        # Newest first per account, and one index per list_tasks filter.
        "CREATE INDEX tasks_account ON tasks (account_id, created_at DESC, task_id DESC)",
        "CREATE INDEX tasks_user ON tasks (account_id, user_id, created_at DESC, task_id DESC)",
        "CREATE INDEX tasks_type ON tasks (account_id, task_type, created_at DESC, task_id DESC)",
        "CREATE INDEX tasks_status ON tasks (account_id, status, created_at DESC, task_id DESC)",
        "CREATE INDEX tasks_resource ON tasks"
        " (account_id, resource_id, created_at DESC, task_id DESC)",
    ),
    ACCOUNT_MIGRATION,  # tombstones, generations, several keys per user
]

_TASK_COLUMNS = (
    "task_id",
    "task_type",
    "status",
    "account_id",
    "user_id",
    "created_at",
    "updated_at",
    "resource_id",
    "meta",
    "stage",
    "result",
    "error",
    "internal",
)
# Identity fields (task_id, account_id, created_at) never change.
_TASK_UPDATABLE = frozenset(
    {
        "task_type",
        "status",
        "user_id",
        "resource_id",
        "meta",
        "stage",
        "result",
        "error",
        "internal",
        "updated_at",
    }
)
_MAX_PAGE = 1000


def _encode_cursor(created_at: float, task_id: str) -> str:
    raw = json.dumps([created_at, task_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, task_id = json.loads(raw)
        return float(created_at), str(task_id)
    except (ValueError, TypeError, binascii.Error):
        raise InvalidArgument(
            f"Invalid task cursor {cursor!r}: pass the next_cursor of a previous page",
            {"field": "cursor"},
        ) from None


def _task_value(column: str, value: Any) -> Any:
    if column == "meta":
        return json.dumps(value or {})
    if column == "result":
        return None if value is None else json.dumps(value)
    if column == "internal":
        return 1 if value else 0
    return value


def _row_task(row: sqlite3.Row) -> Task:
    return Task(
        task_id=row["task_id"],
        task_type=row["task_type"],
        status=TaskStatus(row["status"]),
        account_id=row["account_id"],
        user_id=row["user_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        resource_id=row["resource_id"],
        meta=json.loads(row["meta"]),
        stage=row["stage"],
        result=None if row["result"] is None else json.loads(row["result"]),
        error=row["error"],
        internal=bool(row["internal"]),
    )


def insert_task(conn: sqlite3.Connection, task: Task) -> None:
    """Inserts the task inside the caller's transaction (the session store creates a commit's
    task in the transaction that reserves its archive). Raises StateConflict when the id
    exists."""
    values = [_task_value(c, getattr(task, c)) for c in _TASK_COLUMNS]
    try:
        conn.execute(
            f"INSERT INTO tasks ({', '.join(_TASK_COLUMNS)})"
            f" VALUES ({', '.join('?' for _ in _TASK_COLUMNS)})",
            values,
        )
    except sqlite3.IntegrityError:
        raise StateConflict(f"task {task.task_id} exists") from None


class SqliteStateStore(SqliteAccounts, SqliteComponent):
    """StateStore on one SQLite file. Safe to share across threads; call close() at shutdown."""

    COMPONENT = "state"

    def __init__(self, path: Path, *, db: SqliteDb | None = None) -> None:
        super().__init__(path, STATE_MIGRATIONS, db=db)

    # ---------------------------------------------------------------------------------------
    # tasks

    def create_task(self, task: Task) -> None:
        """Raises StateConflict when the task id exists."""
        with self._db.write() as conn:
            insert_task(conn, task)

    def get_task(self, task_id: str) -> Task | None:
        row = (
            self._db.conn().execute("SELECT * FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        )
        return None if row is None else _row_task(row)

    def update_task(self, task_id: str, **changes: Any) -> Task:
        """`updated_at` defaults to now. Unknown or identity fields raise ValueError."""
        bad = set(changes) - _TASK_UPDATABLE
        if bad:
            raise ValueError(f"cannot update task field(s): {', '.join(sorted(bad))}")
        changes.setdefault("updated_at", time.time())
        columns = sorted(changes)  # fixed order: names come from the allow-list above
        assignments = ", ".join(f"{c} = ?" for c in columns)
        values = [_task_value(c, changes[c]) for c in columns]
        with self._db.write() as conn:
            cur = conn.execute(
                f"UPDATE tasks SET {assignments} WHERE task_id = ?", (*values, task_id)
            )
            if cur.rowcount == 0:
                raise StateNotFound(f"task {task_id}")
            row = conn.execute("SELECT * FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        return _row_task(row)

    def list_tasks(
        self,
        account_id: str,
        *,
        user_id: str | None = None,
        task_type: str | None = None,
        status: str | None = None,
        resource_id: str | None = None,
        include_internal: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> TaskPage:
        where = ["account_id = ?"]
        params: list[Any] = [account_id]
        for column, value in (
            ("user_id", user_id),
            ("task_type", task_type),
            ("status", status),
            ("resource_id", resource_id),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if not include_internal:
            where.append("internal = 0")
        if cursor:
            created_at, last_id = _decode_cursor(cursor)
            where.append("(created_at, task_id) < (?, ?)")
            params.extend((created_at, last_id))
        limit = max(1, min(int(limit), _MAX_PAGE))
        rows = (
            self._db.conn()
            .execute(
                f"SELECT * FROM tasks WHERE {' AND '.join(where)}"
                " ORDER BY created_at DESC, task_id DESC LIMIT ?",
                (*params, limit + 1),  # one extra row tells whether another page exists
            )
            .fetchall()
        )
        items = [_row_task(r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = items[-1]
            next_cursor = _encode_cursor(last.created_at, last.task_id)
        return TaskPage(items=items, next_cursor=next_cursor)

    def delete_tasks(self, account_id: str, *, user_id: str | None = None, limit: int = 500) -> int:
        where, params = "account_id = ?", [account_id]
        if user_id is not None:
            where += " AND user_id = ?"
            params.append(user_id)
        with self._db.write() as conn:
            cur = conn.execute(
                f"DELETE FROM tasks WHERE task_id IN (SELECT task_id FROM tasks WHERE {where}"
                " LIMIT ?)",
                (*params, max(1, int(limit))),
            )
            return cur.rowcount
