"""The context-mode budget planner (domain/retrieval/context_budget.py): properties and fixed
cases."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidArgument, InvalidFilter
from skald.domain.paths.uri import from_canonical
from skald.domain.retrieval.context_budget import (
    AUTO_CEILING,
    AUTO_START,
    CATEGORIES,
    RANK,
    TEXT_TIERS,
    TIERS,
    BudgetItem,
    BudgetPlan,
    block_tokens,
    per_entry_cap,
    plan_budget,
    render,
    render_block,
    resolve_detail,
    tier_range,
    xml_escape,
)
from skald.domain.text.tokens import estimate_tokens
from skald.services.context.service import ContextRequest, ContextService, is_navigation
from skald.services.retrieval.service import Candidate, FindRequest, RetrievalService

# Words of narrow and wide (>= 0x3000, 1.5 tokens) characters, XML specials and newlines;
# texts built from words generate much faster than character by character.
WORDS = [
    "a",
    "word",
    "longer-words",
    "<tag>",
    "a&b",
    '"q"',
    "\n",
    "\u3042\u6f22",
    "\uff21\uff22\uff23",
    "é",
    "x" * 40,
]
TEXT = st.lists(st.sampled_from(WORDS), max_size=60).map(" ".join)


def make_item(
    n: int, name: str, category: str, score: float, texts: dict[str, str], tiers: tuple[str, str]
) -> BudgetItem:
    start, ceiling = sorted(tiers, key=RANK.__getitem__)
    return BudgetItem(f"viking://resources/{n}/{name}", category, score, texts, start, ceiling)


# Strategies are built once: building them inside a composite dominates the run time.
ITEMS = st.lists(
    st.builds(
        make_item,
        st.integers(0, 99),
        st.sampled_from(["a.md", "dir/b.py", "x" * 60, "c_d/e"]),
        st.sampled_from(CATEGORIES),
        st.floats(0, 1, allow_nan=False),
        st.dictionaries(st.sampled_from(TEXT_TIERS), TEXT, max_size=3),
        st.tuples(st.sampled_from(TEXT_TIERS), st.sampled_from(TEXT_TIERS)),
    ),
    max_size=20,
)


def check_plan(plan: BudgetPlan, offered: list[BudgetItem], max_tokens: int) -> None:
    assert plan.used_tokens <= max_tokens
    assert plan.used_tokens == sum(e.tokens for e in plan.entries)
    assert estimate_tokens(plan.rendered) <= plan.used_tokens
    for e in plan.entries:
        # every entry keeps at least its uri, and its text is one tier's text, uncut
        assert e.tier in TIERS
        assert e.text == ("" if e.tier == "uri" else e.item.texts[e.tier])
        assert RANK[e.tier] <= RANK[e.item.ceiling]
        assert e.block == render_block(e.item.uri, e.item.category, e.item.score, e.tier, e.text)
        assert e.tokens == block_tokens(e.block)
    # entries are the best-scored prefix; the rest were dropped because no uri fitted
    assert len(plan.entries) + len(plan.dropped) == len(offered)
    scores = [e.item.score for e in plan.entries]
    assert scores == sorted(scores, reverse=True)
    if plan.dropped and plan.entries:
        assert min(scores) >= max(i.score for i in plan.dropped)
    if plan.dropped:
        uri_only = sum(
            block_tokens(render_block(e.item.uri, e.item.category, e.item.score, "uri", ""))
            for e in plan.entries
        )
        first = max(plan.dropped, key=lambda i: i.score)
        first_cost = block_tokens(render_block(first.uri, first.category, first.score, "uri", ""))
        assert first_cost > max_tokens - uri_only


@settings(max_examples=250, deadline=None)
@given(ITEMS, st.integers(1, 3000))
def test_budget_is_never_exceeded_and_text_never_cut(
    offered: list[BudgetItem], max_tokens: int
) -> None:
    check_plan(plan_budget(offered, max_tokens), offered, max_tokens)


@settings(max_examples=100, deadline=None)
@given(ITEMS, st.integers(64, 3000), st.integers(0, 2000))
def test_more_budget_never_returns_fewer_entries(
    offered: list[BudgetItem], max_tokens: int, extra: int
) -> None:
    small = plan_budget(offered, max_tokens)
    large = plan_budget(offered, max_tokens + extra)
    assert len(large.entries) >= len(small.entries)


@settings(max_examples=100, deadline=None)
@given(ITEMS, st.integers(64, 4000))
def test_spare_budget_is_not_left_on_the_table(offered: list[BudgetItem], max_tokens: int) -> None:
    plan = plan_budget(offered, max_tokens)
    spare = max_tokens - plan.used_tokens
    for e in plan.entries:
        # after the final pass no deeper tier within the ceiling would still fit
        for tier in TIERS:
            if RANK[e.tier] < RANK[tier] <= RANK[e.item.ceiling] and e.item.texts.get(tier):
                cost = block_tokens(
                    render_block(
                        e.item.uri, e.item.category, e.item.score, tier, e.item.texts[tier]
                    )
                )
                assert cost - e.tokens > spare


# --------------------------------------------------------------------------------------------
# fixed cases


def item(
    uri: str,
    score: float,
    *,
    start: str = "abstract",
    ceiling: str = "full",
    category: str = "resources",
    **texts: str,
) -> BudgetItem:
    return BudgetItem(uri, category, score, texts, start, ceiling)


def cost(it: BudgetItem, tier: str) -> int:
    return block_tokens(render_block(it.uri, it.category, it.score, tier, it.texts.get(tier, "")))


def test_tiers_fall_back_instead_of_truncating() -> None:
    big = item(
        "viking://resources/a.md",
        0.9,
        abstract="short summary",
        overview="- heading\n- other heading",
        full="word " * 2000,
    )
    plan = plan_budget([big], 400)
    (entry,) = plan.entries
    assert entry.tier == "overview" and entry.text == "- heading\n- other heading"
    assert plan.used_tokens == cost(big, "overview") <= 400


def test_bare_uri_when_nothing_else_fits() -> None:
    it = item("viking://resources/a.md", 0.5, abstract="x" * 800)
    plan = plan_budget([it], 64)
    assert [e.tier for e in plan.entries] == ["uri"]
    assert plan.entries[0].text == "" and plan.used_tokens == cost(it, "uri")


def test_lowest_scores_are_dropped_when_even_uris_do_not_fit() -> None:
    offered = [item(f"viking://resources/doc-{i}.md", i / 10) for i in range(10)]
    plan = plan_budget(offered, 64)
    assert 0 < len(plan.entries) < 10
    assert [e.item.score for e in plan.entries] == [0.9, 0.8][: len(plan.entries)]
    assert plan.used_tokens <= 64


def test_start_tier_then_deepening_in_score_order() -> None:
    a = item("viking://resources/a.md", 0.9, abstract="A", overview="A " * 40, full="A " * 300)
    b = item("viking://resources/b.md", 0.5, abstract="B", overview="B " * 40, full="B " * 300)
    budget = cost(a, "full") + cost(b, "overview")
    plan = plan_budget([b, a], budget)
    assert [(e.item.uri[-4:], e.tier) for e in plan.entries] == [
        ("a.md", "full"),
        ("b.md", "overview"),
    ]
    assert plan.used_tokens == budget


def test_per_entry_cap_applies_before_the_final_pass() -> None:
    a = item("viking://resources/a.md", 0.9, start="full", abstract="A", full="A " * 200)
    b = item("viking://resources/b.md", 0.1, start="full", abstract="B", full="B " * 200)
    budget = 2 * cost(a, "full") - 10  # both cannot be full; the cap is budget / 2 * 2
    plan = plan_budget([a, b], budget)
    assert plan.per_entry_cap == per_entry_cap(budget, 2) == budget
    tiers = {e.item.uri[-4:]: e.tier for e in plan.entries}
    assert tiers == {"a.md": "full", "b.md": "abstract"}
    # with many competitors the cap keeps the best one at its abstract until the final pass
    big = item("viking://resources/big.md", 0.9, start="full", abstract="A", full="A " * 600)
    many = [big] + [item(f"viking://resources/n{i}.md", 0.01 * i, abstract="n") for i in range(9)]
    plan = plan_budget(many, 800)
    assert plan.per_entry_cap == 160 < cost(big, "full") < 800 - 9 * cost(many[1], "abstract")
    assert plan.passes["base"] < cost(big, "full")  # big started at its abstract
    assert next(e for e in plan.entries if e.item is big).tier == "full"  # the final pass


def test_ceiling_is_respected_and_missing_tiers_are_skipped() -> None:
    it = item(
        "viking://resources/a.md",
        0.9,
        start="abstract",
        ceiling="overview",
        abstract="A",
        full="A " * 10,
    )
    plan = plan_budget([it], 10_000)
    assert plan.entries[0].tier == "abstract"  # no overview text, full is above the ceiling
    it = item("viking://resources/b.md", 0.9, start="overview", ceiling="overview", abstract="B")
    assert plan_budget([it], 10_000).entries[0].tier == "abstract"


def test_rendered_block_format_and_escaping() -> None:
    block = render_block('viking://resources/a"b.md', "resources", 0.5, "abstract", "x < y & z > w")
    assert block == (
        '<memory uri="viking://resources/a&quot;b.md" type="resources" '
        'score="0.50" detail="abstract">\nx &lt; y &amp; z &gt; w\n</memory>'
    )
    assert xml_escape('"', attribute=False) == '"'
    assert render([block, block]) == block + "\n" + block
    assert block_tokens(block) == estimate_tokens(block + "\n")


def test_empty_plan() -> None:
    plan = plan_budget([], 1600)
    assert plan.entries == () and plan.used_tokens == 0 and plan.rendered == ""
    assert plan.tier_counts() == {"uri": 0, "abstract": 0, "overview": 0, "full": 0}


def test_resolve_detail() -> None:
    auto = resolve_detail(None)
    assert {c: (r.start, r.ceiling) for c, r in auto.items()} == {
        c: (AUTO_START[c], AUTO_CEILING[c]) for c in CATEGORIES
    }
    assert auto["events"].start == "overview" and auto["events"].ceiling == "full"
    assert auto["resources"].ceiling == "overview"
    full = resolve_detail("full")
    assert all((r.start, r.ceiling) == ("full", "full") for r in full.values())
    mixed = resolve_detail({"resources": "full", "events": "abstract"})
    assert (mixed["resources"].start, mixed["resources"].ceiling) == ("full", "full")
    assert (mixed["events"].start, mixed["events"].ceiling) == ("abstract", "abstract")
    assert mixed["skills"] == auto["skills"]
    with pytest.raises(InvalidArgument):
        resolve_detail({"bogus": "full"})
    with pytest.raises(InvalidArgument):
        resolve_detail({"resources": "everything"})
    with pytest.raises(InvalidArgument):
        resolve_detail("everything")


def test_directories_start_and_stop_at_their_overview() -> None:
    auto = resolve_detail("auto")
    r = tier_range(auto, "entities", directory=True)
    assert (r.start, r.ceiling) == ("overview", "overview")
    r = tier_range(resolve_detail("full"), "resources", directory=True)
    assert (r.start, r.ceiling) == ("overview", "overview")
    r = tier_range(resolve_detail("abstract"), "resources", directory=True)
    assert (r.start, r.ceiling) == ("abstract", "abstract")
    r = tier_range(auto, "resources", directory=False)
    assert (r.start, r.ceiling) == ("abstract", "overview")


# --------------------------------------------------------------------------------------------
# around the planner: preset directories, and a failing retrieval bucket (service level)


def test_navigation_directories() -> None:
    nav = [
        "viking://",
        "viking://resources",
        "viking://agent",
        "viking://agent/skills",
        "viking://user/u",
        "viking://user/u/memories",
        "viking://user/u/memories/events",
        "viking://user/u/memories/events/2026/05",
        "viking://user/u/peers",
        "viking://user/u/peers/bob",
        "viking://user/u/peers/bob/memories/preferences",
        "viking://user/u/sessions",
        "viking://user/u/sessions/s1",
        "viking://user/u/sessions/s1/history",
        "viking://system",
        "viking://system/compile/example-skills",
    ]
    content = [
        "viking://resources/guide",
        "viking://resources/guide/api",
        "viking://user/u/resources/notes",
        "viking://agent/skills/deploy",
        "viking://user/u/sessions/s1/history/archive_001",
        "viking://user/u/peers/bob/resources/docs",
    ]
    for uri in nav:
        assert is_navigation(from_canonical(uri)), uri
    for uri in content:
        assert not is_navigation(from_canonical(uri)), uri


class FlakyRetrieval:
    """Resources are down; every memory bucket finds one memory of its type."""

    def build_filter(self, identity: Identity, req: FindRequest) -> None:
        return None

    def retrieve(
        self,
        identity: Identity,
        req: FindRequest,
        *,
        queries: list[str] | None = None,
        limit: int | None = None,
    ) -> tuple[list[Candidate], dict[str, Any]]:
        if req.context_type == ["resource"]:
            raise RuntimeError("index down")
        if req.context_type == ["skill"]:
            if req.query == "bad filter":
                raise InvalidFilter("bad filter")
            return [], {}
        assert req.filter is not None
        memory_type = req.filter["conds"][0]
        return [
            Candidate(
                f"viking://user/u/memories/{memory_type}/x.md",
                "memory",
                2,
                0.5,
                f"a {memory_type} memory",
                [],
                "m",
                0.0,
                0.0,
                memory_type=memory_type,
            )
        ], {}


def test_a_failing_bucket_does_not_fail_the_request() -> None:
    service = ContextService(
        cast(RetrievalService, FlakyRetrieval()), cast(Any, None), cast(Any, None), cast(Any, None)
    )
    identity = Identity("acct", "u", "user")
    req = ContextRequest(
        base=FindRequest(query="q"),
        detail="abstract",
        quotas={"events": 1, "resources": 2, "skills": 1},
    )
    res = service.assemble(identity, req)
    stats = res.stats
    assert stats.retrieval_errors == {"resources": "RuntimeError: index down"}
    assert stats.searched == {"events": 1, "resources": 0, "skills": 0}
    assert [(e.uri, e.detail, e.text) for e in res.entries] == [
        ("viking://user/u/memories/events/x.md", "abstract", "a events memory")
    ]
    # a request the index rejects is the caller's error, not a failing bucket
    with pytest.raises(InvalidFilter):
        service.assemble(identity, replace(req, base=FindRequest(query="bad filter")))
    with pytest.raises(InvalidArgument):
        service.assemble(identity, replace(req, dedup_turns=2))  # no session_id
