"""Quota checks: the limits of an account's plan that count what it keeps, checked by the
services before the first write of a request (nothing is half written when one refuses).

- `sessions`: sessions kept, counted by the session store;
- `watches` and `watch_min_interval_s`: the watch service counts (it lists them anyway);
- `index_records`: the search index's records, counted by the index (on AWS an OpenSearch
  call). A request asks for the files it would add where known, else one.

A limit of None (the `unlimited` plan, the default) costs a cached plan lookup and nothing
else: no count is read. A count is read at most once per `ttl_s` per account and kept in this
process; the process's own creations and removals adjust it, so sequential requests see their
own effect at once. A request makes at most one store call for its plan and counts: a stale
count met after that call (the plan was read again) is used once more and read by a later
request; a count never read is read whatever it costs. Requests running at the same time may
pass together: a limit can be overshot by what they add, never by more. Other processes see a
change within `ttl_s`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from skald.domain.errors import QuotaExceeded
from skald.ports import SearchIndex, SessionStore
from skald.services.plans.book import PlanBook, note_store_read, store_read_in_request

MAX_ACCOUNTS = 10_000  # cached counts kept before the table starts over


class CachedCount:
    """One count per account, read again after `ttl_s`, adjusted by what this process did."""

    def __init__(
        self, read: Callable[[str], int], ttl_s: float, clock: Callable[[], float]
    ) -> None:
        self.read = read
        self.ttl_s = ttl_s
        self.clock = clock
        self._counts: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def current(self, account_id: str) -> int:
        now = self.clock()
        with self._lock:
            cached = self._counts.get(account_id)
        if cached is not None and (now - cached[0] < self.ttl_s or store_read_in_request()):
            # fresh; or stale while this request already made its one store call: read by
            # the next request
            return cached[1]
        note_store_read()
        value = self.read(account_id)
        with self._lock:
            if len(self._counts) >= MAX_ACCOUNTS:
                self._counts.clear()
            self._counts[account_id] = (now, value)
        return value

    def adjust(self, account_id: str, delta: int) -> None:
        """What this process added (or removed); a count not cached is read when needed."""
        with self._lock:
            cached = self._counts.get(account_id)
            if cached is not None:
                self._counts[account_id] = (cached[0], max(0, cached[1] + delta))

    def forget(self, account_id: str | None = None) -> None:
        with self._lock:
            if account_id is None:
                self._counts.clear()
            else:
                self._counts.pop(account_id, None)


class Quotas:
    def __init__(
        self,
        plans: PlanBook,
        *,
        sessions: SessionStore | None = None,
        index: SearchIndex | None = None,
        ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`sessions`, `index`: the stores that count; an entry point without one does not
        check the limit it counts (it cannot make what it limits either)."""
        self.plans = plans
        # Looked up at the first count, not now: a store is built on its first call.
        self.sessions = CachedCount(
            (lambda a: sessions.count_sessions(a)) if sessions is not None else _uncounted,
            ttl_s,
            clock,
        )
        self.index_records = CachedCount(
            (lambda a: index.count(a)) if index is not None else _uncounted, ttl_s, clock
        )
        self._counts_sessions = sessions is not None
        self._counts_records = index is not None

    # ---------------------------------------------------------------- sessions

    def check_sessions(self, account_id: str, requested: int = 1) -> None:
        value = self.plans.for_account(account_id).sessions
        if value is None or not self._counts_sessions:
            return
        _check("sessions", value, self.sessions.current(account_id), requested)

    def sessions_changed(self, account_id: str, delta: int) -> None:
        self.sessions.adjust(account_id, delta)

    # ---------------------------------------------------------------- watches

    def check_watches(
        self, account_id: str, current: Callable[[], int], requested: int = 1
    ) -> None:
        """`current`: the account's watches, counted by the caller only when limited."""
        value = self.plans.for_account(account_id).watches
        if value is not None:
            _check("watches", value, current(), requested)

    def check_watch_interval(self, account_id: str, interval_min: float) -> None:
        """A watch may not be refreshed more often than the plan's shortest interval."""
        shortest = self.plans.for_account(account_id).watch_min_interval_s
        asked = interval_min * 60
        if shortest is not None and asked < shortest:
            raise QuotaExceeded(
                "watch_min_interval_s",
                shortest,
                asked,
                message=f"The account's plan refreshes a watch every {shortest:g} s at most "
                f"often; this watch asks for every {asked:g} s",
                extra={"watch_interval": interval_min},
            )

    # ---------------------------------------------------------------- index records

    def check_index_records(self, account_id: str, requested: int | Callable[[], int]) -> int:
        """`requested`: the records the write would add, or how to count them (called only
        when the account is limited); a write that adds none is not checked. Returns what
        was counted (0 when unlimited), for `index_records_added` once the write is done."""
        value = self.plans.for_account(account_id).index_records
        if value is None or not self._counts_records:
            return 0
        wanted = requested() if callable(requested) else requested
        if wanted > 0:
            _check("index_records", value, self.index_records.current(account_id), wanted)
        return wanted

    def index_records_added(self, account_id: str, added: int) -> None:
        self.index_records.adjust(account_id, added)

    def forget(self, account_id: str) -> None:
        """Counts read again on the next check (the account's plan changed)."""
        self.sessions.forget(account_id)
        self.index_records.forget(account_id)


def _uncounted(_: str) -> int:
    return 0


def _check(limit: str, value: float | int, current: int, requested: int) -> None:
    if current + requested > value:
        raise QuotaExceeded(limit, value, current, requested=requested)
