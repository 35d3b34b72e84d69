"""StateStore on SQLite (WAL): accounts, users with hashed keys, tasks.

Threading model: one SQLite connection per thread (created lazily, closed when the thread ends
or on close()), all on one WAL file, so readers never block each other or the writer. Every
write runs in BEGIN IMMEDIATE, which takes the write lock up front: a deferred transaction that
upgrades from read to write can fail with SQLITE_BUSY without waiting for busy_timeout.

Several components may share one database file (each has its own row in `schema_version`), e.g.
the state store and the job queue, so that a later change can enqueue a job in the same
transaction as a state change.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from skald.domain.errors import InvalidArgument
from skald.ports import (
    Account,
    StateConflict,
    StateNotFound,
    Task,
    TaskPage,
    User,
)

Migration = Sequence[str]  # SQL statements taking a component from version n to n + 1


class _ConnHolder:
    """Owns one thread's connection; closing on finalisation frees it when the thread ends
    (sqlite3.Connection itself cannot be weakly referenced)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.pid = os.getpid()

    def close(self) -> None:
        # A connection inherited through fork belongs to the parent: closing it in the child
        # could checkpoint or unlink the parent's WAL, so the child just drops it.
        if self.pid == os.getpid():
            self.conn.close()

    def __del__(self) -> None:
        # May run at interpreter shutdown, when there is nobody left to report to.
        with suppress(Exception):
            self.close()


class SqliteDb:
    """Per-thread connections to one SQLite file, shared by the local SQLite adapters."""

    def __init__(self, path: Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._holders: weakref.WeakSet[_ConnHolder] = weakref.WeakSet()
        self._holders_lock = threading.Lock()
        self._closed = False
        self.conn()  # fail fast on a bad path, and switch the file to WAL once

    def conn(self) -> sqlite3.Connection:
        holder: _ConnHolder | None = getattr(self._local, "holder", None)
        # A connection must not cross a fork: the child opens its own.
        if holder is not None and holder.pid == os.getpid():
            return holder.conn
        if self._closed:
            raise sqlite3.ProgrammingError(f"database {self.path} is closed")
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout_s,
            isolation_level=None,  # autocommit; transactions are explicit
            check_same_thread=False,
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL mode: survives process crashes; a power loss may drop the last commits.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        holder = _ConnHolder(conn)
        self._local.holder = holder
        with self._holders_lock:
            self._holders.add(holder)
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (BEGIN IMMEDIATE): committed on success, rolled back on error."""
        conn = self.conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # Also after a failed COMMIT (e.g. disk full): never leave the thread's
            # connection inside a transaction.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent snapshot across several statements."""
        conn = self.conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def ensure_schema(self, component: str, migrations: Sequence[Migration]) -> None:
        """Applies the migrations `component` has not seen yet, idempotently and atomically."""
        with self.write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                " component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
            row = conn.execute(
                "SELECT version FROM schema_version WHERE component = ?", (component,)
            ).fetchone()
            version = 0 if row is None else int(row["version"])
            if version > len(migrations):
                raise RuntimeError(
                    f"{self.path}: {component} schema v{version} is newer than this code "
                    f"(v{len(migrations)})"
                )
            for statements in migrations[version:]:
                for sql in statements:
                    conn.execute(sql)
            if version < len(migrations):
                conn.execute(
                    "INSERT INTO schema_version (component, version) VALUES (?, ?)"
                    " ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                    (component, len(migrations)),
                )

    def schema_version(self, component: str) -> int:
        row = self.conn().execute(
            "SELECT version FROM schema_version WHERE component = ?", (component,)
        ).fetchone()
        return 0 if row is None else int(row["version"])

    def close(self) -> None:
        """Closes every thread's connection; using the object afterwards raises."""
        self._closed = True
        with self._holders_lock:
            holders = list(self._holders)
        for holder in holders:
            holder.close()


# --------------------------------------------------------------------------------------------

class SqliteComponent:
    """A store living in tables of a SqliteDb: opens the file unless a shared db is given,
    applies its migrations, and closes only what it opened."""

    COMPONENT = ""

    def __init__(self, path: Path, migrations: Sequence[Migration], *,
                 db: SqliteDb | None = None) -> None:
        self._db = db if db is not None else SqliteDb(path)
        self._owns_db = db is None
        self._db.ensure_schema(self.COMPONENT, migrations)

    @property
    def db(self) -> SqliteDb:
        return self._db

    def close(self) -> None:
        if self._owns_db:
            self._db.close()


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
]

