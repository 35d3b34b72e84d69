"""SessionStore on SQLite (WAL): sessions, their append-only messages and their archives.

Every multi-step change (append, reserve an archive, resolve a failed archive, delete) runs in
one BEGIN IMMEDIATE transaction on a `SqliteDb`, so concurrent threads and processes that share
the file serialise on SQLite's write lock and never see a half-applied change. Sequence numbers
and archive numbers come from counters in the session row, read and bumped inside that same
transaction: they are dense and never handed out twice.

The tables live in the state store's file (pass `db=` or the same path): reserving a commit's
archive also creates its task, in the same transaction, so the session store makes sure the
state store's tables exist too.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from skald.adapters.local.sqlite.statestore import (
    STATE_MIGRATIONS,
    Migration,
    SqliteComponent,
    SqliteDb,
    SqliteStateStore,
    insert_task,
)
from skald.domain.memory.archives import ARCHIVE_STATUSES, ArchiveStatus
from skald.ports import (
    ArchiveRecord,
    SessionMessage,
    SessionRecord,
    StateConflict,
    StateNotFound,
    Task,
)

_SESSION_MIGRATIONS: list[Migration] = [
    (
        """CREATE TABLE sessions (
            account_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            last_activity REAL NOT NULL,
            last_seq INTEGER NOT NULL DEFAULT 0,
            archived_seq INTEGER NOT NULL DEFAULT 0,
            next_archive INTEGER NOT NULL DEFAULT 1,
            commit_count INTEGER NOT NULL DEFAULT 0,
            live_tokens INTEGER NOT NULL DEFAULT 0,
            memories_extracted INTEGER NOT NULL DEFAULT 0,
            failed_archive TEXT,
            memory_policy TEXT NOT NULL DEFAULT '{}',
            auto_commit_policy TEXT,
            extraction_config TEXT NOT NULL DEFAULT '{}',
            idle_deadline REAL,
            meta TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (account_id, user_id, session_id)
        )""",
        # due_idle_sessions walks this in deadline order; sessions without a deadline (the
        # common case once committed) stay out of it.
        "CREATE INDEX sessions_idle ON sessions"
        " (idle_deadline, account_id, user_id, session_id) WHERE idle_deadline IS NOT NULL",
        # The FK cascade is a safety net; delete_session also deletes children explicitly.
        """CREATE TABLE session_messages (
            account_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            message_id TEXT NOT NULL,
            role TEXT NOT NULL,
            parts TEXT NOT NULL,
            created_at TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            peer_id TEXT,
            turn_id TEXT,
            message_kind TEXT,
            extra TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (account_id, user_id, session_id, seq),
            FOREIGN KEY (account_id, user_id, session_id)
                REFERENCES sessions (account_id, user_id, session_id) ON DELETE CASCADE
        ) WITHOUT ROWID""",
        """CREATE TABLE session_archives (
            account_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            number INTEGER NOT NULL,
            start_seq INTEGER NOT NULL,
            end_seq INTEGER NOT NULL,
            created_at REAL NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed', 'reset')),
            task_id TEXT,
            error TEXT,
            meta TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (account_id, user_id, session_id, number),
            FOREIGN KEY (account_id, user_id, session_id)
                REFERENCES sessions (account_id, user_id, session_id) ON DELETE CASCADE
        ) WITHOUT ROWID""",
    ),
    (
        # The commit outbox (JSON; NULL once phase 1 is sealed); recovery walks the open ones
        # oldest first, and they are few, hence the partial index.
        "ALTER TABLE session_archives ADD COLUMN outbox TEXT",
        "CREATE INDEX session_archives_outbox ON session_archives"
        " (created_at, account_id, user_id, session_id, number) WHERE outbox IS NOT NULL",
    ),
]

_SESSION_COLUMNS = (
    "account_id",
    "user_id",
    "session_id",
    "created_at",
    "updated_at",
    "last_activity",
    "last_seq",
    "archived_seq",
    "next_archive",
    "commit_count",
    "live_tokens",
    "memories_extracted",
    "failed_archive",
    "memory_policy",
    "auto_commit_policy",
    "extraction_config",
    "idle_deadline",
    "meta",
)
# The identity fields never change, and the watermarks and counters that append_messages and
# reserve_archive keep consistent with the message and archive rows are theirs alone.
_SESSION_UPDATABLE = frozenset(
    {
        "updated_at",
        "last_activity",
        "memories_extracted",
        "failed_archive",
        "memory_policy",
        "auto_commit_policy",
        "extraction_config",
        "idle_deadline",
        "meta",
    }
)
_JSON_OBJECT_COLUMNS = frozenset({"memory_policy", "extraction_config", "meta"})

_MESSAGE_COLUMNS = (
    "account_id",
    "user_id",
    "session_id",
    "seq",
    "message_id",
    "role",
    "parts",
    "created_at",
    "tokens",
    "peer_id",
    "turn_id",
    "message_kind",
    "extra",
)

_ARCHIVE_UPDATABLE = frozenset({"status", "error", "meta", "task_id", "outbox"})

_KEY = "account_id = ? AND user_id = ? AND session_id = ?"


def _session_value(column: str, value: Any) -> Any:
    if column in _JSON_OBJECT_COLUMNS:
        return json.dumps(value or {})
    if column == "auto_commit_policy":
        return None if value is None else json.dumps(value)
    return value


def _row_session(row: sqlite3.Row) -> SessionRecord:
    policy = row["auto_commit_policy"]
    return SessionRecord(
        account_id=row["account_id"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_activity=row["last_activity"],
        last_seq=row["last_seq"],
        archived_seq=row["archived_seq"],
        next_archive=row["next_archive"],
        commit_count=row["commit_count"],
        live_tokens=row["live_tokens"],
        memories_extracted=row["memories_extracted"],
        failed_archive=row["failed_archive"],
        memory_policy=json.loads(row["memory_policy"]),
        auto_commit_policy=None if policy is None else json.loads(policy),
        extraction_config=json.loads(row["extraction_config"]),
        idle_deadline=row["idle_deadline"],
        meta=json.loads(row["meta"]),
    )


def _row_message(row: sqlite3.Row) -> SessionMessage:
    return SessionMessage(
        seq=row["seq"],
        message_id=row["message_id"],
        role=row["role"],
        parts=json.loads(row["parts"]),
        created_at=row["created_at"],
        tokens=row["tokens"],
        peer_id=row["peer_id"],
        turn_id=row["turn_id"],
        message_kind=row["message_kind"],
        extra=json.loads(row["extra"]),
    )


def _row_archive(row: sqlite3.Row) -> ArchiveRecord:
    return ArchiveRecord(
        account_id=row["account_id"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        number=row["number"],
        start_seq=row["start_seq"],
        end_seq=row["end_seq"],
        created_at=row["created_at"],
        status=ArchiveStatus(row["status"]),
        task_id=row["task_id"],
        error=row["error"],
        meta=json.loads(row["meta"]),
        outbox=None if row["outbox"] is None else json.loads(row["outbox"]),
    )


def _archive_value(column: str, value: Any) -> Any:
    if column == "meta":
        return json.dumps(value or {})
    if column == "outbox":
        return None if value is None else json.dumps(value)
    return value


def _archive_id(number: int) -> str:
    # Same spelling as ArchiveRecord.archive_id, which is what failed_archive holds.
    return f"archive_{number:03d}"


class SqliteSessionStore(SqliteComponent):
    """SessionStore on one SQLite file. Safe to share across threads and processes; call
    close() at shutdown."""

    COMPONENT = "sessions"

    def __init__(self, path: Path, *, db: SqliteDb | None = None) -> None:
        super().__init__(path, _SESSION_MIGRATIONS, db=db)
        # A commit's task is inserted by reserve_archive: the tasks table must exist.
        self._db.ensure_schema(SqliteStateStore.COMPONENT, STATE_MIGRATIONS)

    # ---------------------------------------------------------------------------------------
    # sessions

    def create_session(self, record: SessionRecord) -> None:
        values = [_session_value(c, getattr(record, c)) for c in _SESSION_COLUMNS]
        try:
            with self._db.write() as conn:
                conn.execute(
                    f"INSERT INTO sessions ({', '.join(_SESSION_COLUMNS)})"
                    f" VALUES ({', '.join('?' for _ in _SESSION_COLUMNS)})",
                    values,
                )
        except sqlite3.IntegrityError:
            raise StateConflict(
                f"session {record.account_id}/{record.user_id}/{record.session_id} exists"
            ) from None

    def get_session(self, account_id: str, user_id: str, session_id: str) -> SessionRecord | None:
        row = (
            self._db.conn()
            .execute(f"SELECT * FROM sessions WHERE {_KEY}", (account_id, user_id, session_id))
            .fetchone()
        )
        return None if row is None else _row_session(row)

    def list_sessions(self, account_id: str, user_id: str) -> list[SessionRecord]:
        """In session id order."""
        rows = (
            self._db.conn()
            .execute(
                "SELECT * FROM sessions WHERE account_id = ? AND user_id = ? ORDER BY session_id",
                (account_id, user_id),
            )
            .fetchall()
        )
        return [_row_session(r) for r in rows]

    def delete_session(self, account_id: str, user_id: str, session_id: str) -> bool:
        key = (account_id, user_id, session_id)
        with self._db.write() as conn:
            conn.execute(f"DELETE FROM session_messages WHERE {_KEY}", key)
            conn.execute(f"DELETE FROM session_archives WHERE {_KEY}", key)
            cur = conn.execute(f"DELETE FROM sessions WHERE {_KEY}", key)
            return cur.rowcount > 0

    def delete_account_sessions(self, account_id: str) -> int:
        with self._db.write() as conn:
            conn.execute("DELETE FROM session_messages WHERE account_id = ?", (account_id,))
            conn.execute("DELETE FROM session_archives WHERE account_id = ?", (account_id,))
            cur = conn.execute("DELETE FROM sessions WHERE account_id = ?", (account_id,))
            return cur.rowcount

    def update_session(
        self, account_id: str, user_id: str, session_id: str, **changes: Any
    ) -> SessionRecord:
        """`updated_at` defaults to now. Identity fields, the watermarks and the counters kept
        by append_messages / reserve_archive, and unknown fields raise ValueError."""
        bad = set(changes) - _SESSION_UPDATABLE
        if bad:
            raise ValueError(f"cannot update session field(s): {', '.join(sorted(bad))}")
        changes.setdefault("updated_at", time.time())
        columns = sorted(changes)  # fixed order: names come from the allow-list above
        assignments = ", ".join(f"{c} = ?" for c in columns)
        values = [_session_value(c, changes[c]) for c in columns]
        key = (account_id, user_id, session_id)
        with self._db.write() as conn:
            # fetchall: a RETURNING statement must run to completion before COMMIT.
            rows = conn.execute(
                f"UPDATE sessions SET {assignments} WHERE {_KEY} RETURNING *", (*values, *key)
            ).fetchall()
            if not rows:
                raise StateNotFound(f"session {account_id}/{user_id}/{session_id}")
        return _row_session(rows[0])

    # ---------------------------------------------------------------------------------------
    # messages

    def append_messages(
        self,
        account_id: str,
        user_id: str,
        session_id: str,
        messages: Sequence[SessionMessage],
        *,
        now: float,
        idle_deadline: float | None,
    ) -> SessionRecord:
        key = (account_id, user_id, session_id)
        with self._db.write() as conn:
            found = conn.execute(f"SELECT last_seq FROM sessions WHERE {_KEY}", key).fetchone()
            if found is None:
                raise StateNotFound(f"session {account_id}/{user_id}/{session_id}")
            first = int(found["last_seq"]) + 1
            rows = [
                (
                    *key,
                    first + i,
                    m.message_id,
                    m.role,
                    json.dumps(m.parts),
                    m.created_at,
                    m.tokens,
                    m.peer_id,
                    m.turn_id,
                    m.message_kind,
                    json.dumps(m.extra),
                )
                for i, m in enumerate(messages)
            ]
            conn.executemany(
                f"INSERT INTO session_messages ({', '.join(_MESSAGE_COLUMNS)})"
                f" VALUES ({', '.join('?' for _ in _MESSAGE_COLUMNS)})",
                rows,
            )
            updated = conn.execute(
                "UPDATE sessions SET last_seq = ?, live_tokens = live_tokens + ?,"
                " last_activity = ?, updated_at = ?, idle_deadline = ?"
                f" WHERE {_KEY} RETURNING *",
                (
                    first + len(rows) - 1,
                    sum(m.tokens for m in messages),
                    now,
                    now,
                    idle_deadline,
                    *key,
                ),
            ).fetchall()
        # Only once committed: a failed append must not leave seqs on the caller's messages.
        for i, m in enumerate(messages):
            m.seq = first + i
        return _row_session(updated[0])

    def list_messages(
        self,
        account_id: str,
        user_id: str,
        session_id: str,
        *,
        after_seq: int = 0,
        upto_seq: int | None = None,
    ) -> list[SessionMessage]:
        sql = f"SELECT * FROM session_messages WHERE {_KEY} AND seq > ?"
        params: list[Any] = [account_id, user_id, session_id, after_seq]
        if upto_seq is not None:
            sql += " AND seq <= ?"
            params.append(upto_seq)
        rows = self._db.conn().execute(sql + " ORDER BY seq", params).fetchall()
        return [_row_message(r) for r in rows]

    # ---------------------------------------------------------------------------------------
    # archives

    def reserve_archive(
        self,
        account_id: str,
        user_id: str,
        session_id: str,
        *,
        keep_recent: int,
        now: float,
        task_id: str | None,
        reset: bool = False,
        task: Callable[[ArchiveRecord], Task] | None = None,
        outbox: Mapping[str, Any] | None = None,
    ) -> ArchiveRecord | None:
        if keep_recent < 0:
            raise ValueError("keep_recent must be >= 0")
        key = (account_id, user_id, session_id)
        with self._db.write() as conn:
            session = conn.execute(
                "SELECT last_seq, archived_seq, next_archive, failed_archive"
                f" FROM sessions WHERE {_KEY}",
                key,
            ).fetchone()
            if session is None:
                raise StateNotFound(f"session {account_id}/{user_id}/{session_id}")
            if session["failed_archive"] is not None:
                raise StateConflict(
                    f"session {account_id}/{user_id}/{session_id} has an unresolved failed "
                    f"archive ({session['failed_archive']})"
                )
            last_seq = int(session["last_seq"])
            archived_seq = int(session["archived_seq"])
            end = last_seq - keep_recent
            if end <= archived_seq and not reset:
                return None
            # A reset with nothing to archive still records an (empty) archive, so that the
            # reset is visible and numbered like every other commit.
            end_seq = max(end, archived_seq)
            archive = ArchiveRecord(
                account_id=account_id,
                user_id=user_id,
                session_id=session_id,
                number=int(session["next_archive"]),
                start_seq=archived_seq + 1,
                end_seq=end_seq,
                created_at=now,
                status=ArchiveStatus.RESET if reset else ArchiveStatus.PENDING,
                task_id=task_id,
                outbox=None if outbox is None else dict(outbox),
            )
            try:
                conn.execute(
                    "INSERT INTO session_archives (account_id, user_id, session_id, number,"
                    " start_seq, end_seq, created_at, status, task_id, error, meta, outbox)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, '{}', ?)",
                    (
                        *key,
                        archive.number,
                        archive.start_seq,
                        archive.end_seq,
                        now,
                        archive.status,
                        task_id,
                        _archive_value("outbox", archive.outbox),
                    ),
                )
            except sqlite3.IntegrityError:
                # Only possible when next_archive was set behind the store's back.
                raise StateConflict(
                    f"{archive.archive_id} of {account_id}/{user_id}/{session_id} exists"
                ) from None
            if task is not None:
                row = task(archive)
                if row.task_id != task_id:
                    raise ValueError("the commit's task must carry task_id")
                insert_task(conn, row)  # StateConflict rolls everything back
            # Recounted from the rows rather than subtracted, so an estimate that drifted
            # (e.g. a record created with live_tokens set) heals at every commit.
            live_tokens = conn.execute(
                f"SELECT COALESCE(SUM(tokens), 0) FROM session_messages WHERE {_KEY} AND seq > ?",
                (*key, end_seq),
            ).fetchone()[0]
            conn.execute(
                "UPDATE sessions SET archived_seq = ?, next_archive = next_archive + 1,"
                " commit_count = commit_count + 1, live_tokens = ?, updated_at = ?,"
                " idle_deadline = CASE WHEN last_seq > ? THEN idle_deadline END"
                f" WHERE {_KEY}",
                (end_seq, int(live_tokens), now, end_seq, *key),
            )
        return archive

    def get_archive(
        self, account_id: str, user_id: str, session_id: str, number: int
    ) -> ArchiveRecord | None:
        row = (
            self._db.conn()
            .execute(
                f"SELECT * FROM session_archives WHERE {_KEY} AND number = ?",
                (account_id, user_id, session_id, number),
            )
            .fetchone()
        )
        return None if row is None else _row_archive(row)

    def list_archives(self, account_id: str, user_id: str, session_id: str) -> list[ArchiveRecord]:
        rows = (
            self._db.conn()
            .execute(
                f"SELECT * FROM session_archives WHERE {_KEY} ORDER BY number",
                (account_id, user_id, session_id),
            )
            .fetchall()
        )
        return [_row_archive(r) for r in rows]

    def open_commits(self, account_id: str, user_id: str, session_id: str) -> list[ArchiveRecord]:
        rows = (
            self._db.conn()
            .execute(
                f"SELECT * FROM session_archives WHERE {_KEY} AND outbox IS NOT NULL"
                " ORDER BY number",
                (account_id, user_id, session_id),
            )
            .fetchall()
        )
        return [_row_archive(r) for r in rows]

    def stale_commits(self, before: float | None, limit: int = 100) -> list[ArchiveRecord]:
        sql = "SELECT * FROM session_archives WHERE outbox IS NOT NULL"
        params: list[Any] = []
        if before is not None:
            sql += " AND created_at <= ?"
            params.append(before)
        sql += " ORDER BY created_at, account_id, user_id, session_id, number LIMIT ?"
        rows = self._db.conn().execute(sql, (*params, max(0, int(limit)))).fetchall()
        return [_row_archive(r) for r in rows]

    def rollback_commit(self, account_id: str, user_id: str, session_id: str, number: int) -> bool:
        key = (account_id, user_id, session_id)
        with self._db.write() as conn:
            arch = conn.execute(
                f"SELECT start_seq, end_seq, outbox FROM session_archives WHERE {_KEY}"
                " AND number = ?",
                (*key, number),
            ).fetchone()
            if arch is None:
                raise StateNotFound(f"{_archive_id(number)} of {account_id}/{user_id}/{session_id}")
            session = conn.execute(
                f"SELECT archived_seq, next_archive FROM sessions WHERE {_KEY}", key
            ).fetchone()
            # Only the newest reservation can give its messages back: a later archive's range
            # starts right after this one's.
            if (
                arch["outbox"] is None
                or session["archived_seq"] != arch["end_seq"]
                or session["next_archive"] != number + 1
            ):
                return False
            conn.execute(
                f"DELETE FROM session_archives WHERE {_KEY} AND number = ?", (*key, number)
            )
            watermark = int(arch["start_seq"]) - 1
            live_tokens = conn.execute(
                f"SELECT COALESCE(SUM(tokens), 0) FROM session_messages WHERE {_KEY} AND seq > ?",
                (*key, watermark),
            ).fetchone()[0]
            conn.execute(
                "UPDATE sessions SET archived_seq = ?, commit_count = commit_count - 1,"
                " live_tokens = ?, updated_at = ?,"
                " failed_archive = CASE WHEN failed_archive = ? THEN NULL"
                " ELSE failed_archive END"
                f" WHERE {_KEY}",
                (watermark, int(live_tokens), time.time(), _archive_id(number), *key),
            )
        return True

    def update_archive(
        self, account_id: str, user_id: str, session_id: str, number: int, **changes: Any
    ) -> ArchiveRecord:
        """Raises StateNotFound, or ValueError for another field or an unknown status. A
        "reset" status clears the session's failed_archive like "done" does."""
        bad = set(changes) - _ARCHIVE_UPDATABLE
        if bad:
            raise ValueError(f"cannot update archive field(s): {', '.join(sorted(bad))}")
        status = changes.get("status")
        if "status" in changes and status not in ARCHIVE_STATUSES:
            raise ValueError(f"unknown archive status {status!r}")
        key = (account_id, user_id, session_id)
        archive_id = _archive_id(number)
        with self._db.write() as conn:
            if changes:
                columns = sorted(changes)  # fixed order: names come from the allow-list above
                assignments = ", ".join(f"{c} = ?" for c in columns)
                values = [_archive_value(c, changes[c]) for c in columns]
                updated = conn.execute(
                    f"UPDATE session_archives SET {assignments} WHERE {_KEY} AND number = ?"
                    " RETURNING *",
                    (*values, *key, number),
                ).fetchall()
                row = updated[0] if updated else None
            else:
                row = conn.execute(
                    f"SELECT * FROM session_archives WHERE {_KEY} AND number = ?",
                    (*key, number),
                ).fetchone()
            if row is None:
                raise StateNotFound(f"{archive_id} of {account_id}/{user_id}/{session_id}")
            # Same transaction: a commit racing this update either sees the block or not,
            # never an archive marked failed that does not block.
            if status == ArchiveStatus.FAILED:
                conn.execute(
                    f"UPDATE sessions SET failed_archive = ?, updated_at = ? WHERE {_KEY}",
                    (archive_id, time.time(), *key),
                )
            elif status in (ArchiveStatus.DONE, ArchiveStatus.RESET):
                conn.execute(
                    f"UPDATE sessions SET failed_archive = NULL, updated_at = ?"
                    f" WHERE {_KEY} AND failed_archive = ?",
                    (time.time(), *key, archive_id),
                )
        return _row_archive(row)

    # ---------------------------------------------------------------------------------------
    # idle auto-commit

    def due_idle_sessions(self, now: float, limit: int = 100) -> list[tuple[str, str, str]]:
        """Oldest deadline first."""
        rows = (
            self._db.conn()
            .execute(
                "SELECT account_id, user_id, session_id FROM sessions"
                " WHERE idle_deadline <= ? AND last_seq > archived_seq"
                " ORDER BY idle_deadline, account_id, user_id, session_id LIMIT ?",
                (now, max(0, int(limit))),
            )
            .fetchall()
        )
        return [(r["account_id"], r["user_id"], r["session_id"]) for r in rows]
