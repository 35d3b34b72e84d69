"""The request rate limit of `skald serve`: a token bucket per account, in this process.

Every authenticated request of an account takes a token from its bucket (the rule:
domain/plans/bucket.py); an empty bucket refuses the request with RESOURCE_EXHAUSTED (429)
and a `Retry-After`. The plan comes from the PlanBook's cache, so a request costs no store
call while it is fresh. The root key and dev mode are never limited. On AWS the edge (API
Gateway usage plans) limits instead, so a Lambda only does it when configured to.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from skald.domain.access.identity import ROOT_ACCOUNT, Identity
from skald.domain.errors import ResourceExhausted
from skald.domain.plans import Plan, TokenBucket, retry_after_s
from skald.domain.plans.bucket import capacity
from skald.services.plans.book import PlanBook

# Buckets kept before the idle ones (full again: forgetting them changes nothing) are dropped.
MAX_BUCKETS = 10_000


class RateLimits:
    def __init__(
        self,
        plans: PlanBook,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_buckets: int = MAX_BUCKETS,
    ) -> None:
        self.plans = plans
        self.clock = clock
        self.max_buckets = max_buckets
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    @staticmethod
    def exempt(identity: Identity) -> bool:
        return identity.dev_mode or identity.account_id == ROOT_ACCOUNT

    def fresh(self, identity: Identity) -> bool:
        """True when `admit` needs no I/O (the plan is cached, or the caller is exempt)."""
        return self.exempt(identity) or self.plans.cached(identity.account_id) is not None

    def admit(self, identity: Identity) -> None:
        """Takes one of the account's tokens; ResourceExhausted (429) when none is left."""
        if self.exempt(identity):
            return
        plan = self.plans.cached(identity.account_id) or self.plans.for_account(identity.account_id)
        if plan.rate_per_s is None:
            return
        self.take(identity.account_id, plan)

    def take(self, account_id: str, plan: Plan) -> None:
        rate = plan.rate_per_s
        assert rate is not None
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(account_id)
            if bucket is None:
                if len(self._buckets) >= self.max_buckets:
                    self._forget_idle(now, rate, plan.burst)
                bucket = self._buckets[account_id] = TokenBucket.full(rate, plan.burst, now)
            wait = bucket.take(rate, plan.burst, now)
        if wait > 0:
            after = retry_after_s(wait)
            raise ResourceExhausted(
                f"Too many requests for account {account_id}: its plan allows {rate:g} per "
                f"second (bursts of {bucket_size(plan)}); retry in {after} s",
                {
                    "limit": "rate_per_s",
                    "value": rate,
                    "burst": bucket_size(plan),
                    "retry_after_s": after,
                },
                retry_after_s=after,
            )

    def _forget_idle(self, now: float, rate: float, burst: int | None) -> None:
        # Other accounts' plans may differ: a bucket counts as idle when it would be full at
        # this rate, and all go when none is (a burst from many new accounts at once).
        idle = [a for a, b in self._buckets.items() if b.idle_full(rate, burst, now)]
        for account_id in idle or list(self._buckets):
            del self._buckets[account_id]

    def forget(self, account_id: str) -> None:
        """Drops the account's bucket (its plan changed: the next request starts full)."""
        with self._lock:
            self._buckets.pop(account_id, None)


def bucket_size(plan: Plan) -> int:
    return int(capacity(plan.rate_per_s or 0.0, plan.burst))
