"""An account's effective plan, from its settings, cached for a short bound.

The plan lives in the account's settings (`{"plan": tier, "limits": {...}}`, domain/plans), so
reading it is one read of the account; a warm process keeps what it read for `ttl_s`, which
bounds how long a changed plan takes to apply everywhere (as the key cache bounds a
revocation). The root key, dev mode and accounts that no longer exist have no plan to limit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar

from skald.domain.access.identity import ROOT_ACCOUNT
from skald.domain.errors import InvalidArgument
from skald.domain.plans import UNLIMITED, Plan, resolve
from skald.ports import AccountStore

_log = logging.getLogger(__name__)


# The store reads plans and quota counts made in the current request (None outside requests):
# a request refreshes at most one stale cache, and serves the others as they were a little
# longer (services/plans/quotas.py), so checking costs a request at most one store call.
_request_reads: ContextVar[list[int] | None] = ContextVar("plan_store_reads", default=None)


def begin_request() -> None:
    """Called where a request's identity is known, before any check of it."""
    _request_reads.set([0])


def note_store_read() -> None:
    reads = _request_reads.get()
    if reads is not None:
        reads[0] += 1


def store_read_in_request() -> bool:
    reads = _request_reads.get()
    return reads is not None and reads[0] > 0


class PlanBook:
    def __init__(
        self,
        accounts: AccountStore | None,
        *,
        default_tier: str = "unlimited",
        ttl_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.accounts = accounts
        self.default_tier = default_tier
        self.ttl_s = ttl_s
        self.clock = clock
        self._cache: dict[str, tuple[float, Plan]] = {}
        self._lock = threading.Lock()

    def for_account(self, account_id: str) -> Plan:
        if account_id == ROOT_ACCOUNT:
            return UNLIMITED
        now = self.clock()
        with self._lock:
            cached = self._cache.get(account_id)
            if cached is not None and now - cached[0] < self.ttl_s:
                return cached[1]
        plan = self._read(account_id)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[account_id] = (now, plan)
        return plan

    def cached(self, account_id: str) -> Plan | None:
        """The plan while what was read is fresh, without any I/O; None when `for_account`
        would have to read the account (an async caller then reads it off its loop)."""
        if account_id == ROOT_ACCOUNT:
            return UNLIMITED
        with self._lock:
            cached = self._cache.get(account_id)
        if cached is not None and self.clock() - cached[0] < self.ttl_s:
            return cached[1]
        return None

    def _read(self, account_id: str) -> Plan:
        if self.accounts is None:
            return resolve({}, self.default_tier)
        note_store_read()
        account = self.accounts.get_account(account_id)
        settings = account.settings if account is not None else {}
        try:
            return resolve(settings, self.default_tier)
        except InvalidArgument as e:
            # A stored plan that no longer resolves (a tier the operator removed since): the
            # account keeps working on the default tier rather than failing every request.
            _log.warning("account %s: plan settings ignored (%s)", account_id, e.message)
            return resolve({}, self.default_tier)

    def invalidate(self, account_id: str | None = None) -> None:
        """Forgets what was read (one account, or all): the next request reads it again."""
        with self._lock:
            if account_id is None:
                self._cache.clear()
            else:
                self._cache.pop(account_id, None)
