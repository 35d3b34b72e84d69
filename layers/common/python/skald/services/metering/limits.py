"""UsageLimits: the plan limits that read the meters, `storage_bytes` and
`llm_tokens_per_day`, checked before the write or the model call.

An account's running totals are read from the ledger at most once per `ttl_s` (one store
call: the bytes stored and today's tokens together), and what this process recorded since and
has not flushed is added to them, so a process sees its own use at once and other processes'
within the bound. No read at all when the plan leaves both limits unlimited (the default)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from skald.domain.errors import QuotaExceeded
from skald.domain.metering.cells import UsageTotals
from skald.domain.metering.units import day_of, next_day_start
from skald.ports import UsageLedger
from skald.services.metering.buffer import UsageBuffer
from skald.services.plans import PlanBook
from skald.services.plans.book import note_store_read, store_read_in_request


class UsageLimits:
    def __init__(
        self,
        plans: PlanBook,
        ledger: Callable[[], UsageLedger | None],
        buffer: UsageBuffer,
        *,
        ttl_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.plans = plans
        self._ledger = ledger
        self.buffer = buffer
        self.ttl_s = ttl_s
        self.clock = clock
        # account -> (read at, its day, the ledger's totals plus what was unflushed then,
        # what this process had recorded then)
        self._cache: dict[str, tuple[float, str, UsageTotals, UsageTotals]] = {}
        self._lock = threading.Lock()
        self._stale_served: set[str] = set()  # accounts whose stale totals served once

    def current(self, account_id: str) -> UsageTotals:
        """The account's totals: the ledger's as read (cached), what was unflushed then, and
        what this process recorded since."""
        now = self.clock()
        day = day_of(now)
        with self._lock:
            cached = self._cache.get(account_id)
        # A request makes at most one store call for its plan and counts: one that has read
        # already uses a stale total once more (services/plans/book.py), and only once, so
        # requests spaced wider than both caches' bounds still see other processes' use.
        stale = cached is not None and now - cached[0] >= self.ttl_s
        once_more = stale and store_read_in_request() and account_id not in self._stale_served
        if once_more:
            self._stale_served.add(account_id)
        if cached is None or cached[1] != day or (stale and not once_more):
            self._stale_served.discard(account_id)
            note_store_read()
            ledger = self._ledger()
            base = self.buffer.unflushed(account_id)
            recorded = self.buffer.recorded(account_id)
            if ledger is not None:
                base.add(ledger.totals(account_id, day))
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                cached = (now, day, base, recorded)
                self._cache[account_id] = cached
        _, _, base, recorded_then = cached
        total = base.copy()
        total.add(self.buffer.recorded(account_id))
        total.add(recorded_then, sign=-1)
        return total

    def invalidate(self, account_id: str | None = None) -> None:
        with self._lock:
            if account_id is None:
                self._cache.clear()
            else:
                self._cache.pop(account_id, None)

    def check_storage(self, account_id: str, adding: int) -> None:
        """QuotaExceeded when `adding` more bytes would pass the plan's storage_bytes."""
        limit = self.plans.for_account(account_id).storage_bytes
        if limit is None or adding <= 0:
            return
        current = self.current(account_id).stored_bytes
        if current + adding > limit:
            raise QuotaExceeded("storage_bytes", limit, current, requested=adding)

    def check_llm(self, account_id: str) -> None:
        """QuotaExceeded (with `resets_at`) once the account's LLM tokens of the UTC day reach
        the plan's llm_tokens_per_day."""
        limit = self.plans.for_account(account_id).llm_tokens_per_day
        if limit is None:
            return
        now = self.clock()
        used = self.current(account_id).tokens_on(day_of(now))
        if used >= limit:
            resets = datetime.fromtimestamp(next_day_start(now), UTC)
            raise QuotaExceeded(
                "llm_tokens_per_day",
                limit,
                used,
                extra={"resets_at": resets.strftime("%Y-%m-%dT%H:%M:%SZ")},
            )
