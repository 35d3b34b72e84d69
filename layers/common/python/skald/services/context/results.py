"""The result of search(mode="context") and of the deprecated recall, as the HTTP edge
serialises it (docs/api.md, "Context mode"), with the statuses its steps report. A None marked
OMIT_NONE is a key the wire leaves out."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from skald.domain.wire import OMIT_NONE, WireUri


class ExpansionStatus(StrEnum):
    """What happened to session-aware query expansion (stats.query_expansion)."""

    OFF = "off"  # not asked for
    NO_SESSION = "no_session"  # no session_id, or the session does not exist
    UNAVAILABLE = "unavailable"  # no LLM configured
    NO_MESSAGES = "no_messages"  # the session has no live messages
    USED = "used"  # the expanded queries were retrieved with
    UNCHANGED = "unchanged"  # the LLM added nothing new
    TIMEOUT = "timeout"
    FAILED = "failed"  # the LLM failed or answered something else than the JSON asked for


class RewriteStatus(StrEnum):
    """What happened to the optional digest rewrite (stats.rewrite)."""

    OFF = "off"  # rewrite=false
    SKIPPED = "skipped"  # nothing to rewrite, or `auto` and the block is small
    UNAVAILABLE = "unavailable"  # rewrite=true and no LLM configured
    OK = "ok"  # `digest` holds the cited bullets
    FAILED = "failed"  # timeout, error, or no bullet citing an entry
    NO_RELEVANT = "no_relevant"  # the LLM found nothing relevant: the result is empty


class DedupStatus(StrEnum):
    """The recall ledger's state for this request (stats.dedup.status)."""

    OFF = "off"  # dedup_turns 0 or no session
    NO_SESSION = "no_session"  # the session does not exist
    OK = "ok"  # cooled by and recorded in the ledger
    ERROR = "error"  # the ledger failed: no cooling, no record


@dataclass(frozen=True, slots=True)
class ContextEntry:
    uri: WireUri
    category: str
    score: float
    detail: str  # the tier the entry got
    text: str
    origin: str  # "self" or "peer:<id>"
    tokens: int


@dataclass(slots=True)
class RewriteUsage:
    """The rewrite's cost: the estimated prompt, and what came back when the LLM answered."""

    input_tokens: int
    elapsed_ms: Annotated[int | None, OMIT_NONE] = None
    output_tokens: Annotated[int | None, OMIT_NONE] = None
    error: Annotated[str | None, OMIT_NONE] = None
    digest_tokens: Annotated[int | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True)
class TierSpan:
    start: str
    ceiling: str


@dataclass(frozen=True, slots=True)
class DetailStats:
    requested: str | dict[str, str]  # "auto" when not sent
    tiers: dict[str, TierSpan]


@dataclass(frozen=True, slots=True)
class Fill:
    ratio: float
    passes: dict[str, int]  # used tokens after each budget pass


@dataclass(slots=True)
class Dedup:
    turns: int
    status: DedupStatus = DedupStatus.OFF
    turn: int | None = None  # the ledger turn this request recorded
    cooled: int = 0


@dataclass(frozen=True, slots=True)
class RecallDeprecation:
    endpoint: str
    successor: str
    successor_body: dict[str, str]
    aliases_used: list[str]


@dataclass(slots=True)
class ContextStats:
    searched: dict[str, int]
    candidates: int
    selected: int
    returned: int
    dropped: int
    deduped: int
    max_tokens: int
    used_tokens: int
    per_entry_cap: int
    detail: DetailStats
    tier_counts: dict[str, int]
    fill: Fill
    query_expansion: ExpansionStatus
    queries: list[str]
    rewrite: RewriteStatus
    rewrite_usage: RewriteUsage | None
    excluded: int
    peer_scope: str
    dedup: Dedup
    ignored: list[str]
    quotas: Annotated[dict[str, int] | None, OMIT_NONE] = None
    stale: Annotated[int | None, OMIT_NONE] = None  # selected hits whose texts were gone
    retrieval_errors: Annotated[dict[str, str] | None, OMIT_NONE] = None  # per bucket
    deprecated: Annotated[RecallDeprecation | None, OMIT_NONE] = None  # recall only


@dataclass(slots=True)
class ContextBlock:
    """A budgeted, ready-to-inject context block, its entries and how it was assembled."""

    entries: list[ContextEntry]
    rendered: str
    digest: str
    stats: ContextStats
