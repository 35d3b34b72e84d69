"""What every store of a stopped `skald serve` data dir (local backend) still holds of one
account, or of one user of it: the check that a purge left nothing behind.

Each store is read as itself, not through the API: the blob tree, the state, session and queue
tables, the search index. The purge's own records are not the tenant's (its task belongs to
whoever asked; its job names only ids) and are left out.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from skald import catalog
from skald.adapters.local.index.searchindex import LocalSearchIndex

PURGE_KINDS = (catalog.JOB_PURGE, catalog.JOB_RESUME_PURGES)


def _rows(db: Path, sql: str, params: tuple[object, ...]) -> list[str]:
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        return [" ".join(str(v) for v in row) for row in conn.execute(sql, params)]
    except sqlite3.OperationalError:  # a table this data dir never had
        return []
    finally:
        conn.close()


def local_leftovers(
    data_dir: Path, account: str, user: str | None = None, dimension: int = 384
) -> dict[str, list[str]]:
    """Store -> what it still holds of the tenant (empty lists when the purge was whole)."""
    out: dict[str, list[str]] = {}
    blobs = data_dir / "blobs"
    root = blobs / account if user is None else blobs / account / "user" / user
    out["blobs"] = (
        sorted(str(p.relative_to(blobs)) for p in root.rglob("*")) if root.exists() else []
    )
    uploads = blobs / account / "upload"
    if user is not None and uploads.exists():
        for meta in uploads.glob("*.meta"):
            if json.loads(meta.read_text()).get("user") == user:
                out["blobs"].append(str(meta.relative_to(blobs)))
    out["watches"] = [
        p.name
        for p in (blobs / "_watches").glob("*.json")
        if (w := json.loads(p.read_text()))["account_id"] == account
        and (user is None or w["user_id"] == user)
    ]
    state = data_dir / "state.db"
    who, args = (
        ("account_id = ?", (account,))
        if user is None
        else ("account_id = ? AND user_id = ?", (account, user))
    )
    out["accounts"] = (
        _rows(state, "SELECT account_id FROM accounts WHERE account_id = ?", (account,))
        if user is None
        else []
    )
    for table in ("users", "api_keys", "tasks", "sessions", "session_messages", "session_archives"):
        out[table] = _rows(state, f"SELECT * FROM {table} WHERE {who}", args)
    payload = "json_extract(payload, '$.account') = ?" + (
        "" if user is None else " AND json_extract(payload, '$.user') = ?"
    )
    out["jobs"] = _rows(
        data_dir / "queue.db",
        f"SELECT kind, status, payload FROM jobs WHERE {payload} AND kind NOT IN (?, ?)",
        (*args, *PURGE_KINDS),
    )
    index = LocalSearchIndex(data_dir / "index.db", dimension=dimension)
    try:
        records, cursor = index.scroll(account, limit=1000)
        while cursor is not None:
            more, cursor = index.scroll(account, limit=1000, cursor=cursor)
            records += more
    finally:
        index.close()
    mine = f"viking://user/{user}"
    out["index_records"] = [
        r.uri for r in records if user is None or r.uri == mine or r.uri.startswith(mine + "/")
    ]
    return out


def nothing_left(leftovers: dict[str, list[str]]) -> bool:
    return not any(leftovers.values())
