"""A request's `telemetry` option (docs/api.md): the envelope carries `telemetry` only when
the request sets `"telemetry": true` or `{"summary": true}`, in OpenViking's shape, an id and
a summary of the operation: `{"id", "summary": {"operation", "status", "duration_ms", ...}}`.
Retrieval adds what its search did (`search`: mode, queries, candidates, returned)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from skald.domain.errors import InvalidArgument
from skald.services.retrieval.results import RetrievalPlan

TelemetryOption = bool | dict[str, Any]
# The wire name of each retrieval mode (search_type), a filter-only listing as "listing".
_SEARCH_TYPES = {
    "dense": "semantic",
    "lexical": "keywords",
    "hybrid": "hybrid",
    "browse": "listing",
}


def wanted(option: TelemetryOption | None) -> bool:
    """Whether the request asks for the telemetry summary. An object may only say
    `summary` (a boolean, true when left out), as OpenViking's does."""
    if option is None or option is False:
        return False
    if option is True:
        return True
    unknown = sorted(set(option) - {"summary"})
    if unknown:
        raise InvalidArgument(
            f"Unsupported telemetry options: {', '.join(unknown)}", {"field": "telemetry"}
        )
    summary = option.get("summary", True)
    if not isinstance(summary, bool):
        raise InvalidArgument("telemetry.summary must be a boolean", {"field": "telemetry"})
    return summary


class Operation:
    """Times one operation from its creation; `report` is its telemetry."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = time.perf_counter()

    def report(self, **parts: Any) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "operation": self.name,
            "status": "ok",
            "duration_ms": round((time.perf_counter() - self.started) * 1000.0, 3),
        }
        summary.update(parts)
        return {"id": uuid.uuid4().hex, "summary": summary}


def search_summary(plan: RetrievalPlan, returned: int) -> dict[str, Any]:
    """What a retrieval did, from RetrievalService's plan."""
    return {
        "search_type": _SEARCH_TYPES.get(plan.mode, plan.mode),
        "queries": list(plan.queries),
        "candidates": plan.candidates,
        "returned": returned,
    }
