"""Accounts, users, API keys and deletion tombstones on SQLite: the AccountStore half of the
local state store (its tables are created by statestore.STATE_MIGRATIONS).

Tables: `accounts` (status, deletion as JSON), `users` (status, deletion, generation; the
legacy `key_hash` column is unused since keys moved to `api_keys`), `api_keys` (key_hash
primary key, one row per key, cascading with its user). Every change that spans rows (a user
and its first key; a tombstone and the removal of the user's keys) is one transaction.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from skald.adapters.local.sqlite.db import SqliteDb
from skald.ports import StateConflict, StateNotFound
from skald.ports.accounts import (
    ACTIVE,
    DELETING,
    MAX_KEYS_PER_USER,
    Account,
    ApiKey,
    Deletion,
    PendingDeletion,
    ResolvedKey,
    Status,
    User,
)

ACCOUNT_MIGRATION = (
    "ALTER TABLE accounts ADD COLUMN status TEXT NOT NULL DEFAULT 'active'",
    "ALTER TABLE accounts ADD COLUMN deletion TEXT",
    "ALTER TABLE users ADD COLUMN status TEXT NOT NULL DEFAULT 'active'",
    "ALTER TABLE users ADD COLUMN deletion TEXT",
    "ALTER TABLE users ADD COLUMN generation TEXT",
    """CREATE TABLE api_keys (
        key_hash TEXT PRIMARY KEY,
        key_id TEXT NOT NULL,
        account_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at REAL NOT NULL,
        created_by TEXT NOT NULL,
        expires_at REAL,
        last_used_at REAL,
        FOREIGN KEY (account_id, user_id) REFERENCES users (account_id, user_id)
            ON DELETE CASCADE
    )""",
    "CREATE UNIQUE INDEX api_keys_user ON api_keys (account_id, user_id, key_id)",
    # The one key a user had becomes that user's "default" key (its id: the hash's head).
    """INSERT INTO api_keys (key_hash, key_id, account_id, user_id, name, created_at,
                             created_by)
       SELECT key_hash, substr(key_hash, 1, 16), account_id, user_id, 'default', created_at,
              'migrated'
       FROM users WHERE key_hash IS NOT NULL""",
    "UPDATE users SET key_hash = NULL",
)


def _deletion(raw: str | None) -> Deletion | None:
    return None if raw is None else Deletion.from_dict(json.loads(raw))


def _dump(deletion: Deletion) -> str:
    return json.dumps(deletion.as_dict())


def _row_account(row: sqlite3.Row) -> Account:
    return Account(
        account_id=row["account_id"],
        created_at=row["created_at"],
        settings=json.loads(row["settings"]),
        status=Status(row["status"]),
        deletion=_deletion(row["deletion"]),
    )


def _row_user(row: sqlite3.Row) -> User:
    return User(
        account_id=row["account_id"],
        user_id=row["user_id"],
        role=row["role"],
        created_at=row["created_at"],
        generation=row["generation"],
        status=Status(row["status"]),
        deletion=_deletion(row["deletion"]),
    )


def _row_key(row: sqlite3.Row) -> ApiKey:
    return ApiKey(
        key_id=row["key_id"],
        account_id=row["account_id"],
        user_id=row["user_id"],
        key_hash=row["key_hash"],
        name=row["name"],
        created_at=row["created_at"],
        created_by=row["created_by"],
        expires_at=row["expires_at"],
        last_used_at=row["last_used_at"],
    )


def _insert_key(conn: sqlite3.Connection, key: ApiKey) -> None:
    try:
        conn.execute(
            "INSERT INTO api_keys (key_hash, key_id, account_id, user_id, name, created_at,"
            " created_by, expires_at, last_used_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key.key_hash,
                key.key_id,
                key.account_id,
                key.user_id,
                key.name,
                key.created_at,
                key.created_by,
                key.expires_at,
                key.last_used_at,
            ),
        )
    except sqlite3.IntegrityError:
        raise StateConflict("key hash or key id already in use") from None


class SqliteAccounts:
    """The AccountStore methods; mixed into SqliteStateStore, which owns `_db`."""

    _db: SqliteDb

    # ---------------------------------------------------------------------------------------
    # accounts

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
        row = (
            self._db.conn()
            .execute("SELECT * FROM accounts WHERE account_id = ?", (account_id,))
            .fetchone()
        )
        return None if row is None else _row_account(row)

    def list_accounts(self) -> list[Account]:
        rows = self._db.conn().execute("SELECT * FROM accounts ORDER BY account_id").fetchall()
        return [_row_account(r) for r in rows]

    def update_account_settings(self, account_id: str, settings: dict[str, Any]) -> Account:
        with self._db.write() as conn:
            updated = conn.execute(
                "UPDATE accounts SET settings = ? WHERE account_id = ? AND status = ?",
                (json.dumps(settings), account_id, ACTIVE.value),
            ).rowcount
            row = conn.execute(
                "SELECT * FROM accounts WHERE account_id = ?", (account_id,)
            ).fetchone()
        if not updated or row is None:
            raise StateNotFound(f"account {account_id}")
        return _row_account(row)

    def begin_account_deletion(self, account_id: str, deletion: Deletion) -> Account:
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT * FROM accounts WHERE account_id = ?", (account_id,)
            ).fetchone()
            if row is None:
                raise StateNotFound(f"account {account_id}")
            if row["status"] == DELETING:
                return _row_account(row)
            conn.execute(
                "UPDATE accounts SET status = ?, deletion = ? WHERE account_id = ?",
                (DELETING, _dump(deletion), account_id),
            )
            row = conn.execute(
                "SELECT * FROM accounts WHERE account_id = ?", (account_id,)
            ).fetchone()
        return _row_account(row)

    def replace_account_deletion(
        self, account_id: str, expected_task_id: str, deletion: Deletion
    ) -> Account:
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT * FROM accounts WHERE account_id = ?", (account_id,)
            ).fetchone()
            if row is None or row["status"] != DELETING:
                raise StateNotFound(f"account {account_id} is not being deleted")
            current = _deletion(row["deletion"])
            if current is None or current.task_id != expected_task_id:
                raise StateConflict(f"account {account_id}: another purge took over")
            conn.execute(
                "UPDATE accounts SET deletion = ? WHERE account_id = ?",
                (_dump(deletion), account_id),
            )
            row = conn.execute(
                "SELECT * FROM accounts WHERE account_id = ?", (account_id,)
            ).fetchone()
        return _row_account(row)

    def finish_account_deletion(self, account_id: str, task_id: str) -> bool:
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT status, deletion FROM accounts WHERE account_id = ?", (account_id,)
            ).fetchone()
            current = None if row is None else _deletion(row["deletion"])
            if (
                row is None
                or row["status"] != DELETING
                or current is None
                or current.task_id != task_id
            ):
                return False
            # Keys cascade with their users.
            conn.execute("DELETE FROM users WHERE account_id = ?", (account_id,))
            conn.execute("DELETE FROM accounts WHERE account_id = ?", (account_id,))
            return True

    # ---------------------------------------------------------------------------------------
    # users

    def create_user(self, user: User, key: ApiKey | None = None) -> None:
        with self._db.write() as conn:
            account = conn.execute(
                "SELECT status FROM accounts WHERE account_id = ?", (user.account_id,)
            ).fetchone()
            if account is None or account["status"] != ACTIVE:
                raise StateNotFound(f"account {user.account_id}")
            try:
                conn.execute(
                    "INSERT INTO users (account_id, user_id, role, created_at, generation,"
                    " status) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        user.account_id,
                        user.user_id,
                        user.role,
                        user.created_at,
                        user.generation,
                        ACTIVE,
                    ),
                )
            except sqlite3.IntegrityError:
                raise StateConflict(f"user {user.account_id}/{user.user_id} exists") from None
            if key is not None:
                _insert_key(conn, key)

    def get_user(self, account_id: str, user_id: str) -> User | None:
        row = (
            self._db.conn()
            .execute(
                "SELECT * FROM users WHERE account_id = ? AND user_id = ?", (account_id, user_id)
            )
            .fetchone()
        )
        return None if row is None else _row_user(row)

    def list_users(self, account_id: str) -> list[User]:
        rows = (
            self._db.conn()
            .execute("SELECT * FROM users WHERE account_id = ? ORDER BY user_id", (account_id,))
            .fetchall()
        )
        return [_row_user(r) for r in rows]

    def _user_row(self, conn: sqlite3.Connection, account_id: str, user_id: str) -> Any:
        return conn.execute(
            "SELECT * FROM users WHERE account_id = ? AND user_id = ?", (account_id, user_id)
        ).fetchone()

    def begin_user_deletion(self, account_id: str, user_id: str, deletion: Deletion) -> User:
        with self._db.write() as conn:
            row = self._user_row(conn, account_id, user_id)
            if row is None:
                raise StateNotFound(f"user {account_id}/{user_id}")
            if row["status"] == DELETING:
                return _row_user(row)
            conn.execute(
                "UPDATE users SET status = ?, deletion = ? WHERE account_id = ? AND user_id = ?",
                (DELETING, _dump(deletion), account_id, user_id),
            )
            conn.execute(
                "DELETE FROM api_keys WHERE account_id = ? AND user_id = ?", (account_id, user_id)
            )
            return _row_user(self._user_row(conn, account_id, user_id))

    def replace_user_deletion(
        self, account_id: str, user_id: str, expected_task_id: str, deletion: Deletion
    ) -> User:
        with self._db.write() as conn:
            row = self._user_row(conn, account_id, user_id)
            if row is None or row["status"] != DELETING:
                raise StateNotFound(f"user {account_id}/{user_id} is not being deleted")
            current = _deletion(row["deletion"])
            if current is None or current.task_id != expected_task_id:
                raise StateConflict(f"user {account_id}/{user_id}: another purge took over")
            conn.execute(
                "UPDATE users SET deletion = ? WHERE account_id = ? AND user_id = ?",
                (_dump(deletion), account_id, user_id),
            )
            return _row_user(self._user_row(conn, account_id, user_id))

    def finish_user_deletion(self, account_id: str, user_id: str, task_id: str) -> bool:
        with self._db.write() as conn:
            row = self._user_row(conn, account_id, user_id)
            current = None if row is None else _deletion(row["deletion"])
            if (
                row is None
                or row["status"] != DELETING
                or current is None
                or current.task_id != task_id
            ):
                return False
            conn.execute(
                "DELETE FROM users WHERE account_id = ? AND user_id = ?", (account_id, user_id)
            )
            return True

    def pending_deletions(self) -> list[PendingDeletion]:
        conn = self._db.conn()
        out: list[PendingDeletion] = []
        for row in conn.execute(
            "SELECT account_id, deletion FROM accounts WHERE status = ? ORDER BY account_id",
            (DELETING,),
        ):
            deletion = _deletion(row["deletion"])
            if deletion is not None:
                out.append(PendingDeletion(row["account_id"], None, deletion))
        for row in conn.execute(
            "SELECT account_id, user_id, deletion FROM users"
            " WHERE status = ? ORDER BY account_id, user_id",
            (DELETING,),
        ):
            deletion = _deletion(row["deletion"])
            if deletion is not None:
                out.append(PendingDeletion(row["account_id"], row["user_id"], deletion))
        return out

    def set_user_role(self, account_id: str, user_id: str, role: str) -> None:
        with self._db.write() as conn:
            cur = conn.execute(
                "UPDATE users SET role = ? WHERE account_id = ? AND user_id = ? AND status = ?",
                (role, account_id, user_id, ACTIVE),
            )
            if cur.rowcount == 0:
                raise StateNotFound(f"user {account_id}/{user_id}")

    # ---------------------------------------------------------------------------------------
    # keys

    def add_key(self, key: ApiKey, *, replace_named: str | None = None) -> None:
        with self._db.write() as conn:
            row = self._user_row(conn, key.account_id, key.user_id)
            if row is None or row["status"] != ACTIVE:
                raise StateNotFound(f"user {key.account_id}/{key.user_id}")
            account = conn.execute(
                "SELECT status FROM accounts WHERE account_id = ?", (key.account_id,)
            ).fetchone()
            if account is None or account["status"] != ACTIVE:
                raise StateNotFound(f"account {key.account_id}")
            if replace_named is not None:
                conn.execute(
                    "DELETE FROM api_keys WHERE account_id = ? AND user_id = ? AND name = ?",
                    (key.account_id, key.user_id, replace_named),
                )
            held = conn.execute(
                "SELECT COUNT(*) FROM api_keys WHERE account_id = ? AND user_id = ?",
                (key.account_id, key.user_id),
            ).fetchone()[0]
            if held >= MAX_KEYS_PER_USER:
                raise StateConflict(
                    f"user {key.account_id}/{key.user_id} holds {MAX_KEYS_PER_USER} keys already"
                )
            _insert_key(conn, key)

    def list_keys(self, account_id: str, user_id: str | None = None) -> list[ApiKey]:
        where, params = "account_id = ?", [account_id]
        if user_id is not None:
            where += " AND user_id = ?"
            params.append(user_id)
        rows = (
            self._db.conn()
            .execute(f"SELECT * FROM api_keys WHERE {where} ORDER BY created_at, key_id", params)
            .fetchall()
        )
        return [_row_key(r) for r in rows]

    def delete_key(self, account_id: str, user_id: str, key_id: str) -> bool:
        with self._db.write() as conn:
            cur = conn.execute(
                "DELETE FROM api_keys WHERE account_id = ? AND user_id = ? AND key_id = ?",
                (account_id, user_id, key_id),
            )
            return cur.rowcount > 0

    def touch_key(self, key: ApiKey, at: float) -> None:
        with self._db.write() as conn:
            conn.execute(
                "UPDATE api_keys SET last_used_at = ? WHERE key_hash = ?", (at, key.key_hash)
            )

    def resolve_key(self, key_hash: str) -> ResolvedKey | None:
        with self._db.read() as conn:
            row = conn.execute("SELECT * FROM api_keys WHERE key_hash = ?", (key_hash,)).fetchone()
            if row is None:
                return None
            key = _row_key(row)
            user = self._user_row(conn, key.account_id, key.user_id)
            account = conn.execute(
                "SELECT * FROM accounts WHERE account_id = ?", (key.account_id,)
            ).fetchone()
        if user is None or account is None:  # cannot happen with the foreign keys on
            return None
        return ResolvedKey(key, _row_user(user), _row_account(account))
