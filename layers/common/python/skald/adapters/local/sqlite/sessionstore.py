"""SessionStore on SQLite (WAL): sessions, their append-only messages and their archives.

Every multi-step change (append, reserve an archive, resolve a failed archive, delete) runs in
one BEGIN IMMEDIATE transaction on a `SqliteDb`, so concurrent threads and processes that share
the file serialise on SQLite's write lock and never see a half-applied change. Sequence numbers
and archive numbers come from counters in the session row, read and bumped inside that same
transaction: they are dense and never handed out twice.

The tables live in the state store's file (pass `db=` or the same path): reserving a commit's
archive also creates its task, in the same transaction, so the session store makes sure the
state store's tables exist too. The tables' migrations, columns and row codecs are in
session_rows.py.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from skald.adapters.local.sqlite.session_rows import (
    ARCHIVE_UPDATABLE,
    KEY,
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    SESSION_MIGRATIONS,
    SESSION_UPDATABLE,
    archive_id_for,
    archive_value,
    row_archive,
    row_message,
    row_session,
    session_value,
)
from skald.adapters.local.sqlite.statestore import (
    STATE_MIGRATIONS,
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


class SqliteSessionStore(SqliteComponent):
    """SessionStore on one SQLite file. Safe to share across threads and processes; call
    close() at shutdown."""

    COMPONENT = "sessions"

    def __init__(self, path: Path, *, db: SqliteDb | None = None) -> None:
        super().__init__(path, SESSION_MIGRATIONS, db=db)
        # A commit's task is inserted by reserve_archive: the tasks table must exist.
        self._db.ensure_schema(SqliteStateStore.COMPONENT, STATE_MIGRATIONS)

    # ---------------------------------------------------------------------------------------
    # sessions

    def create_session(self, record: SessionRecord) -> None:
        values = [session_value(c, getattr(record, c)) for c in SESSION_COLUMNS]
        try:
            with self._db.write() as conn:
                conn.execute(
                    f"INSERT INTO sessions ({', '.join(SESSION_COLUMNS)})"
                    f" VALUES ({', '.join('?' for _ in SESSION_COLUMNS)})",
                    values,
                )
        except sqlite3.IntegrityError:
            raise StateConflict(
                f"session {record.account_id}/{record.user_id}/{record.session_id} exists"
            ) from None

    def get_session(self, account_id: str, user_id: str, session_id: str) -> SessionRecord | None:
        row = (
            self._db.conn()
            .execute(f"SELECT * FROM sessions WHERE {KEY}", (account_id, user_id, session_id))
            .fetchone()
        )
        return None if row is None else row_session(row)

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
        return [row_session(r) for r in rows]

    def delete_session(self, account_id: str, user_id: str, session_id: str) -> bool:
        key = (account_id, user_id, session_id)
        with self._db.write() as conn:
            conn.execute(f"DELETE FROM session_messages WHERE {KEY}", key)
            conn.execute(f"DELETE FROM session_archives WHERE {KEY}", key)
            cur = conn.execute(f"DELETE FROM sessions WHERE {KEY}", key)
            return cur.rowcount > 0

    def delete_account_sessions(self, account_id: str) -> int:
        with self._db.write() as conn:
            conn.execute("DELETE FROM session_messages WHERE account_id = ?", (account_id,))
            conn.execute("DELETE FROM session_archives WHERE account_id = ?", (account_id,))
            cur = conn.execute("DELETE FROM sessions WHERE account_id = ?", (account_id,))
            return cur.rowcount

    def count_sessions(self, account_id: str) -> int:
        row = (
            self._db.conn()
            .execute("SELECT COUNT(*) FROM sessions WHERE account_id = ?", (account_id,))
            .fetchone()
        )
        return int(row[0])

    def update_session(
        self, account_id: str, user_id: str, session_id: str, **changes: Any
    ) -> SessionRecord:
        """`updated_at` defaults to now. Identity fields, the watermarks and the counters kept
        by append_messages / reserve_archive, and unknown fields raise ValueError."""
        bad = set(changes) - SESSION_UPDATABLE
        if bad:
            raise ValueError(f"cannot update session field(s): {', '.join(sorted(bad))}")
        changes.setdefault("updated_at", time.time())
        columns = sorted(changes)  # fixed order: names come from the allow-list above
        assignments = ", ".join(f"{c} = ?" for c in columns)
        values = [session_value(c, changes[c]) for c in columns]
        key = (account_id, user_id, session_id)
        with self._db.write() as conn:
            # fetchall: a RETURNING statement must run to completion before COMMIT.
            rows = conn.execute(
                f"UPDATE sessions SET {assignments} WHERE {KEY} RETURNING *", (*values, *key)
            ).fetchall()
            if not rows:
                raise StateNotFound(f"session {account_id}/{user_id}/{session_id}")
        return row_session(rows[0])

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
            found = conn.execute(f"SELECT last_seq FROM sessions WHERE {KEY}", key).fetchone()
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
                f"INSERT INTO session_messages ({', '.join(MESSAGE_COLUMNS)})"
                f" VALUES ({', '.join('?' for _ in MESSAGE_COLUMNS)})",
                rows,
            )
            updated = conn.execute(
                "UPDATE sessions SET last_seq = ?, live_tokens = live_tokens + ?,"
                " last_activity = ?, updated_at = ?, idle_deadline = ?"
                f" WHERE {KEY} RETURNING *",
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
        return row_session(updated[0])

    def list_messages(
        self,
        account_id: str,
        user_id: str,
        session_id: str,
        *,
        after_seq: int = 0,
        upto_seq: int | None = None,
    ) -> list[SessionMessage]:
        sql = f"SELECT * FROM session_messages WHERE {KEY} AND seq > ?"
        params: list[Any] = [account_id, user_id, session_id, after_seq]
        if upto_seq is not None:
            sql += " AND seq <= ?"
            params.append(upto_seq)
        rows = self._db.conn().execute(sql + " ORDER BY seq", params).fetchall()
        return [row_message(r) for r in rows]

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
                f" FROM sessions WHERE {KEY}",
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
                        archive_value("outbox", archive.outbox),
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
                f"SELECT COALESCE(SUM(tokens), 0) FROM session_messages WHERE {KEY} AND seq > ?",
                (*key, end_seq),
            ).fetchone()[0]
            conn.execute(
                "UPDATE sessions SET archived_seq = ?, next_archive = next_archive + 1,"
                " commit_count = commit_count + 1, live_tokens = ?, updated_at = ?,"
                " idle_deadline = CASE WHEN last_seq > ? THEN idle_deadline END"
                f" WHERE {KEY}",
                (end_seq, int(live_tokens), now, end_seq, *key),
            )
        return archive

    def get_archive(
        self, account_id: str, user_id: str, session_id: str, number: int
    ) -> ArchiveRecord | None:
        row = (
            self._db.conn()
            .execute(
                f"SELECT * FROM session_archives WHERE {KEY} AND number = ?",
                (account_id, user_id, session_id, number),
            )
            .fetchone()
        )
        return None if row is None else row_archive(row)

    def list_archives(self, account_id: str, user_id: str, session_id: str) -> list[ArchiveRecord]:
        rows = (
            self._db.conn()
            .execute(
                f"SELECT * FROM session_archives WHERE {KEY} ORDER BY number",
                (account_id, user_id, session_id),
            )
            .fetchall()
        )
        return [row_archive(r) for r in rows]

    def open_commits(self, account_id: str, user_id: str, session_id: str) -> list[ArchiveRecord]:
        rows = (
            self._db.conn()
            .execute(
                f"SELECT * FROM session_archives WHERE {KEY} AND outbox IS NOT NULL"
                " ORDER BY number",
                (account_id, user_id, session_id),
            )
            .fetchall()
        )
        return [row_archive(r) for r in rows]

    def stale_commits(self, before: float | None, limit: int = 100) -> list[ArchiveRecord]:
        sql = "SELECT * FROM session_archives WHERE outbox IS NOT NULL"
        params: list[Any] = []
        if before is not None:
            sql += " AND created_at <= ?"
            params.append(before)
        sql += " ORDER BY created_at, account_id, user_id, session_id, number LIMIT ?"
        rows = self._db.conn().execute(sql, (*params, max(0, int(limit)))).fetchall()
        return [row_archive(r) for r in rows]

    def rollback_commit(self, account_id: str, user_id: str, session_id: str, number: int) -> bool:
        key = (account_id, user_id, session_id)
        with self._db.write() as conn:
            arch = conn.execute(
                f"SELECT start_seq, end_seq, outbox FROM session_archives WHERE {KEY}"
                " AND number = ?",
                (*key, number),
            ).fetchone()
            if arch is None:
                raise StateNotFound(
                    f"{archive_id_for(number)} of {account_id}/{user_id}/{session_id}"
                )
            session = conn.execute(
                f"SELECT archived_seq, next_archive FROM sessions WHERE {KEY}", key
            ).fetchone()
            # Only the newest reservation can give its messages back: a later archive's range
            # starts right after this one's.
            if (
                arch["outbox"] is None
                or session["archived_seq"] != arch["end_seq"]
                or session["next_archive"] != number + 1
            ):
                return False
            conn.execute(f"DELETE FROM session_archives WHERE {KEY} AND number = ?", (*key, number))
            watermark = int(arch["start_seq"]) - 1
            live_tokens = conn.execute(
                f"SELECT COALESCE(SUM(tokens), 0) FROM session_messages WHERE {KEY} AND seq > ?",
                (*key, watermark),
            ).fetchone()[0]
            conn.execute(
                "UPDATE sessions SET archived_seq = ?, commit_count = commit_count - 1,"
                " live_tokens = ?, updated_at = ?,"
                " failed_archive = CASE WHEN failed_archive = ? THEN NULL"
                " ELSE failed_archive END"
                f" WHERE {KEY}",
                (watermark, int(live_tokens), time.time(), archive_id_for(number), *key),
            )
        return True

    def update_archive(
        self, account_id: str, user_id: str, session_id: str, number: int, **changes: Any
    ) -> ArchiveRecord:
        """Raises StateNotFound, or ValueError for another field or an unknown status. A
        "reset" status clears the session's failed_archive like "done" does."""
        bad = set(changes) - ARCHIVE_UPDATABLE
        if bad:
            raise ValueError(f"cannot update archive field(s): {', '.join(sorted(bad))}")
        status = changes.get("status")
        if "status" in changes and status not in ARCHIVE_STATUSES:
            raise ValueError(f"unknown archive status {status!r}")
        key = (account_id, user_id, session_id)
        archive_id = archive_id_for(number)
        with self._db.write() as conn:
            if changes:
                columns = sorted(changes)  # fixed order: names come from the allow-list above
                assignments = ", ".join(f"{c} = ?" for c in columns)
                values = [archive_value(c, changes[c]) for c in columns]
                updated = conn.execute(
                    f"UPDATE session_archives SET {assignments} WHERE {KEY} AND number = ?"
                    " RETURNING *",
                    (*values, *key, number),
                ).fetchall()
                row = updated[0] if updated else None
            else:
                row = conn.execute(
                    f"SELECT * FROM session_archives WHERE {KEY} AND number = ?",
                    (*key, number),
                ).fetchone()
            if row is None:
                raise StateNotFound(f"{archive_id} of {account_id}/{user_id}/{session_id}")
            # Same transaction: a commit racing this update either sees the block or not,
            # never an archive marked failed that does not block.
            if status == ArchiveStatus.FAILED:
                conn.execute(
                    f"UPDATE sessions SET failed_archive = ?, updated_at = ? WHERE {KEY}",
                    (archive_id, time.time(), *key),
                )
            elif status in (ArchiveStatus.DONE, ArchiveStatus.RESET):
                conn.execute(
                    f"UPDATE sessions SET failed_archive = NULL, updated_at = ?"
                    f" WHERE {KEY} AND failed_archive = ?",
                    (time.time(), *key, archive_id),
                )
        return row_archive(row)

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
