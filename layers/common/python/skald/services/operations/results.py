"""The results of the observer, debug, statistics and system routes, as the HTTP edge
serialises them (docs/api.md, "Operations"). The consistency check's result is the domain's
(skald.domain.ops.consistency.Consistency)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skald.domain.wire import WireUri
from skald.services.ingest.processing import QueueStatus


@dataclass(frozen=True, slots=True)
class Component:
    """One observed component; `status` is a text table, or with format=json the same
    numbers as a dict (a display, not a contract: its keys follow OpenViking's)."""

    name: str
    is_healthy: bool
    has_errors: bool
    status: str | dict[str, Any]


@dataclass(frozen=True, slots=True)
class SystemComponents:
    """Every component and the system's health as OpenViking reports it."""

    is_healthy: bool
    errors: list[str]
    components: dict[str, Component]


@dataclass(frozen=True, slots=True)
class ObserverReport:
    """OpenViking's system status (is_healthy, errors, components) and Skald's summary.
    `queues`: the scheduler's counters per queue label."""

    is_healthy: bool
    errors: list[str]
    components: dict[str, Component]
    initialized: bool
    healthy: bool
    version: str
    auth_mode: str
    backend: str
    queues: QueueStatus
    checks: dict[str, str]
    features: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SystemStatus:
    initialized: bool
    user: str


@dataclass(frozen=True, slots=True)
class DebugHealth:
    healthy: bool


@dataclass(frozen=True, slots=True)
class VectorCount:
    count: int


@dataclass(frozen=True, slots=True)
class VectorRecord:
    """An index record as the index holds it (what retrieval searches)."""

    id: str
    uri: WireUri
    level: int
    section: int
    context_type: str
    parent: str
    abstract: str
    tags: list[str]
    memory_type: str | None
    owner: str | None
    peer: str | None
    created_at: str  # ISO-8601 UTC
    updated_at: str


@dataclass(frozen=True, slots=True)
class VectorScroll:
    records: list[VectorRecord]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class MemoryStats:
    total_memories: int
    by_category: dict[str, int]
    hotness_distribution: dict[str, int]
    # counts, and the oldest memory's age in days (0 while there is none)
    staleness: dict[str, int | float]


@dataclass(frozen=True, slots=True)
class SessionStats:
    session_id: str
    total_turns: int
    memories_extracted: int
    contexts_used: int
    skills_used: int
