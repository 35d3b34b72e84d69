"""The embedded index's persistence: the SQLite schema (the source of truth), the record <->
row codecs, writes and reads (hydrating hits). Loading the columns at open: index_load.

`records` holds every IndexRecord, its vector as a unit-length float32 blob and its BM25 term
counts (derived, so opening needs no re-tokenisation). Rowids come from AUTOINCREMENT and are
never reused, so rows stay in rowid order in memory.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skald.adapters.local.index import bm25
from skald.adapters.local.index.columns import F32Array, Row
from skald.ports import IndexRecord, IndexVectorMismatch

SCHEMA_VERSION = 1

_COLS = (
    "account, uri, level, section, context_type, parent, ancestors, text, abstract, vector, "
    "line_start, line_end, tags, memory_type, owner, peer, created_at, updated_at"
)
# Search hits carry no vector (as on OpenSearch): reading and converting 384 floats per hit
# was a tenth of a find's index time.
_HIT_COLS = _COLS.replace("vector", "NULL")
_SCHEMA = """CREATE TABLE IF NOT EXISTS records (
    -- AUTOINCREMENT: a rowid is never reused, so rows stay in rowid order in memory.
    rid INTEGER PRIMARY KEY AUTOINCREMENT,
    account TEXT NOT NULL,
    uri TEXT NOT NULL,
    level INTEGER NOT NULL,
    section INTEGER NOT NULL,
    context_type TEXT NOT NULL,
    parent TEXT NOT NULL,
    ancestors TEXT NOT NULL,
    text TEXT NOT NULL,
    abstract TEXT NOT NULL,
    vector BLOB,
    line_start INTEGER,
    line_end INTEGER,
    tags TEXT NOT NULL,
    memory_type TEXT,
    owner TEXT,
    peer TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    -- BM25 term counts of `text` (derived, so opening needs no re-tokenisation): distinct
    -- terms joined by spaces, their frequencies as little-endian uint16, the token count.
    terms TEXT NOT NULL,
    tfs BLOB NOT NULL,
    doclen INTEGER NOT NULL,
    UNIQUE (account, uri, level, section)
)"""


def connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    # Autocommit mode: the writer's transactions are explicit (BEGIN IMMEDIATE ... COMMIT).
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    if readonly:
        conn.execute("PRAGMA query_only = 1")
    return conn


def init_schema(w: sqlite3.Connection, path: Path, dimension: int, stemming: bool) -> None:
    """Creates or checks the schema (version, vector dimension); recomputes the stored term
    counts when the tokenizer changed."""
    w.execute("PRAGMA journal_mode = WAL")
    # The index is derived and rebuildable: NORMAL keeps WAL commits cheap and atomic.
    w.execute("PRAGMA synchronous = NORMAL")
    w.execute("BEGIN IMMEDIATE")
    try:
        w.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        meta = dict(w.execute("SELECT key, value FROM meta").fetchall())
        if meta:
            if meta.get("schema_version") != str(SCHEMA_VERSION):
                raise ValueError(f"{path}: unsupported index schema version")
            if meta.get("dimension") != str(dimension):
                raise ValueError(
                    f"{path} holds {meta.get('dimension')}-d vectors, not {dimension}"
                    "-d: reindex into a new index after changing the embedding model"
                )
        else:
            w.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?)",
                [("schema_version", str(SCHEMA_VERSION)), ("dimension", str(dimension))],
            )
        # Names this database file: a vector sidecar or columns snapshot left beside a file
        # that was replaced (same rowids, other records) is not taken for its own.
        w.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('instance', ?)", (uuid.uuid4().hex,)
        )
        w.execute(_SCHEMA)
        tokenizer = bm25.tokenizer_id(stemming)
        if meta.get("tokenizer", tokenizer) != tokenizer:
            _retokenize(w, stemming)
        w.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('tokenizer', ?)", (tokenizer,))
        w.execute("COMMIT")
    except BaseException:
        w.execute("ROLLBACK")
        raise


def _retokenize(w: sqlite3.Connection, stemming: bool) -> None:
    """Recomputes the persisted BM25 term counts (the tokenizer changed)."""
    cur = w.execute("SELECT rid, text FROM records")
    while chunk := cur.fetchmany(4096):
        updates = []
        for rid, text in chunk:
            terms, tfs, doclen = bm25.term_counts(text, stemming)
            updates.append((" ".join(terms), tfs, doclen, rid))
        w.executemany("UPDATE records SET terms = ?, tfs = ?, doclen = ? WHERE rid = ?", updates)


def max_rid(w: sqlite3.Connection) -> int:
    seq = w.execute("SELECT seq FROM sqlite_sequence WHERE name = 'records'").fetchone()
    top = w.execute("SELECT COALESCE(MAX(rid), 0) FROM records").fetchone()
    return max(int(seq[0]) if seq else 0, int(top[0]))


# --------------------------------------------------------------------------------------------
# Writes.


@dataclass
class Prepared:
    """A record ready to store: its unit vector and its BM25 term counts."""

    record: IndexRecord
    vector: F32Array | None
    terms: list[str]
    tfs: bytes
    doclen: int


def prepare(rec: IndexRecord, dimension: int, stemming: bool) -> Prepared:
    """Validation, normalisation and tokenisation, done before taking any lock."""
    if not rec.account or not rec.uri:
        raise ValueError("IndexRecord.account and IndexRecord.uri are required")
    vec: F32Array | None = None
    if rec.vector is not None:
        arr = np.asarray(rec.vector, dtype=np.float32)
        if arr.shape != (dimension,):
            raise IndexVectorMismatch(
                f"{rec.uri}: vector has {arr.size} dimensions, the index {dimension}"
            )
        norm = float(np.linalg.norm(arr))
        if not math.isfinite(norm):
            raise ValueError(f"{rec.uri}: vector is not finite")
        # Stored normalised so a dot product is the cosine; a zero vector cannot rank.
        vec = (arr / np.float32(norm)).astype(np.float32) if norm > 0 else None
    terms, tfs, doclen = bm25.term_counts(rec.text or "", stemming)
    return Prepared(rec, vec, terms, tfs, doclen)


def as_row(rid: int, p: Prepared) -> Row:
    r = p.record
    return Row(
        rid=rid,
        account=r.account,
        uri=r.uri,
        level=int(r.level),
        section=int(r.section),
        context_type=r.context_type,
        parent=r.parent,
        ancestors=list(r.ancestors),
        tags=list(r.tags),
        memory_type=r.memory_type,
        owner=r.owner,
        peer=r.peer,
        created_at=float(r.created_at),
        updated_at=float(r.updated_at),
        vector=p.vector,
        terms=p.terms,
        tfs=p.tfs,
        doclen=p.doclen,
    )


def _sql_values(rid: int, p: Prepared) -> tuple[Any, ...]:
    r = p.record
    return (
        rid,
        r.account,
        r.uri,
        int(r.level),
        int(r.section),
        r.context_type,
        r.parent,
        json.dumps(list(r.ancestors)),
        r.text or "",
        r.abstract or "",
        None if p.vector is None else p.vector.tobytes(),
        r.line_start,
        r.line_end,
        json.dumps(list(r.tags)),
        r.memory_type,
        r.owner,
        r.peer,
        float(r.created_at),
        float(r.updated_at),
        " ".join(p.terms),
        p.tfs,
        p.doclen,
    )


def delete_rids(w: sqlite3.Connection, rids: list[int]) -> None:
    w.executemany("DELETE FROM records WHERE rid = ?", [(x,) for x in rids])


def insert(w: sqlite3.Connection, first_rid: int, upserts: Sequence[Prepared]) -> None:
    """Inserts `upserts` with consecutive rowids from `first_rid`."""
    w.executemany(
        f"INSERT INTO records(rid, {_COLS}, terms, tfs, doclen) VALUES ({', '.join('?' * 22)})",
        [_sql_values(first_rid + i, p) for i, p in enumerate(upserts)],
    )


# --------------------------------------------------------------------------------------------
# Reads.


def read_uri(conn: sqlite3.Connection, account: str, uri: str) -> list[IndexRecord]:
    """Every level and section of `uri`, vectors included."""
    rows = conn.execute(
        f"SELECT {_COLS} FROM records WHERE account = ? AND uri = ? ORDER BY level, section",
        (account, uri),
    ).fetchall()
    return [_record(r) for r in rows]


def read_head(conn: sqlite3.Connection, account: str, uri: str) -> IndexRecord | None:
    """The first record of `uri` by (level, section), without its vector."""
    row = conn.execute(
        f"SELECT {_HIT_COLS} FROM records WHERE account = ? AND uri = ? "
        "ORDER BY level, section LIMIT 1",
        (account, uri),
    ).fetchone()
    return None if row is None else _record(row)


def hydrate(conn: sqlite3.Connection, rids: list[int]) -> dict[int, IndexRecord]:
    """rid -> record (without its vector) for the rids still present."""
    if not rids:
        return {}
    return {
        int(r[0]): _record(r[1:])
        for r in conn.execute(
            f"SELECT rid, {_HIT_COLS} FROM records WHERE rid IN ({','.join('?' * len(rids))})", rids
        )
    }


@functools.lru_cache(maxsize=4096)
def _json_strings(raw: str) -> tuple[str, ...]:
    # Siblings share their ancestors and most records share a few tag sets: decode each once.
    return tuple(json.loads(raw))


def _record(r: Sequence[Any]) -> IndexRecord:
    blob = r[9]
    return IndexRecord(
        account=r[0],
        uri=r[1],
        level=int(r[2]),
        section=int(r[3]),
        context_type=r[4],
        parent=r[5],
        ancestors=list(_json_strings(r[6])),
        text=r[7],
        abstract=r[8],
        vector=None if blob is None else np.frombuffer(blob, dtype=np.float32).tolist(),
        line_start=r[10],
        line_end=r[11],
        tags=list(_json_strings(r[12])),
        memory_type=r[13],
        owner=r[14],
        peer=r[15],
        created_at=float(r[16]),
        updated_at=float(r[17]),
    )