_TASK_COLUMNS = (
    "task_id", "task_type", "status", "account_id", "user_id", "created_at", "updated_at",
    "resource_id", "meta", "stage", "result", "error", "internal",
)
# Identity fields (task_id, account_id, created_at) never change.
_TASK_UPDATABLE = frozenset(
    {"task_type", "status", "user_id", "resource_id", "meta", "stage", "result", "error",
     "internal", "updated_at"}
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
        raise InvalidArgument(f"Invalid task cursor {cursor!r}: pass the next_cursor of a "
                              "previous page", {"field": "cursor"}) from None


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
        status=row["status"],
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


def _row_user(row: sqlite3.Row) -> User:
    return User(
        account_id=row["account_id"],
        user_id=row["user_id"],
        role=row["role"],
        created_at=row["created_at"],
        key_hash=row["key_hash"],
    )


def _row_account(row: sqlite3.Row) -> Account:
    return Account(
        account_id=row["account_id"],
        created_at=row["created_at"],
        settings=json.loads(row["settings"]),
    )


class SqliteStateStore(SqliteComponent):
    """StateStore on one SQLite file. Safe to share across threads; call close() at shutdown."""

    COMPONENT = "state"

    def __init__(self, path: Path, *, db: SqliteDb | None = None) -> None:
        super().__init__(path, STATE_MIGRATIONS, db=db)

    # ---------------------------------------------------------------------------------------
    # accounts and users

    def create_account(self, account: Account) -> None:
        try:
            with self._db.write() as conn:
                conn.execute(
                    "INSERT INTO accounts (account_id, created_at, settings) VALUES (?, ?, ?)",
                    (account.account_id, account.created_at, json.dumps(account.settings)),
                )
        except sqlite3.IntegrityError:
            raise StateConflict(f"account {account.account_id} exists") from None

    def get_account(self, account_id: str) -> Account | None:
        row = self._db.conn().execute(
            "SELECT * FROM accounts WHERE account_id = ?", (account_id,)
        ).fetchone()
        return None if row is None else _row_account(row)

    def list_accounts(self) -> list[Account]:
        rows = self._db.conn().execute("SELECT * FROM accounts ORDER BY account_id").fetchall()
        return [_row_account(r) for r in rows]

    def delete_account(self, account_id: str) -> bool:
        # Explicit deletes rather than relying on the FK cascade alone: tables added later
        # (sessions, messages, ledgers) should join this transaction too.
        with self._db.write() as conn:
            conn.execute("DELETE FROM users WHERE account_id = ?", (account_id,))
            cur = conn.execute("DELETE FROM accounts WHERE account_id = ?", (account_id,))
            return cur.rowcount > 0

    def create_user(self, user: User) -> None:
        with self._db.write() as conn:
            if conn.execute(
                "SELECT 1 FROM accounts WHERE account_id = ?", (user.account_id,)
            ).fetchone() is None:
                raise StateNotFound(f"account {user.account_id}")
            try:
                conn.execute(
                    "INSERT INTO users (account_id, user_id, role, created_at, key_hash)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (user.account_id, user.user_id, user.role, user.created_at, user.key_hash),
                )
            except sqlite3.IntegrityError:
                raise StateConflict(
                    f"user {user.account_id}/{user.user_id} exists, or its key is in use"
                ) from None

    def get_user(self, account_id: str, user_id: str) -> User | None:
        row = self._db.conn().execute(
            "SELECT * FROM users WHERE account_id = ? AND user_id = ?", (account_id, user_id)
        ).fetchone()
        return None if row is None else _row_user(row)

    def list_users(self, account_id: str) -> list[User]:
        rows = self._db.conn().execute(
            "SELECT * FROM users WHERE account_id = ? ORDER BY user_id", (account_id,)
        ).fetchall()
        return [_row_user(r) for r in rows]

    def delete_user(self, account_id: str, user_id: str) -> bool:
        with self._db.write() as conn:
            cur = conn.execute(
                "DELETE FROM users WHERE account_id = ? AND user_id = ?", (account_id, user_id)
            )
            return cur.rowcount > 0

    def set_user_role(self, account_id: str, user_id: str, role: str) -> None:
        with self._db.write() as conn:
            cur = conn.execute(
                "UPDATE users SET role = ? WHERE account_id = ? AND user_id = ?",
                (role, account_id, user_id),
            )
            if cur.rowcount == 0:
                raise StateNotFound(f"user {account_id}/{user_id}")

    def set_user_key(self, account_id: str, user_id: str, key_hash: str) -> None:
        """Raises StateConflict when another user already holds `key_hash`."""
        try:
            with self._db.write() as conn:
                cur = conn.execute(
                    "UPDATE users SET key_hash = ? WHERE account_id = ? AND user_id = ?",
                    (key_hash, account_id, user_id),
                )
                if cur.rowcount == 0:
                    raise StateNotFound(f"user {account_id}/{user_id}")
        except sqlite3.IntegrityError:
            raise StateConflict("key hash already in use") from None

    def resolve_key(self, key_hash: str) -> User | None:
        row = self._db.conn().execute(
            "SELECT * FROM users WHERE key_hash = ?", (key_hash,)
        ).fetchone()
        return None if row is None else _row_user(row)

    # ---------------------------------------------------------------------------------------
    # tasks

    def create_task(self, task: Task) -> None:
        """Raises StateConflict when the task id exists."""
        with self._db.write() as conn:
            insert_task(conn, task)

    def get_task(self, task_id: str) -> Task | None:
        row = self._db.conn().execute(
            "SELECT * FROM tasks WHERE task_id = ?", (task_id,)
        ).fetchone()
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
        rows = self._db.conn().execute(
            f"SELECT * FROM tasks WHERE {' AND '.join(where)}"
            " ORDER BY created_at DESC, task_id DESC LIMIT ?",
            (*params, limit + 1),  # one extra row tells whether another page exists
        ).fetchall()
        items = [_row_task(r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = items[-1]
            next_cursor = _encode_cursor(last.created_at, last.task_id)
        return TaskPage(items=items, next_cursor=next_cursor)
