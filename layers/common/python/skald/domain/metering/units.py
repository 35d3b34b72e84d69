"""The billable units and how a recorded amount is filed: by UTC hour, account, user, unit and
a few dimensions (a route family, an LLM call's purpose and model, a job's kind).

Dimensions travel as one canonical string (`k=v` pairs sorted, `,` between): a cell's key in
every ledger, so the same dimensions always land in the same cell."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum


class Unit(StrEnum):
    REQUESTS = "requests"  # dims: family
    BYTES_UPLOADED = "bytes_uploaded"  # request bodies
    BYTES_DOWNLOADED = "bytes_downloaded"  # response bodies
    BYTES_STORED = "bytes_stored"  # a gauge: + on write, - on delete and a smaller overwrite
    INDEX_RECORDS = "index_records"  # records written to the search index
    TEXTS_EMBEDDED = "texts_embedded"  # dims: model
    LLM_TOKENS_IN = "llm_tokens_in"  # dims: purpose, model
    LLM_TOKENS_OUT = "llm_tokens_out"  # dims: purpose, model
    WORKER_MS = "worker_ms"  # dims: kind; a job's handler time in milliseconds
    OPERATIONS = "operations"  # dims: op; OpenViking's console counts (OPERATIONS below)


UNITS: tuple[str, ...] = tuple(u.value for u in Unit)
GAUGES = frozenset({Unit.BYTES_STORED.value})
LLM_TOKEN_UNITS = frozenset({Unit.LLM_TOKENS_IN.value, Unit.LLM_TOKENS_OUT.value})

# Route families: the segment after /api/v1 of a route template, folded where OpenViking's
# families span several segments. Anything else is "other".
_FAMILIES = {
    "fs": "fs",
    "content": "fs",
    "search": "search",
    "sessions": "sessions",
    "resources": "resources",
    "skills": "skills",
    "pack": "packs",
    "packs": "packs",
    "watches": "watches",
    "tasks": "tasks",
    "admin": "admin",
    "system": "system",
    "observer": "system",
    "debug": "system",
    "stats": "system",
    "console": "console",
}


def route_family(route: str | None) -> str:
    """The family of a route template (`/api/v1/fs/ls` -> fs); `mcp` for the MCP endpoint."""
    if not route:
        return "other"
    parts = [p for p in route.split("/") if p]
    if parts[:2] == ["api", "v1"] and len(parts) > 2:
        return _FAMILIES.get(parts[2], "other")
    if parts and parts[0] == "mcp":
        return "mcp"
    if parts and parts[0] in ("health", "ready", "metrics"):
        return "system"
    return "other"


# The operations OpenViking's console counts (retrievals, context writes), by route.
OPERATIONS: dict[tuple[str, str], str] = {
    ("POST", "/api/v1/search/find"): "find",
    ("POST", "/api/v1/search/search"): "search",
    ("POST", "/api/v1/resources"): "add_resource",
    ("POST", "/api/v1/skills"): "add_skill",
    ("POST", "/api/v1/sessions/{session_id}/messages"): "session_add_message",
    ("POST", "/api/v1/sessions/{session_id}/commit"): "session_commit",
}


def billed_kind(kind: str) -> bool:
    """Whether a job kind's worker time is billed to its account. Removing a user or an
    account is not: an account's removal also removes its usage, and time filed after that
    would bring the removed account back into the ledger."""
    return not kind.startswith("purge.")


def hour_of(epoch: float) -> str:
    """The UTC hour an instant falls in: `YYYY-MM-DDTHH` (sorts as time)."""
    return datetime.fromtimestamp(max(epoch, 0.0), UTC).strftime("%Y-%m-%dT%H")


def day_of(epoch: float) -> str:
    return datetime.fromtimestamp(max(epoch, 0.0), UTC).strftime("%Y-%m-%d")


def next_day_start(epoch: float) -> float:
    """When the UTC day of `epoch` ends (a daily limit resets)."""
    day = datetime.fromtimestamp(max(epoch, 0.0), UTC).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    return (day + timedelta(days=1)).timestamp()


def hour_start(hour: str) -> float:
    return datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC).timestamp()


def dims_key(dims: Mapping[str, str] | None) -> str:
    """The canonical string of a cell's dimensions. `,` and `=` inside a value become `_`
    (values are names: families, purposes, model ids, job kinds)."""
    if not dims:
        return ""
    return ",".join(f"{k}={_clean(str(v))}" for k, v in sorted(dims.items()) if v is not None)


def parse_dims(key: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in key.split(",") if key else ():
        k, _, v = part.partition("=")
        out[k] = v
    return out


def _clean(value: str) -> str:
    return value.replace(",", "_").replace("=", "_").replace("#", "_")[:128]
