"""AuditLog on SQLite: one table in the state database (its own component and migrations).

A record is committed (WAL, synchronous=NORMAL) before append() returns, so it survives the
process being killed; settle() changes a pending record only. Expired records are hidden from
every read and deleted now and then by a write (at most once per PRUNE_EVERY_S).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skald.adapters.local.sqlite.statestore import Migration, SqliteComponent, SqliteDb
from skald.domain.ops.audit import PENDING, AuditPage, AuditQuery, AuditRecord, Outcome

log = logging.getLogger("skald")

PRUNE_EVERY_S = 3600.0

AUDIT_MIGRATIONS: list[Migration] = [
    (
        """CREATE TABLE audit_log (
            record_id TEXT PRIMARY KEY,
            account_id TEXT NOT NULL,
            actor_account_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            role TEXT NOT NULL,
            key_id TEXT,
            action TEXT NOT NULL,
            api_type TEXT NOT NULL,
            target TEXT NOT NULL,
            request_id TEXT,
            source_ip TEXT,
            method TEXT,
            route TEXT,
            outcome TEXT NOT NULL,
            status_code INTEGER NOT NULL,
            duration_ms REAL NOT NULL,
            error_code TEXT,
            error_message TEXT,
            error_details TEXT,
            detail TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL
        )""",
        # An account's records newest first (an admin's view), every account's (root's),
        # one request's, and the expired ones (pruning).
        "CREATE INDEX audit_account ON audit_log (account_id, created_at DESC, record_id DESC)",
        "CREATE INDEX audit_created ON audit_log (created_at DESC, record_id DESC)",
        "CREATE INDEX audit_request ON audit_log (request_id)",
        "CREATE INDEX audit_expires ON audit_log (expires_at)",
    ),
]

_COLUMNS = (
    "record_id",
    "account_id",
    "actor_account_id",
    "user_id",
    "role",
    "key_id",
    "action",
    "api_type",
    "target",
    "request_id",
    "source_ip",
    "method",
    "route",
    "outcome",
    "status_code",
    "duration_ms",
    "error_code",
    "error_message",
    "error_details",
    "detail",
    "created_at",
    "expires_at",
)
_SETTLED = (
    "outcome",
    "status_code",
    "duration_ms",
    "error_code",
    "error_message",
    "error_details",
    "detail",
)


def _row_values(record: AuditRecord, columns: Sequence[str]) -> list[Any]:
    values: list[Any] = []
    for column in columns:
        if column == "api_type":
            values.append(record.api_type)
        elif column == "detail":
            values.append(json.dumps(record.detail))
        elif column == "error_details":
            details = record.error_details
            values.append(None if details is None else json.dumps(details))
        else:
            values.append(getattr(record, column))
    return values


def _record(row: sqlite3.Row) -> AuditRecord:
    fields = {c: row[c] for c in _COLUMNS if c != "api_type"}
    fields["detail"] = json.loads(fields["detail"] or "{}")
    fields["outcome"] = Outcome(fields["outcome"])
    raw = fields["error_details"]
    fields["error_details"] = None if raw is None else json.loads(raw)
    return AuditRecord(**fields)


def _where(q: AuditQuery) -> tuple[str, list[Any]]:
    """AuditQuery.matches as SQL."""
    where = ["created_at >= ?", "created_at <= ?", "expires_at > ?"]
    params: list[Any] = [q.since, q.until, q.now]
    if q.account_id is not None:
        where.insert(0, "account_id = ?")
        params.insert(0, q.account_id)
    for column, value in (("user_id", q.user_id), ("request_id", q.request_id)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    for column, values in (("action", q.actions), ("api_type", q.api_types)):
        if values:
            where.append(f"{column} IN ({', '.join('?' for _ in values)})")
            params.extend(values)
    if q.statuses:
        where.append(
            "(" + " OR ".join("(status_code >= ? AND status_code < ?)" for _ in q.statuses) + ")"
        )
        for s in q.statuses:
            params.extend((s.low, s.high))
    return " AND ".join(where), params


class SqliteAuditLog(SqliteComponent):
    COMPONENT = "audit"

    def __init__(self, path: Path, *, db: SqliteDb | None = None, clock: Any = time.time) -> None:
        super().__init__(path, AUDIT_MIGRATIONS, db=db)
        self._clock = clock
        self._pruned_at: float | None = None  # monotonic time of the last prune
        self._prune_lock = threading.Lock()

    def append(self, record: AuditRecord) -> None:
        try:
            with self._db.write() as conn:
                conn.execute(
                    f"INSERT INTO audit_log ({', '.join(_COLUMNS)})"
                    f" VALUES ({', '.join('?' for _ in _COLUMNS)})",
                    _row_values(record, _COLUMNS),
                )
        except sqlite3.IntegrityError:
            raise ValueError(f"audit record {record.record_id} exists") from None
        self._maybe_prune()

    def settle(self, record: AuditRecord) -> bool:
        assignments = ", ".join(f"{c} = ?" for c in _SETTLED)
        with self._db.write() as conn:
            cur = conn.execute(
                f"UPDATE audit_log SET {assignments}"
                " WHERE record_id = ? AND outcome = ? AND expires_at > ?",
                (*_row_values(record, _SETTLED), record.record_id, PENDING, self._clock()),
            )
            return cur.rowcount > 0

    def query(self, query: AuditQuery) -> AuditPage:
        where, params = _where(query)
        with self._db.read() as conn:
            summary = conn.execute(
                "SELECT COUNT(*) AS total, COALESCE(SUM(CASE WHEN status_code >= 200"
                " AND status_code < 400 THEN 1 ELSE 0 END), 0) AS ok"
                f" FROM audit_log WHERE {where}",
                params,
            ).fetchone()
            rows = conn.execute(
                f"SELECT * FROM audit_log WHERE {where}"
                " ORDER BY created_at DESC, record_id DESC LIMIT ? OFFSET ?",
                (*params, query.page_size, query.offset),
            ).fetchall()
        return AuditPage(int(summary["total"]), int(summary["ok"]), [_record(r) for r in rows])

    def prune(self) -> int:
        """Deletes the expired records; how many."""
        with self._db.write() as conn:
            cur = conn.execute("DELETE FROM audit_log WHERE expires_at <= ?", (self._clock(),))
            return cur.rowcount

    def _maybe_prune(self) -> None:
        now = time.monotonic()
        with self._prune_lock:
            if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY_S:
                return
            self._pruned_at = now
        try:
            self.prune()
        except sqlite3.Error:  # the record is written: a failed clean-up must not undo that
            log.exception("pruning expired audit records failed")
