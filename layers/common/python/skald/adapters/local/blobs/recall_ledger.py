"""RecallLedger over a BlobStore: one JSON document per session, next to its other files.

Key: `{account}/user/{user}/sessions/{sid}/.recall_log.json` (the hidden
`{session_uri}/.recall_log.json`), so deleting the session directory deletes its ledger too.
Document: `{"version": 1, "last_turn": N, "turns": [{"turn": n, "at": epoch, "uris": [...]}]}`,
oldest turn first. Writes are compare-and-swap on the blob's etag (create-only for the first
turn) and retried, so concurrent requests of one session each get their own turn number.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from typing import Any

from skald.ports import (
    RECALL_LEDGER_MAX_TURNS,
    BlobNotFound,
    BlobPreconditionFailed,
    BlobStore,
)

LEDGER_NAME = ".recall_log.json"
MAX_ATTEMPTS = 12


class RecallLedgerConflict(RuntimeError):
    """Every compare-and-swap attempt lost against concurrent writers."""


class BlobRecallLedger:
    def __init__(self, blobs: BlobStore, *, max_turns: int = RECALL_LEDGER_MAX_TURNS) -> None:
        self.blobs = blobs
        self.max_turns = max_turns

    @staticmethod
    def key(account: str, user: str, session_id: str) -> str:
        return f"{account}/user/{user}/sessions/{session_id}/{LEDGER_NAME}"

    def _load(self, key: str) -> tuple[dict[str, Any], str | None]:
        """The document and the etag it was read at (None when there is none yet)."""
        info = self.blobs.head(key)
        if info is None:
            return {"version": 1, "last_turn": 0, "turns": []}, None
        try:
            raw = self.blobs.get(key)
        except BlobNotFound:  # removed between head and get: start over like a new ledger
            return {"version": 1, "last_turn": 0, "turns": []}, None
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("turns"), list):
            # A damaged ledger only costs the cooling history, never the request.
            doc = {"version": 1, "last_turn": 0, "turns": []}
        # The etag read by head() may be older than the content read by get(); the CAS on it
        # then fails and the caller retries, which is what makes this safe.
        return doc, info.etag

    def recent(self, account: str, user: str, session_id: str, turns: int) -> list[set[str]]:
        if turns <= 0:
            return []
        doc, _ = self._load(self.key(account, user, session_id))
        out: list[set[str]] = []
        for item in reversed(doc["turns"][-turns:]):
            uris = item.get("uris") if isinstance(item, dict) else None
            out.append({u for u in uris if isinstance(u, str)} if isinstance(uris, list) else set())
        return out

    def record(
        self, account: str, user: str, session_id: str, uris: Sequence[str], now: float
    ) -> int:
        key = self.key(account, user, session_id)
        unique = list(dict.fromkeys(uris))
        for attempt in range(MAX_ATTEMPTS):
            doc, etag = self._load(key)
            last = doc.get("last_turn")
            if not isinstance(last, int):
                last = max(
                    (t.get("turn", 0) for t in doc["turns"] if isinstance(t, dict)), default=0
                )
            turn = last + 1
            turns = [*doc["turns"], {"turn": turn, "at": now, "uris": unique}]
            new = {"version": 1, "last_turn": turn, "turns": turns[-self.max_turns :]}
            data = json.dumps(new, separators=(",", ":")).encode("utf-8")
            try:
                if etag is None:
                    self.blobs.put(key, data, if_none_match=True)
                else:
                    self.blobs.put(key, data, if_match=etag)
                return turn
            except BlobPreconditionFailed:
                # Someone else recorded a turn meanwhile; jittered backoff spreads the retries.
                time.sleep(min(0.2, 0.005 * 2**attempt) * random.random())
        raise RecallLedgerConflict(f"could not record a turn in {key}")
