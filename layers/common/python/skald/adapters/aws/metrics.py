"""CloudWatch metrics of the HTTP functions through Powertools (embedded metric format):
one EMF log line per request (two when it fails), with the route template and method as
dimensions. Nothing is scraped: CloudWatch reads the lines from the function's log group.
"""

from __future__ import annotations

import os

from aws_lambda_powertools.metrics import MetricUnit, single_metric

from skald.domain.ops.route_stats import RouteTally, RouteTotals


class EmfMetrics:
    def __init__(self, namespace: str | None = None) -> None:
        self.namespace = namespace or os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Skald")
        self._tally = RouteTally()

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        self._tally.add(route, status, seconds)
        with single_metric(
            name="RequestLatency",
            unit=MetricUnit.Milliseconds,
            value=seconds * 1000.0,
            namespace=self.namespace,
        ) as metric:
            metric.add_dimension(name="route", value=route)
            metric.add_dimension(name="method", value=method)
        # The request count is the latency metric's SampleCount; failures get their own.
        if status >= 500:
            with single_metric(
                name="ServerErrors", unit=MetricUnit.Count, value=1, namespace=self.namespace
            ) as metric:
                metric.add_dimension(name="route", value=route)

    def job(self, queue: str, kind: str, outcome: str, seconds: float) -> None:
        # The worker Lambdas publish their job metrics themselves (skald.jobs.lambda_workers).
        with single_metric(
            name="JobDuration",
            unit=MetricUnit.Milliseconds,
            value=seconds * 1000.0,
            namespace=self.namespace,
        ) as metric:
            metric.add_dimension(name="kind", value=kind)
            metric.add_dimension(name="outcome", value=outcome)

    def queue_depth(self, queue: str, pending: int, in_flight: int) -> None:
        return  # SQS publishes ApproximateNumberOfMessages* itself

    def retrieval(self, hits: int) -> None:
        self._tally.retrieval(hits)
        if not hits:
            with single_metric(
                name="ZeroResultQueries", unit=MetricUnit.Count, value=1, namespace=self.namespace
            ):
                pass

    def zero_result_queries(self) -> int:
        return self._tally.zero_results

    def totals(self) -> dict[str, RouteTotals]:
        return self._tally.snapshot()

    def exposition(self) -> tuple[bytes, str] | None:
        return None
