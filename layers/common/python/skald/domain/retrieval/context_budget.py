"""Budgeted assembly of a context block (search mode="context"): which tier of each entry is
injected so that the whole block fits `max_tokens`. Pure: texts in, plan out.

Tiers, shallow to deep: `uri` < `abstract` < `overview` < `full`. An entry's text at a tier is
given whole or not at all: a tier that does not fit falls back to a shallower one, down to the
bare `uri` (empty text), and text is never cut.

Token accounting (what `used_tokens` counts, so a client can recompute it):
    block(e)  = '<memory uri="U" type="C" score="S" detail="T">' + "\\n" + X + "\\n" + '</memory>'
                U, C, T: the entry's uri, category and tier; S: its score with two decimals
                ("%.2f"); X: its text; attribute values and text XML-escaped (& < > and, in
                attributes, ")
    tokens(e) = estimate_tokens(block(e) + "\\n")
                (one newline per block: the separator of `rendered`, counted even after the
                last block)
    used_tokens = sum of tokens(e) over the entries;  rendered = "\\n".join(block(e))
so estimate_tokens(rendered) <= used_tokens <= max_tokens.

Planning, with n = the number of items offered and cap = floor(max_tokens * 2 / n):
 1. uri pass: in score order every item gets its bare uri while that fits; the first item
    whose uri does not fit is dropped with every item after it (so the entries returned are
    always the best-scored ones).
 2. base pass: in score order each entry gets its start tier, or the deepest shallower tier
    that fits both the cap and the remaining budget.
 3. deepening passes (breadth first): every entry that can go to `overview` (not beyond its
    ceiling) does so if it fits the cap and the budget, then the same for `full`.
 4. final pass, without the cap: in score order each entry takes the deepest tier up to its
    ceiling that the remaining budget still affords (repeated until nothing changes, as a
    deeper tier can be cheaper than a shallower one and free budget).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from skald.domain.errors import InvalidArgument
from skald.domain.text.tokens import estimate_tokens

TIERS: tuple[str, ...] = ("uri", "abstract", "overview", "full")
TEXT_TIERS: tuple[str, ...] = TIERS[1:]
RANK: dict[str, int] = {t: i for i, t in enumerate(TIERS)}

MEMORY_BUCKETS: tuple[str, ...] = ("events", "entities", "preferences", "experiences")
BUCKETS: tuple[str, ...] = (*MEMORY_BUCKETS, "resources", "skills")
# `memories` is the catch-all of the other memory types (cases, profile, archives...).
CATEGORIES: tuple[str, ...] = (*MEMORY_BUCKETS, "memories", "resources", "skills")

# detail="auto": where an entry starts, and how deep the spare budget may take it.
AUTO_START: dict[str, str] = {
    "events": "overview",
    "entities": "abstract",
    "preferences": "abstract",
    "experiences": "abstract",
    "memories": "abstract",
    "resources": "abstract",
    "skills": "abstract",
}
# Memory files are short, so their full text is worth it; documents, code and skills stop at
# their outline unless the caller asks for `full`.
AUTO_CEILING: dict[str, str] = {
    "events": "full",
    "entities": "full",
    "preferences": "full",
    "experiences": "full",
    "memories": "full",
    "resources": "overview",
    "skills": "overview",
}
# A directory hit (an .abstract.md/.overview.md record) has no full text: its deepest tier is
# the .overview.md sidecar, which is also where it starts.
DIRECTORY_TIER = "overview"
DETAIL_VALUES: tuple[str, ...] = ("auto", "abstract", "overview", "full")


def rank(tier: str) -> int:
    return RANK[tier]


# --------------------------------------------------------------------------------------------
# detail -> start tier and ceiling per category


@dataclass(frozen=True)
class TierRange:
    start: str
    ceiling: str
    auto: bool = False


def resolve_detail(detail: str | Mapping[str, str] | None) -> dict[str, TierRange]:
    """`auto` (or None): the category defaults. A tier name: start and ceiling for every
    category. An object {category: auto|tier}: per category, the others stay on auto."""
    if detail is None or isinstance(detail, str):
        per_category: Mapping[str, str] = {c: detail or "auto" for c in CATEGORIES}
    else:
        unknown = sorted(k for k in detail if k not in CATEGORIES)
        if unknown:
            raise InvalidArgument(
                f"Unknown detail categories {unknown}: {', '.join(CATEGORIES)}",
                {"categories": unknown},
            )
        per_category = {c: detail.get(c, "auto") for c in CATEGORIES}
    out: dict[str, TierRange] = {}
    for category, value in per_category.items():
        if value not in DETAIL_VALUES:
            raise InvalidArgument(
                f"Invalid detail '{value}' for {category}: {', '.join(DETAIL_VALUES)}"
            )
        if value == "auto":
            out[category] = TierRange(AUTO_START[category], AUTO_CEILING[category], auto=True)
        else:
            out[category] = TierRange(value, value)
    return out


def tier_range(ranges: Mapping[str, TierRange], category: str, *, directory: bool) -> TierRange:
    """The range of one entry; a directory starts at, and never goes past, its overview
    unless the caller asked for something shallower."""
    r = ranges[category]
    if not directory:
        return r
    if r.auto:
        return TierRange(DIRECTORY_TIER, DIRECTORY_TIER, auto=True)
    ceiling = r.ceiling if rank(r.ceiling) < rank(DIRECTORY_TIER) else DIRECTORY_TIER
    start = r.start if rank(r.start) < rank(ceiling) else ceiling
    return TierRange(start, ceiling)


# --------------------------------------------------------------------------------------------
# rendering and cost


def xml_escape(text: str, *, attribute: bool = False) -> str:
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return out.replace('"', "&quot;") if attribute else out


def format_score(score: float) -> str:
    return f"{score:.2f}"


def render_block(uri: str, category: str, score: float, tier: str, text: str) -> str:
    return (
        f'<memory uri="{xml_escape(uri, attribute=True)}" '
        f'type="{xml_escape(category, attribute=True)}" score="{format_score(score)}" '
        f'detail="{tier}">\n{xml_escape(text)}\n</memory>'
    )


def block_tokens(block: str) -> int:
    """A block's cost: its estimate with the newline that separates it from the next one."""
    return estimate_tokens(block + "\n")


