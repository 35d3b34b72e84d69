"""The columns snapshot: every in-memory column of a compact index but its vectors (rowids,
numbers, coded strings and their strings, ancestors and tags, BM25 postings), saved as arrays
beside the vector sidecar under the same generation key.

Opening a large index otherwise rebuilds these columns record by record in Python, most of a
large index's startup; from the snapshot it reads arrays. Rows are never
edited in place and rowids never reused, so a snapshot stays true for the rows it holds: at open
the ones SQLite no longer has become tombstones and the rows added since are read from SQLite
(load.py). `identity` names what else the columns depend on (the database file's instance,
the tokenizer, the vector dimension); a snapshot written under another identity is ignored.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from skald.adapters.local.durable import fsync_file
from skald.adapters.local.index import bm25
from skald.adapters.local.index.columns import Columns, Interner, MultiValues

log = logging.getLogger(__name__)

FORMAT = "1"
_NUMBERS = ("rid", "level", "section", "created", "updated", "doclen")


def path_of(folder: Path, key: str) -> Path:
    return folder / f"{key}.columns.npz"


def save(path: Path, cols: Columns, identity: dict[str, str]) -> bool:
    """Writes the columns of `cols` (no tombstones, BM25 postings merged) atomically; False,
    with a warning, when the folder cannot take it (the snapshot is an optimisation)."""
    if cols.dead or cols.lex.d_n:
        raise ValueError("only a compacted, merged index is snapshotted")
    n = cols.n
    arrays = {name: getattr(cols, name)[:n] for name in _NUMBERS}
    arrays.update({f"code_{f}": codes[:n] for f, codes in cols.codes.items()})
    strings: dict[str, object] = {f"str_{f}": s.values for f, s in cols.strs.items()}
    for f, mv in cols.multi.items():
        arrays[f"multi_{f}_code"] = mv.code[: mv.n]
        arrays[f"multi_{f}_row"] = mv.row[: mv.n]
        strings[f"multi_{f}"] = mv.strs.values
    lex = cols.lex
    arrays.update(lex_off=lex.b_off, lex_row=lex.b_row, lex_tf=lex.b_tf)
    strings["terms"] = sorted(lex.terms, key=lex.terms.__getitem__)  # by term id
    arrays["strings"] = _bytes(strings)
    arrays["identity"] = _bytes({**identity, "format": FORMAT})
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}.npz")
    try:
        np.savez(tmp, **arrays)  # no object arrays: nothing is pickled
        fsync_file(tmp)  # on the disk before its generation is marked complete
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        log.warning("columns snapshot not written (%s): the next open rebuilds them", exc)
        return False
    return True


def load(
    path: Path, identity: dict[str, str], dimension: int, exact_rows: int, capacity: int
) -> Columns | None:
    """The snapshot's columns with room for `capacity` rows, vectors not set (every row
    marked without one), or None when it is absent, unreadable or of another identity."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if not _written_under(z, identity):
                return None
            strings = json.loads(z["strings"].tobytes())
            n = int(z["rid"].size)
            cols = Columns(dimension, capacity=max(capacity, n), exact_rows=exact_rows)
            for name in _NUMBERS:
                getattr(cols, name)[:n] = z[name]
            for f in cols.strs:
                cols.strs[f] = _interner(strings[f"str_{f}"])
                cols.codes[f][:n] = z[f"code_{f}"]
            for f in cols.multi:
                cols.multi[f] = _multi(
                    strings[f"multi_{f}"], z[f"multi_{f}_code"], z[f"multi_{f}_row"]
                )
            cols.lex = _postings(strings["terms"], z["lex_off"], z["lex_row"], z["lex_tf"])
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        log.warning("columns snapshot %s unreadable, rebuilding: %s", path.name, exc)
        return None
    cols.alive[:n] = True
    cols.n = n
    acct, uri = cols.codes["account"][:n].tolist(), cols.codes["uri"][:n].tolist()
    keys = zip(acct, uri, cols.level[:n].tolist(), cols.section[:n].tolist(), strict=True)
    cols.key_to_row = dict(zip(keys, range(n), strict=True))
    return cols


def matches(path: Path, identity: dict[str, str]) -> bool:
    """Whether the snapshot at `path` was written under `identity` (its generation's vectors
    belong to this database)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return _written_under(z, identity)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return False


def _written_under(z: Any, identity: dict[str, str]) -> bool:
    return bool(json.loads(z["identity"].tobytes()) == {**identity, "format": FORMAT})


def _bytes(value: object) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)


def _interner(values: list[str | None]) -> Interner:
    if not values or values[0] is not None:
        raise ValueError("an interned column must start with its absent value")
    out = Interner()
    out.values = values
    out.codes = dict(zip(values, range(len(values)), strict=True))
    return out


def _multi(values: list[str | None], code: np.ndarray, row: np.ndarray) -> MultiValues:
    out = MultiValues()
    out.strs = _interner(values)
    m = int(code.size)
    cap = max(1024, int(m * 1.25))
    out.code = np.zeros(cap, dtype=np.int32)
    out.row = np.zeros(cap, dtype=np.int32)
    out.code[:m], out.row[:m], out.n = code, row, m
    return out


def _postings(terms: list[str], off: np.ndarray, row: np.ndarray, tf: np.ndarray) -> bm25.Postings:
    if off.size != len(terms) + 1:
        raise ValueError("BM25 offsets do not match the term list")
    out = bm25.Postings()
    out.terms = dict(zip(terms, range(len(terms)), strict=True))
    out.n_base_terms = len(terms)
    out.b_off, out.b_row, out.b_tf = off, row, tf
    return out
