"""Per-thread SQLite connections on one WAL file, and the component base of the local
SQLite stores (state, sessions, job queue), which may share one file.

Threading model: one SQLite connection per thread (created lazily, closed when the thread ends
or on close()), all on one WAL file, so readers never block each other or the writer. Every
write runs in BEGIN IMMEDIATE, which takes the write lock up front: a deferred transaction that
upgrades from read to write can fail with SQLITE_BUSY without waiting for busy_timeout.

Several components may share one database file (each has its own row in `schema_version`), e.g.
the state store and the job queue, so that a later change can enqueue a job in the same
transaction as a state change.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

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
        row = (
            self.conn()
            .execute("SELECT version FROM schema_version WHERE component = ?", (component,))
            .fetchone()
        )
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

    def __init__(
        self, path: Path, migrations: Sequence[Migration], *, db: SqliteDb | None = None
    ) -> None:
        self._db = db if db is not None else SqliteDb(path)
        self._owns_db = db is None
        self._db.ensure_schema(self.COMPONENT, migrations)

    @property
    def db(self) -> SqliteDb:
        return self._db

    def close(self) -> None:
        if self._owns_db:
            self._db.close()