def render(blocks: Sequence[str]) -> str:
    return "\n".join(blocks)


# --------------------------------------------------------------------------------------------
# planning


@dataclass(frozen=True)
class BudgetItem:
    uri: str
    category: str
    score: float
    texts: Mapping[str, str]  # text per tier above `uri`; a missing or empty tier is skipped
    start: str
    ceiling: str

    def text(self, tier: str) -> str | None:
        if tier == "uri":
            return ""
        value = self.texts.get(tier)
        return value or None


@dataclass(frozen=True)
class PlannedEntry:
    item: BudgetItem
    tier: str
    text: str
    block: str
    tokens: int


@dataclass(frozen=True)
class BudgetPlan:
    entries: tuple[PlannedEntry, ...]  # best score first
    dropped: tuple[BudgetItem, ...]  # items whose bare uri no longer fitted
    max_tokens: int
    used_tokens: int
    per_entry_cap: int
    passes: dict[str, int] = field(default_factory=dict)  # used_tokens after each pass

    @property
    def rendered(self) -> str:
        return render([e.block for e in self.entries])

    def tier_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(TIERS, 0)
        for e in self.entries:
            counts[e.tier] += 1
        return counts


def per_entry_cap(max_tokens: int, count: int) -> int:
    return max_tokens if count <= 0 else math.floor(max_tokens * 2 / count)


class _Planner:
    def __init__(self, items: Sequence[BudgetItem], max_tokens: int) -> None:
        self.items = items
        self.remaining = max_tokens
        self.cap = per_entry_cap(max_tokens, len(items))
        self.tier: dict[int, str] = {}
        self.cost: dict[int, int] = {}
        self._costs: dict[tuple[int, str], int] = {}

    def cost_of(self, i: int, tier: str) -> int:
        key = (i, tier)
        if key not in self._costs:
            item = self.items[i]
            text = item.text(tier) or ""
            self._costs[key] = block_tokens(
                render_block(item.uri, item.category, item.score, tier, text)
            )
        return self._costs[key]

    def take(self, i: int, targets: Sequence[str], *, capped: bool) -> bool:
        """Moves entry i to the first tier of `targets` that has text and fits."""
        for tier in targets:
            if self.items[i].text(tier) is None:
                continue
            c = self.cost_of(i, tier)
            if capped and tier != "uri" and c > self.cap:
                continue
            if c - self.cost[i] > self.remaining:
                continue
            self.remaining -= c - self.cost[i]
            self.tier[i], self.cost[i] = tier, c
            return True
        return False


def _clamp(item: BudgetItem) -> tuple[str, str]:
    ceiling = item.ceiling if item.ceiling in RANK else "full"
    start = item.start if item.start in RANK else ceiling
    if rank(start) > rank(ceiling):
        start = ceiling
    return start, ceiling


def plan_budget(items: Sequence[BudgetItem], max_tokens: int) -> BudgetPlan:
    order = sorted(range(len(items)), key=lambda i: -items[i].score)  # stable on ties
    p = _Planner(items, max_tokens)
    kept: list[int] = []
    dropped: list[int] = []
    for i in order:
        c = p.cost_of(i, "uri")
        if dropped or c > p.remaining:
            dropped.append(i)
            continue
        p.tier[i], p.cost[i] = "uri", c
        p.remaining -= c
        kept.append(i)
    passes = {"uri": max_tokens - p.remaining}
    for i in kept:
        start, _ = _clamp(items[i])
        p.take(i, [t for t in reversed(TEXT_TIERS) if rank(t) <= rank(start)], capped=True)
    passes["base"] = max_tokens - p.remaining
    for tier in ("overview", "full"):
        for i in kept:
            _, ceiling = _clamp(items[i])
            if rank(p.tier[i]) < rank(tier) <= rank(ceiling):
                p.take(i, [tier], capped=True)
    passes["deepen"] = max_tokens - p.remaining
    changed = True
    while changed:  # a deeper tier may be cheaper, and what it frees can serve an earlier entry
        changed = False
        for i in kept:
            _, ceiling = _clamp(items[i])
            deeper = [t for t in reversed(TIERS) if rank(p.tier[i]) < rank(t) <= rank(ceiling)]
            changed = p.take(i, deeper, capped=False) or changed
    passes["final"] = max_tokens - p.remaining
    entries = []
    for i in kept:
        item, tier = items[i], p.tier[i]
        text = item.text(tier) or ""
        block = render_block(item.uri, item.category, item.score, tier, text)
        entries.append(PlannedEntry(item, tier, text, block, p.cost[i]))
    return BudgetPlan(
        tuple(entries),
        tuple(items[i] for i in dropped),
        max_tokens,
        max_tokens - p.remaining,
        p.cap,
        passes,
    )
