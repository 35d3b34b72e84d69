"""The root API key: given once (`skald serve`), or read from a secret and read again when a
root request comes after `ttl_s`, so a rotated root key takes over within that bound on every
warm instance.

Only requests that might be root ever wait for the secret: a key matching the cached root
key (is it still the root key?) and a key that matched neither the root key nor any user key
(is it a new root key?). Requests with a user key never read it.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time
from collections.abc import Callable


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class RootKey:
    def __init__(
        self,
        fetch: Callable[[], str],
        *,
        ttl_s: float = math.inf,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._hash: str | None = None
        self._read_at = 0.0

    @classmethod
    def fixed(cls, key: str) -> RootKey:
        return cls(lambda: key)

    def _current(self, *, fresh: bool) -> str:
        with self._lock:
            stale = self._hash is None or self.clock() - self._read_at >= self.ttl_s
            if self._hash is None or (fresh and stale):
                self._hash = _digest(self._fetch())
                self._read_at = self.clock()
            return self._hash

    def matches(self, key: str) -> bool:
        """Whether `key` is the root key, as of at most `ttl_s` ago."""
        digest = _digest(key)
        if hmac.compare_digest(digest, self._current(fresh=False)):
            return hmac.compare_digest(digest, self._current(fresh=True))
        return False

    def matches_after_refresh(self, key: str) -> bool:
        """For a key nobody else claimed: whether it is a root key set since the last read."""
        return hmac.compare_digest(_digest(key), self._current(fresh=True))
