"""The context request (search mode "context") and its rules: purposes and their quotas,
validation of quotas and the other-peer penalty, the navigation directories that are never
entries, and the category of a hit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skald.domain.errors import InvalidArgument
from skald.domain.paths.presets import USER_PRESET
from skald.domain.paths.uri import VikingURI, classify_uri
from skald.domain.retrieval.context_budget import BUCKETS, CATEGORIES, MEMORY_BUCKETS
from skald.services.context.results import RecallDeprecation
from skald.services.retrieval.service import FindRequest

PURPOSES: dict[str, dict[str, int]] = {
    "chat": {
        "events": 3,
        "entities": 3,
        "preferences": 1,
        "experiences": 1,
        "resources": 1,
        "skills": 1,
    },
    "coding": {
        "events": 1,
        "entities": 2,
        "preferences": 1,
        "experiences": 1,
        "resources": 3,
        "skills": 2,
    },
}
MAX_QUOTA = 50
DEFAULT_PENALTY: dict[str, float] = {
    c: 0.1 if c in {"events", "entities"} else 0.02 for c in CATEGORIES
}
# Fields that mean nothing in context mode; reported in stats.ignored when sent.
IGNORED_IN_CONTEXT = ("level", "include_provenance", "telemetry")


@dataclass
class ContextRequest:
    base: FindRequest  # query, session, filters and limit as in list mode
    query_expansion: str = "auto"
    max_tokens: int = 1600
    quotas: dict[str, int] | None = None
    purpose: str | None = None
    detail: str | dict[str, str] | None = None
    dedup_turns: int = 0
    exclude_uris: list[str] = field(default_factory=list)
    peer_scope: str = "all"
    other_peer_penalty: float | dict[str, float] | None = None
    rewrite: bool | str = False
    rewrite_max_bullets: int = 6
    provided: frozenset[str] = frozenset()  # request fields the caller set explicitly


def is_navigation(uri: VikingURI) -> bool:
    """Directories whose sidecars are listings, never context entries: the preset scope
    directories (viking://resources, agent/skills, a user's or peer's preset children, a
    session's directory) and every directory of a memory tree (memory types and their
    template directories such as events/2026/05: a memory's content is its file)."""
    scope, parts = uri.scope, uri.parts
    if scope is None:
        return True
    if scope == "resources":
        return not parts
    if scope == "agent":
        return len(parts) <= 1 or parts[0] == "memories"
    if scope == "system":
        return len(parts) <= 1 or classify_uri(uri).skill_namespace == uri
    if scope == "user":
        return _user_navigation(parts)
    return False


def _user_navigation(parts: tuple[str, ...]) -> bool:
    """is_navigation below viking://user: the user's (or a peer's) own space."""
    if len(parts) <= 1:
        return True
    rest = parts[1:]
    if rest[0] == "peers":
        if len(rest) <= 2:
            return True
        rest = rest[2:]
    if len(rest) == 1:
        return rest[0] in USER_PRESET
    if rest[0] == "memories":
        return True
    if rest[0] == "sessions":
        return len(rest) == 2 or (len(rest) == 3 and rest[2] == "history")
    return False


def category_of(context_type: str, memory_type: str | None) -> str:
    if context_type == "skill":
        return "skills"
    if context_type == "memory":
        return memory_type if memory_type in MEMORY_BUCKETS else "memories"
    return "resources"


def check_quotas(quotas: Mapping[str, Any] | None) -> dict[str, int] | None:
    if not quotas:
        return None
    unknown = sorted(k for k in quotas if k not in BUCKETS)
    if unknown:
        raise InvalidArgument(
            f"Unknown quota buckets {unknown}: {', '.join(BUCKETS)}", {"buckets": unknown}
        )
    out: dict[str, int] = {}
    for key, value in quotas.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_QUOTA:
            raise InvalidArgument(f"quotas.{key} must be an integer from 0 to {MAX_QUOTA}")
        out[key] = value
    return out


def check_penalty(value: float | Mapping[str, Any] | None) -> dict[str, float]:
    def number(name: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v <= 1.0:
            raise InvalidArgument(f"{name} must be a number from 0 to 1")
        return float(v)

    out = dict(DEFAULT_PENALTY)
    if value is None:
        return out
    if not isinstance(value, Mapping):
        penalty = number("other_peer_penalty", value)
        return dict.fromkeys(CATEGORIES, penalty)
    unknown = sorted(k for k in value if k not in CATEGORIES)
    if unknown:
        raise InvalidArgument(
            f"Unknown other_peer_penalty categories {unknown}: {', '.join(CATEGORIES)}",
            {"categories": unknown},
        )
    for key, v in value.items():
        out[key] = number(f"other_peer_penalty.{key}", v)
    return out


# -- the deprecated recall preset (POST /api/v1/search/recall) over context mode ---------------

CHARS_PER_TOKEN = 4  # recall budgeted characters; ~4 per token for the text it was tuned on
RECALL_MAX_CHARS = 6500
RECALL_MIN_SCORE = 0.1
RECALL_DEDUP_TURNS = 5
RECALL_ALIASES = ("max_chars", "min_score", "render")


def recall_request(values: Mapping[str, Any], provided: frozenset[str]) -> ContextRequest:
    """Recall's defaults overlaid on context mode: what the caller sent always wins; the v1
    names (max_chars, min_score, render) fold onto max_tokens, score_threshold and detail."""

    def given(key: str) -> bool:
        return key in provided and values.get(key) is not None

    if given("max_tokens"):
        max_tokens = int(values["max_tokens"])
    else:
        chars = int(values["max_chars"]) if given("max_chars") else RECALL_MAX_CHARS
        max_tokens = min(32000, max(64, round(chars / CHARS_PER_TOKEN)))
    threshold = (
        float(values["score_threshold"])
        if given("score_threshold")
        else float(values["min_score"])
        if given("min_score")
        else RECALL_MIN_SCORE
    )
    detail = (
        values.get("detail")
        if given("detail")
        else "abstract"
        if values.get("render") == "compact"
        else None
    )
    session_id = values.get("session_id")
    dedup = (
        int(values["dedup_turns"])
        if given("dedup_turns")
        else RECALL_DEDUP_TURNS
        if session_id
        else 0
    )
    base = FindRequest(
        query=str(values.get("query", "")), score_threshold=threshold, session_id=session_id
    )
    return ContextRequest(
        base=base,
        query_expansion=values.get("query_expansion") or "auto",
        max_tokens=max_tokens,
        quotas=values.get("quotas"),
        purpose=values.get("purpose") or "coding",
        detail=detail,
        dedup_turns=dedup,
        exclude_uris=list(values.get("exclude_uris") or []),
        peer_scope=values.get("peer_scope") or "all",
        other_peer_penalty=values.get("other_peer_penalty"),
        rewrite=values.get("rewrite", False),
        rewrite_max_bullets=int(values.get("rewrite_max_bullets") or 6),
        provided=frozenset(provided & {"quotas", "purpose", "detail", "dedup_turns"}),
    )


def recall_deprecation(provided: frozenset[str]) -> RecallDeprecation:
    return RecallDeprecation(
        endpoint="/api/v1/search/recall",
        successor="/api/v1/search/search",
        successor_body={"mode": "context"},
        aliases_used=[a for a in RECALL_ALIASES if a in provided],
    )
