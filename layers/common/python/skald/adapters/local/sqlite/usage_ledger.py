"""UsageLedger on SQLite: the hourly cells and each account's running totals, tables of the
state database (their own component and migrations).

A flush is one transaction: every cell is an upsert adding to its value, and the totals take
the same amounts, so the two never disagree."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from skald.adapters.local.sqlite.db import Migration, SqliteComponent, SqliteDb
from skald.domain.metering.cells import UsageCell, UsageTotals, totals_delta

USAGE_MIGRATIONS: list[Migration] = [
    (
        """CREATE TABLE usage_cells (
            account_id TEXT NOT NULL,
            hour TEXT NOT NULL,
            user_id TEXT NOT NULL,
            unit TEXT NOT NULL,
            dims TEXT NOT NULL,
            value INTEGER NOT NULL,
            PRIMARY KEY (account_id, hour, user_id, unit, dims)
        )""",
        # `period` is "stored" for the all-time gauge, a day (YYYY-MM-DD) for LLM tokens.
        """CREATE TABLE usage_totals (
            account_id TEXT NOT NULL,
            period TEXT NOT NULL,
            value INTEGER NOT NULL,
            PRIMARY KEY (account_id, period)
        )""",
    ),
]

_STORED = "stored"


class SqliteUsageLedger(SqliteComponent):
    COMPONENT = "usage"

    def __init__(self, path: Path, *, db: SqliteDb | None = None) -> None:
        super().__init__(path, USAGE_MIGRATIONS, db=db)

    def add(self, cells: Sequence[UsageCell]) -> None:
        if not cells:
            return
        totals: list[tuple[str, str, int]] = []
        for account, t in totals_delta(cells).items():
            if t.stored_bytes:
                totals.append((account, _STORED, t.stored_bytes))
            totals.extend((account, day, n) for day, n in t.tokens_by_day.items() if n)
        with self._db.write() as conn:
            conn.executemany(
                "INSERT INTO usage_cells (account_id, hour, user_id, unit, dims, value)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (account_id, hour, user_id, unit, dims)"
                " DO UPDATE SET value = value + excluded.value",
                [(c.account_id, c.hour, c.user_id, c.unit, c.dims, c.value) for c in cells],
            )
            conn.executemany(
                "INSERT INTO usage_totals (account_id, period, value) VALUES (?, ?, ?)"
                " ON CONFLICT (account_id, period) DO UPDATE SET value = value + excluded.value",
                totals,
            )

    def cells(
        self, account_id: str, since_hour: str, until_hour: str, *, user_id: str | None = None
    ) -> list[UsageCell]:
        sql = (
            "SELECT hour, user_id, unit, dims, value FROM usage_cells"
            " WHERE account_id = ? AND hour >= ? AND hour <= ?"
        )
        params: list[str] = [account_id, since_hour, until_hour]
        if user_id is not None:
            sql += " AND user_id = ?"
            params.append(user_id)
        with self._db.read() as conn:
            rows = conn.execute(sql + " ORDER BY hour, user_id, unit, dims", params).fetchall()
        return [UsageCell(account_id, r[0], r[1], r[2], r[3], int(r[4])) for r in rows]

    def totals(self, account_id: str, day: str) -> UsageTotals:
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT period, value FROM usage_totals WHERE account_id = ? AND period IN (?, ?)",
                (account_id, _STORED, day),
            ).fetchall()
        out = UsageTotals()
        for period, value in rows:
            if period == _STORED:
                out.stored_bytes = int(value)
            else:
                out.tokens_by_day[period] = int(value)
        return out

    def purge_account(self, account_id: str) -> int:
        with self._db.write() as conn:
            n = conn.execute("DELETE FROM usage_cells WHERE account_id = ?", (account_id,)).rowcount
            n += conn.execute(
                "DELETE FROM usage_totals WHERE account_id = ?", (account_id,)
            ).rowcount
        return int(n)
