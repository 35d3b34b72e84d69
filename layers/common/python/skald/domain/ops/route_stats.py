"""Per-route request totals kept in process: what the observer reports about retrieval and
filesystem activity, whichever metrics backend also receives the numbers."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace

RETRIEVAL_PREFIX = "/api/v1/search/"
FILESYSTEM_PREFIXES = ("/api/v1/fs", "/api/v1/content/", "/api/v1/resources")


@dataclass(frozen=True)
class RouteTotals:
    requests: int = 0
    errors: int = 0  # answered 5xx: the server failed, not the caller
    rejected: int = 0  # answered 4xx
    seconds: float = 0.0

    def add(self, status: int, seconds: float) -> RouteTotals:
        return RouteTotals(
            self.requests + 1,
            self.errors + (status >= 500),
            self.rejected + (400 <= status < 500),
            self.seconds + seconds,
        )

    @property
    def mean_ms(self) -> float:
        return 1000.0 * self.seconds / self.requests if self.requests else 0.0


def merged(items: Iterable[RouteTotals]) -> RouteTotals:
    out = RouteTotals()
    for t in items:
        out = replace(
            out,
            requests=out.requests + t.requests,
            errors=out.errors + t.errors,
            rejected=out.rejected + t.rejected,
            seconds=out.seconds + t.seconds,
        )
    return out


def under(totals: dict[str, RouteTotals], *prefixes: str) -> RouteTotals:
    """The totals of every route template starting with one of `prefixes`."""
    return merged(t for route, t in totals.items() if route.startswith(prefixes))


class RouteTally:
    """Thread-safe running totals per (method-less) route template."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, RouteTotals] = {}
        self.zero_results = 0  # retrieval queries answered without a single result

    def add(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self._totals[route] = self._totals.get(route, RouteTotals()).add(status, seconds)

    def retrieval(self, hits: int) -> None:
        if not hits:
            with self._lock:
                self.zero_results += 1

    def snapshot(self) -> dict[str, RouteTotals]:
        with self._lock:
            return dict(self._totals)
