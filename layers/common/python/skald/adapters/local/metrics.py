"""Prometheus metrics of `skald serve`, scraped at `/metrics`.

A registry of its own (not the process-global default one), so two servers in one process
(tests) never share series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from skald.domain.ops.route_stats import RouteTally, RouteTotals

# Seconds: from a cached lookup to a commit that waits on the disk.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class PrometheusMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "skald_http_requests",
            "HTTP requests answered",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self._latency = Histogram(
            "skald_http_request_duration_seconds",
            "Time to answer an HTTP request",
            ("method", "route"),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self._jobs = Counter(
            "skald_jobs",
            "Background jobs run, by outcome",
            ("queue", "kind", "outcome"),
            registry=self.registry,
        )
        self._job_latency = Histogram(
            "skald_job_duration_seconds",
            "Time to run a job",
            ("queue", "kind"),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self._depth = Gauge(
            "skald_queue_depth",
            "Jobs waiting or running, per queue",
            ("queue", "state"),
            registry=self.registry,
        )
        self._retrievals = Counter(
            "skald_retrieval_queries",
            "Retrieval queries answered",
            ("result",),
            registry=self.registry,
        )
        self._tally = RouteTally()

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        self._requests.labels(method, route, str(status)).inc()
        self._latency.labels(method, route).observe(seconds)
        self._tally.add(route, status, seconds)

    def job(self, queue: str, kind: str, outcome: str, seconds: float) -> None:
        self._jobs.labels(queue, kind, outcome).inc()
        self._job_latency.labels(queue, kind).observe(seconds)

    def queue_depth(self, queue: str, pending: int, in_flight: int) -> None:
        self._depth.labels(queue, "pending").set(pending)
        self._depth.labels(queue, "in_flight").set(in_flight)

    def retrieval(self, hits: int) -> None:
        self._tally.retrieval(hits)
        self._retrievals.labels("hits" if hits else "empty").inc()

    def zero_result_queries(self) -> int:
        return self._tally.zero_results

    def totals(self) -> dict[str, RouteTotals]:
        return self._tally.snapshot()

    def exposition(self) -> tuple[bytes, str] | None:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
