"""The session tables on SQLite (sessionstore.py): their migrations, their columns, which of
them an update may change, and rows read back as the port's records."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from skald.adapters.local.sqlite.db import Migration
from skald.domain.memory.archives import ArchiveStatus
from skald.ports import ArchiveRecord, SessionMessage, SessionRecord

SESSION_MIGRATIONS: list[Migration] = [
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

SESSION_COLUMNS = (
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
SESSION_UPDATABLE = frozenset(
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

MESSAGE_COLUMNS = (
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

ARCHIVE_UPDATABLE = frozenset({"status", "error", "meta", "task_id", "outbox"})

KEY = "account_id = ? AND user_id = ? AND session_id = ?"  # one session's rows


def session_value(column: str, value: Any) -> Any:
    if column in _JSON_OBJECT_COLUMNS:
        return json.dumps(value or {})
    if column == "auto_commit_policy":
        return None if value is None else json.dumps(value)
    return value


def row_session(row: sqlite3.Row) -> SessionRecord:
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


def row_message(row: sqlite3.Row) -> SessionMessage:
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


def row_archive(row: sqlite3.Row) -> ArchiveRecord:
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


def archive_value(column: str, value: Any) -> Any:
    if column == "meta":
        return json.dumps(value or {})
    if column == "outbox":
        return None if value is None else json.dumps(value)
    return value


def archive_id_for(number: int) -> str:
    # Same spelling as ArchiveRecord.archive_id, which is what failed_archive holds.
    return f"archive_{number:03d}"
