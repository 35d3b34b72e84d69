"""The local stores on SQLite (WAL).

- db.py: SqliteDb (per-thread connections on one file) and SqliteComponent (schema migrations)
- statestore.py: SqliteStateStore: tasks, and accounts through accountstore.py
- accountstore.py: SqliteAccounts: accounts, users, API keys, tombstones
- sessionstore.py: SqliteSessionStore: sessions, messages, archives
- session_rows.py: the session tables: migrations, columns, rows as records
- audit_log.py: SqliteAuditLog: the audit trail
- jobqueue.py: SqliteJobQueue: durable jobs leased with receipts (queue.db)
"""

__all__ = [
    "accountstore",
    "audit_log",
    "db",
    "jobqueue",
    "session_rows",
    "sessionstore",
    "statestore",
]
