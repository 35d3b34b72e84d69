"""JobQueue on SQLite: a durable table of jobs, leased with receipts (SQS-like semantics).

* lease() claims visible jobs in one BEGIN IMMEDIATE transaction, so concurrent workers (threads
  or processes) never get the same job; each lease carries a fresh random receipt.
* A lease that is not acked, nacked or extended before `visibility_s` makes the job visible
  again; the next lease bumps `attempts` and issues a new receipt, which makes the old one stale.
  An expired lease whose receipt was not yet replaced is still honoured (as SQS does).
* nack retries with exponential backoff, and dead-letters once `attempts >= max_attempts`.
  A job whose lease expires after its last allowed attempt is dead-lettered by the next lease()
  instead of being delivered again (SQS redrive: maxReceiveCount).
* Dedup: enqueue with a dedup_key returns the oldest never-leased pending job with that
  (queue, dedup_key). A job that was leased (running, or waiting for a retry) never absorbs a
  new enqueue: a change that arrives while a job runs is processed again afterwards, and a
  change is not lost if a failing retry ends in the dead letters. The existing job keeps its
  payload and visibility.
* Done rows are pruned to the newest `done_retention`; counters live in `job_counters`.
* Fairness: each row keeps its job's account (the payload's `account`, '' for a system job),
  so depth_of(account) is one indexed count, and lease() serves accounts round robin within a
  queue: the oldest visible job of the account served least recently first (each account's
  own jobs in order), then the next account's; `job_rotation` holds the accounts with jobs
  in each queue and when each was last served, across the processes sharing the file. A
  lease reads each account's first rows by index: its cost grows with the accounts waiting,
  not with their backlogs.

The queue may share a database file with SqliteStateStore (pass the same path or `db=`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import secrets
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skald import catalog
from skald.adapters.local.sqlite.statestore import Migration, SqliteComponent, SqliteDb
from skald.domain.ops.fairness import job_account
from skald.ports import DeadLetter, Job, Lease, QueueStats

_QUEUE_MIGRATIONS: list[Migration] = [
    (
        """CREATE TABLE jobs (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id TEXT NOT NULL UNIQUE,
            queue TEXT NOT NULL,
            kind TEXT NOT NULL,
            payload TEXT NOT NULL,
            dedup_key TEXT,
            status TEXT NOT NULL CHECK (status IN ('pending', 'inflight', 'done', 'dead')),
            visible_at REAL NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            receipt TEXT,
            last_error TEXT,
            enqueued_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )""",
        "CREATE INDEX jobs_ready ON jobs (queue, status, visible_at, seq)",
        "CREATE INDEX jobs_dedup ON jobs (queue, dedup_key, status) WHERE dedup_key IS NOT NULL",
        "CREATE INDEX jobs_status_seq ON jobs (status, seq)",
        "CREATE INDEX jobs_dead ON jobs (queue, status, updated_at)",
        """CREATE TABLE job_counters (
            queue TEXT NOT NULL,
            name TEXT NOT NULL,
            value INTEGER NOT NULL,
            PRIMARY KEY (queue, name)
        )""",
    ),
    # Fairness: the job's account in a column of its own (rows of an older release get it
    # from their payload), and the order accounts were served in per queue.
    (
        "ALTER TABLE jobs ADD COLUMN account TEXT NOT NULL DEFAULT ''",
        """UPDATE jobs SET account = json_extract(payload, '$.account')
            WHERE json_type(payload, '$.account') = 'text'""",
        "CREATE INDEX jobs_account ON jobs (account, status)",
        # An account's visible jobs of a queue in order, for the round robin of lease().
        """CREATE INDEX jobs_turns ON jobs (queue, account, visible_at, seq)
            WHERE status IN ('pending', 'inflight')""",
        """CREATE TABLE job_rotation (
            queue TEXT NOT NULL,
            account TEXT NOT NULL,
            served INTEGER NOT NULL,
            PRIMARY KEY (queue, account)
        )""",
        """INSERT INTO job_rotation (queue, account, served)
            SELECT DISTINCT queue, account, 0 FROM jobs WHERE status IN ('pending', 'inflight')""",
    ),
]

_PRUNE_EVERY = 256  # acks between two prunes of done rows
_ERROR_MAX_CHARS = 8000


# An account's visible jobs of a queue, oldest first (the partial index jobs_turns).
_VISIBLE_OF = (
    "SELECT * FROM jobs WHERE queue = ? AND account = ? AND status IN ('pending', 'inflight')"
    " AND visible_at <= ? ORDER BY visible_at, seq LIMIT ? OFFSET ?"
)
_LEAVE_ROTATION = (
    "DELETE FROM job_rotation WHERE queue = ? AND account = ? AND NOT EXISTS ("
    " SELECT 1 FROM jobs WHERE queue = ? AND account = ? AND status IN ('pending', 'inflight'))"
)


def _row_job(row: sqlite3.Row, *, attempts: int | None = None) -> Job:
    return Job(
        job_id=row["job_id"],
        queue=row["queue"],
        kind=row["kind"],
        payload=json.loads(row["payload"]),
        attempts=row["attempts"] if attempts is None else attempts,
        dedup_key=row["dedup_key"],
    )


def _bump(conn: sqlite3.Connection, queue: str, name: str, by: int = 1) -> None:
    conn.execute(
        "INSERT INTO job_counters (queue, name, value) VALUES (?, ?, ?)"
        " ON CONFLICT (queue, name) DO UPDATE SET value = value + excluded.value",
        (queue, name, by),
    )


class SqliteJobQueue(SqliteComponent):
    """JobQueue on one SQLite file (WAL). Thread- and process-safe; call close() at shutdown."""

    COMPONENT = "jobqueue"

    def __init__(
        self,
        path: Path,
        *,
        max_attempts: int = 5,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        done_retention: int = 10_000,
        db: SqliteDb | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self._max_attempts = max_attempts
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._clock = clock
        self._done_retention = done_retention
        self._acks = itertools.count(1)  # next() is atomic under the GIL
        # Called after each enqueue() commits: idle workers of this process wake at once
        # instead of at their next poll (JobWorkerPool backs its polling off while idle).
        self._listeners: list[Callable[[], None]] = []
        super().__init__(path, _QUEUE_MIGRATIONS, db=db)

    @property
    def max_attempts(self) -> int:
        return self._max_attempts

    def backoff_s(self, attempts: int) -> float:
        """Delay before the retry that follows failed delivery number `attempts` (1-based)."""
        exponent = max(0, attempts - 1)
        if exponent > 60:  # 2**61 * base overflows any sane cap anyway
            return self._backoff_max_s
        return float(min(self._backoff_max_s, self._backoff_base_s * 2**exponent))

    # ---------------------------------------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        kind: str,
        payload: dict[str, Any],
        *,
        dedup_key: str | None = None,
        delay_s: float = 0.0,
    ) -> str:
        with self._db.write() as conn:
            job_id = self.enqueue_in(
                conn, queue, kind, payload, dedup_key=dedup_key, delay_s=delay_s
            )
        for listener in list(self._listeners):
            listener()
        return job_id

    def on_enqueue(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Calls `listener()` after every enqueue() of this instance has committed (not after
        enqueue_in, whose transaction the caller commits, nor other processes' enqueues);
        returns the call that removes it."""
        self._listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    def enqueue_in(
        self,
        conn: sqlite3.Connection,
        queue: str,
        kind: str,
        payload: dict[str, Any],
        *,
        dedup_key: str | None = None,
        delay_s: float = 0.0,
    ) -> str:
        """enqueue() inside the caller's open write transaction (`with db.write() as conn`) on
        the same database, so a state change and its job commit or roll back together.
        Transactions do not nest: calling enqueue() there instead would fail."""
        body = json.dumps(payload)
        now = self._clock()
        if dedup_key is not None:
            row = conn.execute(
                "SELECT job_id FROM jobs WHERE queue = ? AND dedup_key = ?"
                " AND status = 'pending' AND attempts = 0 ORDER BY seq LIMIT 1",
                (queue, dedup_key),
            ).fetchone()
            if row is not None:
                return str(row["job_id"])
        job_id = uuid.uuid4().hex
        account = job_account(payload) or ""
        conn.execute(
            "INSERT INTO jobs (job_id, queue, kind, payload, dedup_key, status, visible_at,"
            " attempts, enqueued_at, updated_at, account)"
            " VALUES (?, ?, ?, ?, ?, 'pending', ?, 0, ?, ?, ?)",
            (
                job_id,
                queue,
                kind,
                body,
                dedup_key,
                now + max(0.0, delay_s),
                now,
                now,
                account,
            ),
        )
        # A new account joins the queue's rotation at its front (never served).
        conn.execute(
            "INSERT OR IGNORE INTO job_rotation (queue, account, served) VALUES (?, ?, 0)",
            (queue, account),
        )
        return job_id

    def lease(self, queue: str, *, max_jobs: int = 1, visibility_s: float = 60.0) -> list[Lease]:
        if max_jobs < 1:
            return []
        now = self._clock()
        leases: list[Lease] = []
        with self._db.write() as conn:
            # Leases that expired after the last allowed delivery go to the dead letters.
            conn.execute(
                "UPDATE jobs SET status = 'dead', receipt = NULL, updated_at = ?,"
                " last_error = 'lease expired after ' || attempts || ' deliveries'"
                " || COALESCE('; last error: ' || last_error, '')"
                " WHERE queue = ? AND status = 'inflight' AND visible_at <= ? AND attempts >= ?",
                (now, queue, now, self._max_attempts),
            )
            rows = self._round_robin(conn, queue, now, max_jobs)
            self._served(conn, queue, rows)
            for row in rows:
                receipt = secrets.token_hex(16)
                conn.execute(
                    "UPDATE jobs SET status = 'inflight', attempts = attempts + 1, receipt = ?,"
                    " visible_at = ?, updated_at = ? WHERE seq = ?",
                    (receipt, now + visibility_s, now, row["seq"]),
                )
                job = _row_job(row, attempts=int(row["attempts"]) + 1)
                leases.append(Lease(job=job, receipt=receipt))
        return leases

    @staticmethod
    def _round_robin(
        conn: sqlite3.Connection, queue: str, now: float, max_jobs: int
    ) -> list[sqlite3.Row]:
        """Up to `max_jobs` visible jobs of `queue`, round robin across accounts: each
        account's oldest first, the account served least recently (never: first) first, then
        each one's next. An account with nothing left in the queue leaves the rotation."""
        accounts = [
            str(r[0])
            for r in conn.execute(
                "SELECT account FROM job_rotation WHERE queue = ? ORDER BY served, rowid",
                (queue,),
            )
        ]
        turns: list[list[sqlite3.Row]] = []
        for account in accounts:  # each account's oldest, while there is room
            if len(turns) >= max_jobs:
                break
            first = conn.execute(_VISIBLE_OF, (queue, account, now, 1, 0)).fetchall()
            if first:
                turns.append(first)
            else:
                conn.execute(_LEAVE_ROTATION, (queue, account, queue, account))
        room = max_jobs - len(turns)
        if room > 0:  # then their next ones
            for rows in turns:
                account = str(rows[0]["account"])
                rows += conn.execute(_VISIBLE_OF, (queue, account, now, room, 1)).fetchall()
        # Interleave: every account's first job, then every account's second, ...
        out: list[sqlite3.Row] = []
        for turn in range(max((len(t) for t in turns), default=0)):
            out += [rows[turn] for rows in turns if turn < len(rows)]
        return out[:max_jobs]

    @staticmethod
    def _served(conn: sqlite3.Connection, queue: str, rows: list[sqlite3.Row]) -> None:
        """Moves the accounts just served to the back of the queue's rotation, in the order
        they were served."""
        accounts = list(dict.fromkeys(str(row["account"]) for row in rows))
        if not accounts:
            return
        top = conn.execute(
            "SELECT COALESCE(MAX(served), 0) FROM job_rotation WHERE queue = ?", (queue,)
        ).fetchone()[0]
        conn.executemany(
            "INSERT INTO job_rotation (queue, account, served) VALUES (?, ?, ?)"
            " ON CONFLICT (queue, account) DO UPDATE SET served = excluded.served",
            [(queue, account, int(top) + 1 + i) for i, account in enumerate(accounts)],
        )

    def ack(self, lease: Lease) -> bool:
        now = self._clock()
        with self._db.write() as conn:
            cur = conn.execute(
                "UPDATE jobs SET status = 'done', receipt = NULL, updated_at = ?"
                " WHERE job_id = ? AND receipt = ? AND status = 'inflight'",
                (now, lease.job.job_id, lease.receipt),
            )
            if cur.rowcount == 0:
                return False
            _bump(conn, lease.job.queue, "processed")
        if next(self._acks) % _PRUNE_EVERY == 0:
            self.prune_done()
        return True

    def nack(self, lease: Lease, error: str) -> None:
        self.nack_outcome(lease, error)

    def nack_outcome(self, lease: Lease, error: str) -> str | None:
        """nack() that tells what happened: "pending" (will retry), "dead", or None when the
        receipt was stale (nothing changed). Not part of the JobQueue port."""
        now = self._clock()
        error = error[:_ERROR_MAX_CHARS]
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT attempts FROM jobs"
                " WHERE job_id = ? AND receipt = ? AND status = 'inflight'",
                (lease.job.job_id, lease.receipt),
            ).fetchone()
            if row is None:
                return None
            attempts = int(row["attempts"])
            _bump(conn, lease.job.queue, "failed_attempts")
            if attempts >= self._max_attempts:
                conn.execute(
                    "UPDATE jobs SET status = 'dead', receipt = NULL, last_error = ?,"
                    " updated_at = ? WHERE job_id = ?",
                    (error, now, lease.job.job_id),
                )
                return "dead"
            conn.execute(
                "UPDATE jobs SET status = 'pending', receipt = NULL, last_error = ?,"
                " visible_at = ?, updated_at = ? WHERE job_id = ?",
                (error, now + self.backoff_s(attempts), now, lease.job.job_id),
            )
            return "pending"

    def extend(self, lease: Lease, visibility_s: float) -> bool:
        now = self._clock()
        with self._db.write() as conn:
            cur = conn.execute(
                "UPDATE jobs SET visible_at = ?, updated_at = ?"
                " WHERE job_id = ? AND receipt = ? AND status = 'inflight'",
                (now + visibility_s, now, lease.job.job_id, lease.receipt),
            )
            return cur.rowcount > 0

    def release_leases(self) -> int:
        """Makes every in-flight job visible again at once. Only for the sole owner of the
        queue file at start-up: leases held by a process that has exited are dead."""
        now = self._clock()
        with self._db.write() as conn:
            cur = conn.execute(
                "UPDATE jobs SET visible_at = ?, receipt = NULL, updated_at = ?"
                " WHERE status = 'inflight'",
                (now, now),
            )
            return cur.rowcount

    def stats(self, queue: str) -> QueueStats:
        """An expired lease counts as pending: the job is visible again."""
        now = self._clock()
        with self._db.read() as conn:
            row = conn.execute(
                "SELECT"
                " COALESCE(SUM(status = 'pending' OR (status = 'inflight' AND visible_at <= ?)),"
                " 0) AS pending,"
                " COALESCE(SUM(status = 'inflight' AND visible_at > ?), 0) AS inflight,"
                " COALESCE(SUM(status = 'dead'), 0) AS dead"
                " FROM jobs WHERE queue = ? AND status IN ('pending', 'inflight', 'dead')",
                (now, now, queue),
            ).fetchone()
            counters = dict(
                conn.execute(
                    "SELECT name, value FROM job_counters WHERE queue = ?", (queue,)
                ).fetchall()
            )
        return QueueStats(
            pending=int(row["pending"]),
            inflight=int(row["inflight"]),
            processed=int(counters.get("processed", 0)),
            failed_attempts=int(counters.get("failed_attempts", 0)),
            dead=int(row["dead"]),
        )

    def depth(self, queue: str) -> int:
        with self._db.read() as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM jobs WHERE queue = ? AND status IN ('pending', 'inflight')",
                (queue,),
            ).fetchone()
        return int(row[0])

    def depth_of(self, account_id: str) -> int:
        """The account's jobs not done yet in every queue (AccountJobs): one indexed count."""
        with self._db.read() as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM jobs WHERE account = ? AND status IN ('pending', 'inflight')",
                (account_id,),
            ).fetchone()
        return int(row[0])

    def purge_tenant(
        self, account_id: str, user_id: str | None = None, *, limit: int = 1000
    ) -> int:
        """The jobs of a removed account (or user) that are not running: waiting, dead and
        done rows (each holds its payload), but the purges themselves."""
        where = (
            "status IN ('pending', 'dead', 'done') AND queue != ?"
            " AND json_extract(payload, '$.account') = ?"
        )
        params: list[Any] = [catalog.QUEUE_PURGE, account_id]
        if user_id is not None:
            where += " AND json_extract(payload, '$.user') = ?"
            params.append(user_id)
        with self._db.write() as conn:
            cur = conn.execute(
                f"DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE {where} LIMIT ?)",
                (*params, max(1, int(limit))),
            )
            return cur.rowcount

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadLetter]:
        """Newest first."""
        rows = (
            self._db.conn()
            .execute(
                "SELECT * FROM jobs WHERE queue = ? AND status = 'dead'"
                " ORDER BY updated_at DESC, seq DESC LIMIT ?",
                (queue, max(0, limit)),
            )
            .fetchall()
        )
        return [
            DeadLetter(job=_row_job(r), error=r["last_error"] or "", failed_at=r["updated_at"])
            for r in rows
        ]

    def prune_done(self) -> int:
        """Keeps the newest `done_retention` done rows; returns how many went."""
        with self._db.write() as conn:
            cur = conn.execute(
                "DELETE FROM jobs WHERE status = 'done' AND seq <= ("
                " SELECT seq FROM jobs WHERE status = 'done' ORDER BY seq DESC"
                " LIMIT 1 OFFSET ?)",
                (self._done_retention,),
            )
            return cur.rowcount
