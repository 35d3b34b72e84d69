"""Recall ledger: which URIs context assembly returned in each recent turn of a session, so the
next turns can leave them out (`dedup_turns`). Locally a JSON blob in the session directory;
on AWS a DynamoDB item."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

RECALL_LEDGER_MAX_TURNS = 100  # history kept per session; older turns are forgotten


@runtime_checkable
class RecallLedger(Protocol):
    def recent(self, account: str, user: str, session_id: str, turns: int) -> list[set[str]]:
        """The URIs of each of the last `turns` recorded turns, newest first (fewer when the
        session has fewer; empty for an unknown session)."""
        ...

    def record(
        self, account: str, user: str, session_id: str, uris: Sequence[str], now: float
    ) -> int:
        """Appends one turn with `uris` (possibly none) and returns its number: 1 for the
        first turn of the session, then strictly increasing, also under concurrent writers.
        Only the newest RECALL_LEDGER_MAX_TURNS turns are kept."""
        ...
