"""The observer: the status of each component (queue, vector index, models, locks, retrieval,
filesystem) and of the system as a whole, as OpenViking's observer reports them.

Each component is `{"name", "is_healthy", "has_errors", "status"}`; `status` is a text table
(the default, what `ov status` reads) or, with format=json, the same numbers as a dict.
Activity numbers (retrieval, filesystem) are this process's since it started.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from skald.domain.access.identity import Identity
from skald.domain.ops.route_stats import FILESYSTEM_PREFIXES, RETRIEVAL_PREFIX, under
from skald.domain.ops.status_tables import metrics_table, table
from skald.domain.paths.uri import PUBLIC_SCOPES
from skald.ports import Metrics, SearchIndex
from skald.services.ingest.processing import QueueCounters
from skald.services.operations.results import Component, SystemComponents

Format = Literal["table", "json"]
COMPONENTS = ("queue", "vikingdb", "models", "lock", "retrieval", "filesystem")
QueueStatus = Callable[[Identity | None], dict[str, QueueCounters]]
ModelNames = dict[str, list[tuple[str, str]]]


def component(name: str, healthy: bool, errors: bool, status: Any) -> Component:
    return Component(name, healthy, errors, status)


class ObserverService:
    def __init__(
        self,
        *,
        backend: str,
        index_name: str,
        dimension: int,
        queue_status: QueueStatus,
        index: SearchIndex,
        readiness: Callable[[], dict[str, str]],
        metrics: Metrics,
        models: Callable[[], ModelNames],
    ) -> None:
        # aws-local runs the AWS adapters (S3, OpenSearch) against local stand-ins.
        self.on_aws = backend in ("aws", "aws-local")
        self.index_name = index_name
        self.dimension = dimension
        self.queue_status = queue_status
        self.index = index
        self.readiness = readiness
        self.metrics = metrics
        self.models_of = models

    # ---------------------------------------------------------------- components

    def queue(self, identity: Identity, fmt: Format = "table") -> Component:
        queues = self.queue_status(identity)
        rows = [
            (
                label,
                q.pending,
                q.in_progress,
                q.processed,
                q.requeue_count,
                q.error_count,
                q.pending + q.in_progress + q.processed,
            )
            for label, q in queues.items()
        ]
        total = tuple(sum(int(r[i]) for r in rows) for i in range(1, 7))
        # Dead letters of jobs the caller may see are errors to report (their messages name
        # its URIs); other accounts' failures only show in the counters. A dead letter stays
        # until it is dealt with, so it does not make the queue itself unhealthy.
        errors = any(q.errors for q in queues.values())
        if fmt == "json":
            keys = ("pending", "in_progress", "processed", "requeued", "errors", "total")
            status: Any = {
                "queues": [{"name": r[0], **dict(zip(keys, r[1:], strict=True))} for r in rows],
                "summary": dict(zip(keys, total, strict=True)),
            }
        else:
            status = table(
                ("Queue", "Pending", "In Progress", "Processed", "Requeued", "Errors", "Total"),
                [*rows, ("TOTAL", *total)],
            )
        return component("queue", True, errors, status)

    def vikingdb(self, identity: Identity, fmt: Format = "table") -> Component:
        backend = "opensearch" if self.on_aws else "embedded"
        collection = self.index_name if self.on_aws else "records"
        try:
            count, healthy, error = self.index.count(identity.account_id), True, ""
        except Exception as exc:  # the observer reports an unreachable index, it never fails
            count, healthy, error = 0, False, str(exc)
        if fmt == "json":
            status: Any = {
                "backend": backend,
                "collection": collection,
                "index": collection,
                "dimension": self.dimension,
                "vector_count": count,
                "distance_metric": "cosine",
            }
            if error:
                status["error"] = error
        else:
            state = "OK" if healthy else "ERROR"
            status = f"Account: {identity.account_id}\nBackend: {backend}\n" + table(
                ("Collection", "Index Count", "Vector Count", "Status"),
                [(collection, 1, count, state), ("TOTAL", 1, count, "")],
            )
        return component("vikingdb", healthy, not healthy, status)

    def models(self, fmt: Format = "table") -> Component:
        names = self.models_of()
        if fmt == "json":
            status: Any = {
                kind: [{"model": m, "provider": p} for m, p in rows] for kind, rows in names.items()
            }
        else:
            # No LLM: summaries, overviews and memories come from the rule-based fallbacks.
            vlm = names["vlm"] or [("none", "rule-based fallbacks")]
            parts = [
                f"{title}:\n" + table(("Model", "Provider"), rows)
                for title, rows in (
                    ("VLM Models", vlm),
                    ("Embedding Models", names["embedding"]),
                    ("Rerank Models", names["rerank"] or [("none", "-")]),
                )
            ]
            status = "\n\n".join(parts)
        return component("models", True, False, status)

    def lock(self, fmt: Format = "table") -> Component:
        # Writes are conditional puts and single transactions: no lock is ever held between
        # requests, so there is never one to report.
        if fmt == "json":
            status: Any = {
                "active_locks": 0,
                "waiting_locks": 0,
                "stale_locks_removed": 0,
                "conflict_count": 0,
            }
        else:
            status = "No active locks\n" + table(
                ("Handle ID", "Locks", "Duration"), [("TOTAL (0)", 0, "")]
            )
        return component("lock", True, False, status)

    def retrieval(self, fmt: Format = "table") -> Component:
        t = under(self.metrics.totals(), RETRIEVAL_PREFIX)
        answered = t.requests - t.errors - t.rejected
        zero = self.metrics.zero_result_queries()
        rate = zero / answered if answered > 0 else 0.0
        values = {
            "total_queries": t.requests,
            "total_errors": t.errors,
            "rejected_queries": t.rejected,
            "zero_result_queries": zero,
            "zero_result_rate": round(rate, 4),
            "mean_latency_ms": round(t.mean_ms, 1),
        }
        status: Any = (
            values
            if fmt == "json"
            else metrics_table(
                [
                    ("Total Queries", t.requests),
                    ("Total Errors", t.errors),
                    ("Rejected Queries", t.rejected),
                    ("Zero-Result Rate", f"{rate:.1%}"),
                    ("Mean Latency (ms)", f"{t.mean_ms:.1f}"),
                ]
            )
        )
        return component("retrieval", True, bool(t.errors), status)

    def filesystem(self, fmt: Format = "table") -> Component:
        t = under(self.metrics.totals(), *FILESYSTEM_PREFIXES)
        store = "s3" if self.on_aws else "local directory"
        healthy = self.readiness().get("storage") == "ok"
        mounts = [f"viking://{scope}" for scope in sorted(PUBLIC_SCOPES)]
        if fmt == "json":
            status: Any = {
                "store": store,
                "mounts": mounts,
                "total_operations": t.requests,
                "total_errors": t.errors,
            }
        else:
            status = (
                "\n".join(f"Mount: {m} (store: {store})" for m in mounts)
                + "\n"
                + metrics_table([("Total Operations", t.requests), ("Total Errors", t.errors)])
            )
        return component("filesystem", healthy, not healthy, status)

    # ---------------------------------------------------------------- the whole system

    def system(self, identity: Identity, fmt: Format = "table") -> SystemComponents:
        components = {
            "queue": self.queue(identity, fmt),
            "vikingdb": self.vikingdb(identity, fmt),
            "models": self.models(fmt),
            "lock": self.lock(fmt),
            "retrieval": self.retrieval(fmt),
            "filesystem": self.filesystem(fmt),
        }
        return SystemComponents(
            is_healthy=all(c.is_healthy for c in components.values()),
            errors=[f"{name} has errors" for name, c in components.items() if c.has_errors],
            components=components,
        )

    def healthy(self) -> bool:
        return all(v == "ok" for v in self.readiness().values())
