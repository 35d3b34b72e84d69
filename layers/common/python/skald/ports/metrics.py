"""Port of the operational metrics (re-exported by skald.ports): request counts and latency by
route template, background job outcomes and queue depth.

Locally they are Prometheus series served at `/metrics`; on AWS they are CloudWatch metrics
written as embedded metric format (EMF) log lines. Either way the process keeps its own
totals per route, which the observer reports (retrieval and filesystem activity).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from skald.domain.ops.route_stats import RouteTotals


@runtime_checkable
class Metrics(Protocol):
    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        """One answered HTTP request; `route` is the route template (`/api/v1/fs/ls`,
        `/api/v1/sessions/{session_id}`), never the raw path."""
        ...

    def job(self, queue: str, kind: str, outcome: str, seconds: float) -> None:
        """One background job run; `outcome` is "ok" or "error"."""
        ...

    def queue_depth(self, queue: str, pending: int, in_flight: int) -> None: ...

    def retrieval(self, hits: int) -> None:
        """One answered find, search or recall, and how many results it returned."""
        ...

    def zero_result_queries(self) -> int:
        """This process's retrieval queries that returned nothing."""
        ...

    def totals(self) -> dict[str, RouteTotals]:
        """This process's requests per route template since it started."""
        ...

    def exposition(self) -> tuple[bytes, str] | None:
        """The metrics as a scrape body and its content type; None where they are pushed
        elsewhere instead (EMF on AWS)."""
        ...
