"""Memory health numbers (`GET /api/v1/stats/memories`): counts per category, how recently
memories were touched (hotness) and how stale they are."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from skald.domain.errors import InvalidArgument

# OpenViking's memory categories: profile is one file, the others are directories.
MEMORY_CATEGORIES = (
    "profile",
    "preferences",
    "entities",
    "events",
    "cases",
    "patterns",
    "tools",
    "skills",
)
DAY_S = 86400.0
HALF_LIFE_DAYS = 7.0  # a memory untouched for a week is half as hot
COLD_BELOW = 0.2
HOT_ABOVE = 0.6


def check_category(category: str | None) -> None:
    if category is not None and category not in MEMORY_CATEGORIES:
        raise InvalidArgument(
            f"Unknown category: {category}. Valid categories: {', '.join(MEMORY_CATEGORIES)}",
            {"field": "category"},
        )


def category_of(rel_path: str) -> str | None:
    """The category of a file below a user's `memories` directory (`profile.md`,
    `preferences/tea.md`); None for anything else."""
    if rel_path == "profile.md":
        return "profile"
    head, sep, rest = rel_path.partition("/")
    if sep and head in MEMORY_CATEGORIES and head != "profile" and rest.endswith(".md"):
        return head
    return None


def hotness(updated_at: float, now: float) -> float:
    """1.0 when just written, halving every HALF_LIFE_DAYS without a write."""
    age_days = max(0.0, now - updated_at) / DAY_S
    return float(0.5 ** (age_days / HALF_LIFE_DAYS))


def memory_stats(
    files: Iterable[str],
    times: Sequence[tuple[float, float]],
    now: float,
    category: str | None = None,
) -> dict[str, Any]:
    """`files`: paths relative to the memories directory; `times`: (created_at, updated_at)
    of each memory the index knows."""
    categories = [category] if category else list(MEMORY_CATEGORIES)
    by_category = dict.fromkeys(categories, 0)
    for rel in files:
        cat = category_of(rel)
        if cat in by_category:
            by_category[cat] += 1
    dist = {"cold": 0, "warm": 0, "hot": 0}
    staleness: dict[str, Any] = {
        "not_accessed_7d": 0,
        "not_accessed_30d": 0,
        "oldest_memory_age_days": 0,
    }
    for created, updated in times:
        score = hotness(updated, now)
        dist["cold" if score < COLD_BELOW else "hot" if score > HOT_ABOVE else "warm"] += 1
        idle_days = (now - updated) / DAY_S
        staleness["not_accessed_7d"] += idle_days > 7
        staleness["not_accessed_30d"] += idle_days > 30
        staleness["oldest_memory_age_days"] = max(
            staleness["oldest_memory_age_days"], round((now - created) / DAY_S, 1)
        )
    return {
        "total_memories": sum(by_category.values()),
        "by_category": by_category,
        "hotness_distribution": dist,
        "staleness": staleness,
    }
