"""Request metrics for every route (count, latency, status by route template) and the
Prometheus scrape endpoint `/metrics` of `skald serve`."""

from __future__ import annotations

import time

from fastapi import FastAPI, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skald import catalog
from skald.api.deps import AnyIdentity, ContainerDep
from skald.domain.errors import PermissionDenied
from skald.ports import Metrics

UNMATCHED = "unmatched"  # no route: one series for every unknown path, not one per path


class RequestMetrics:
    """Plain ASGI (not an http middleware): it sits on every request's path."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            # The router leaves the matched route in the scope: its template, never the path.
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            self.metrics.request(scope["method"], route, status, time.perf_counter() - started)


def scrape(identity: AnyIdentity, c: ContainerDep) -> Response:
    """Prometheus text format; the root key (or dev mode) only: the series span accounts."""
    if not identity.privileged:
        raise PermissionDenied("Metrics are for the root key")
    for q in catalog.QUEUES:  # depth as of the scrape
        stats = c.queue.stats(q.name)
        c.metrics.queue_depth(q.wire_label, stats.pending, stats.inflight)
    exposition = c.metrics.exposition()
    if exposition is None:  # pragma: no cover - only mounted where metrics are scraped
        raise PermissionDenied("Metrics are published elsewhere by this server")
    body, content_type = exposition
    return Response(body + usage_exposition(c.meter.stats()), media_type=content_type)


def usage_exposition(stats: dict[str, int]) -> bytes:
    """The metering buffer's own health, as Prometheus text: what was dropped (must stay 0),
    what waits to be flushed, flushes that failed (their cells wait for the next)."""
    lines = []
    for name, kind, help_ in (
        ("dropped", "counter", "usage records dropped: the buffer was full"),
        ("pending_cells", "gauge", "hourly usage cells waiting to be flushed"),
        ("flushes", "counter", "flushes of the usage buffer to the ledger"),
        ("flush_failures", "counter", "flushes the ledger refused (their cells kept)"),
    ):
        metric = f"skald_usage_{name}" + ("_total" if kind == "counter" else "")
        lines += [f"# HELP {metric} {help_}", f"# TYPE {metric} {kind}", f"{metric} {stats[name]}"]
    return ("\n".join(lines) + "\n").encode()


def install_metrics(app: FastAPI, metrics: Metrics) -> None:
    app.add_middleware(RequestMetrics, metrics=metrics)
    if metrics.exposition() is not None:
        app.add_api_route("/metrics", scrape, methods=["GET"], include_in_schema=False)
