"""What the metering service hands out, as the usage route serialises it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from skald.domain.wire import OMIT_NONE


@dataclass(frozen=True, slots=True)
class SeriesItem:
    period: str  # YYYY-MM-DDTHH, YYYY-MM-DD or YYYY-MM (UTC)
    user_id: str  # "" for work no user asked for (a sweep)
    unit: str
    dims: dict[str, str]
    value: int


@dataclass(frozen=True, slots=True)
class UsageSeries:
    """An account's metered usage over [start, end], summed per period x user x unit x dims,
    and per unit over the whole window (`totals`)."""

    account_id: str
    start: str
    end: str
    granularity: str
    user_id: Annotated[str | None, OMIT_NONE] = None
    totals: dict[str, int] = field(default_factory=dict)
    items: list[SeriesItem] = field(default_factory=list)


# OpenViking's console views (openviking/observability/usage_audit), in their shapes.


@dataclass(frozen=True, slots=True)
class ContextCounts:
    files: int
    skills: int
    memories: int
    total: int


@dataclass(frozen=True, slots=True)
class TodayTokens:
    vlm_input: int
    vlm_output: int
    embedding_input: int
    total: int


@dataclass(frozen=True, slots=True)
class TodayRetrievals:
    find: int
    search: int
    total: int


@dataclass(frozen=True, slots=True)
class DashboardSummary:
    context_counts: ContextCounts
    today_tokens: TodayTokens
    today_retrievals: TodayRetrievals


@dataclass(frozen=True, slots=True)
class TokenDay:
    date: str
    vlm_input: int
    vlm_output: int
    embedding_input: int


@dataclass(frozen=True, slots=True)
class TokenSeries:
    start_date: str
    end_date: str
    bucket: str
    items: list[TokenDay]


@dataclass(frozen=True, slots=True)
class ContextCommitRow:
    date: str
    hour: int
    total: int
    add_resource: int
    add_skill: int
    session_add_message: int
    session_commit: int


@dataclass(frozen=True, slots=True)
class ContextCommits:
    start_date: str
    end_date: str
    bucket: str
    items: list[ContextCommitRow]
