"""Which queued jobs may still run: none for an account or user being deleted or gone.

A job names its account and user, and, when it came from a request made with a user's key, the
user's generation: a job queued for a removed user must not run for a new user registered
under the same id, nor at all once the user is gone. A job without a generation (dev mode,
whose tenants have no rows; a sweep over stored sessions) is stopped by tombstones only.

Answers are kept `ttl_s` per (account, user) and process, so a batch of jobs of one tenant
costs one lookup; a tombstone stops that tenant's jobs within `ttl_s`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from skald.ports import AccountStore
from skald.ports.accounts import ACTIVE


class JobGate:
    def __init__(
        self,
        state: Callable[[], AccountStore],
        *,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._state = state
        self.ttl_s = ttl_s
        self.clock = clock
        self._seen: dict[tuple[str, str | None, str | None], tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def refusal(self, payload: dict[str, Any]) -> str | None:
        """Why the job of `payload` must not run, or None."""
        account = payload.get("account")
        if not isinstance(account, str) or not account:
            return None  # a control-plane job (a sweep over every account)
        user = payload.get("user")
        user = user if isinstance(user, str) and user else None
        generation = payload.get("generation")
        generation = generation if isinstance(generation, str) else None
        key = (account, user, generation)
        now = self.clock()
        with self._lock:
            hit = self._seen.get(key)
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
        verdict = self._verdict(account, user, generation)
        with self._lock:
            if len(self._seen) > 10_000:
                self._seen.clear()
            self._seen[key] = (now, verdict)
        return verdict

    def _verdict(self, account: str, user: str | None, generation: str | None) -> str | None:
        state = self._state()
        acct = state.get_account(account)
        if acct is None:
            return f"account {account} does not exist" if generation is not None else None
        if acct.status != ACTIVE:
            return f"account {account} is being deleted"
        if user is None:
            return None
        row = state.get_user(account, user)
        if row is None:
            return f"user {user} does not exist in {account}" if generation is not None else None
        if row.status != ACTIVE:
            return f"user {user} of {account} is being deleted"
        if generation is not None and row.generation is not None and generation != row.generation:
            return f"the job belongs to a removed user {user} of {account}"
        return None
