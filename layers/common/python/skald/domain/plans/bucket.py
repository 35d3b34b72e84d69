"""The request rate rule: a token bucket per account.

A bucket holds at most `burst` tokens and gains `rate_per_s` tokens a second; a request takes
one. An empty bucket refuses the request and tells how long until a token is back, which the
edge sends as `Retry-After` (whole seconds, at least one). The time is given, never read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# A refused request is told to come back after this long at most (a rate of 0 never refills).
MAX_RETRY_AFTER_S = 3600


def capacity(rate_per_s: float, burst: int | None) -> float:
    """The bucket's size: the plan's burst, or one second's worth of requests (at least one)
    when the plan sets a rate without a burst."""
    if burst is not None:
        return float(max(burst, 1))
    return float(max(1, math.ceil(rate_per_s)))


@dataclass
class TokenBucket:
    tokens: float
    at: float  # when `tokens` was last brought up to date

    @classmethod
    def full(cls, rate_per_s: float, burst: int | None, now: float) -> TokenBucket:
        return cls(capacity(rate_per_s, burst), now)

    def take(self, rate_per_s: float, burst: int | None, now: float) -> float:
        """Takes a token: 0.0 when there was one, else the seconds until there is (nothing is
        taken then)."""
        size = capacity(rate_per_s, burst)
        elapsed = max(0.0, now - self.at)
        self.tokens = min(size, self.tokens + elapsed * rate_per_s)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        if rate_per_s <= 0:
            return float(MAX_RETRY_AFTER_S)
        return (1.0 - self.tokens) / rate_per_s

    def idle_full(self, rate_per_s: float, burst: int | None, now: float) -> bool:
        """Whether the bucket would be full by now: forgetting it changes nothing."""
        size = capacity(rate_per_s, burst)
        return self.tokens + max(0.0, now - self.at) * rate_per_s >= size


def retry_after_s(wait_s: float) -> int:
    """The Retry-After value of a wait: whole seconds, rounded up, at least one."""
    return int(min(MAX_RETRY_AFTER_S, max(1, math.ceil(wait_s - 1e-9))))
