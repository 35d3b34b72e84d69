"""search(mode="context") through openviking-sdk: budgets, tiers, quotas, purposes, dedup,
exclusions, peers, rewrite (against a scripted OpenAI-compatible LLM) and validation."""

from __future__ import annotations

import json
import math
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import InvalidArgumentError, OpenVikingError

from tests.api.conftest import make_client
from tests.support.server import SkaldServer

ME = "viking://user/alice"
LONG_PARA = (
    "Before a deploy, freeze the schema, tag the release, warm the caches and tell the "
    "on-call engineer which services move. "
)
DEPLOY_GUIDE = (
    "# Deploy guide\n\nHow to deploy services and roll them back safely.\n\n"
    "## Prepare\n\n"
    + LONG_PARA * 40
    + "\n\n## Rollback\n\n"
    + "Run the rollback script; it reverts migrations in reverse order. " * 40
    + "\n\n## Verify\n\nWatch the dashboards for ten minutes.\n"
)
MEMORIES = {
    "viking://~/memories/events/2026/05/01/rocket launch.md": (
        "# Summary\n\nAlice watched the rocket launch with her robotics team.\n\nThe launch "
        "happened at dawn from the coastal pad; the team celebrated with pizza afterwards "
        "and planned the next deploy of the flight software."
    ),
    "viking://~/memories/entities/projects/apollo.md": (
        "# Summary\n\nApollo is Alice's warehouse robotics project at Acme.\n\nApollo builds "
        "autonomous forklifts; its deploy pipeline runs nightly and rollbacks use the deploy "
        "helper skill."
    ),
    "viking://~/memories/preferences/alice/editor.md": (
        "# Summary\n\nAlice prefers the Helix editor with vim keybindings.\n\nShe dislikes "
        "IDEs that hide the terminal during a deploy."
    ),
    "viking://~/memories/experiences/deploy rollback.md": (
        "# Summary\n\nRolling back a bad deploy works best with the rollback script.\n\nLast "
        "time a manual rollback broke the database migrations; the scripted rollback "
        "reverted them in order."
    ),
    "viking://~/memories/cases/flaky deploy test.md": (
        "# Summary\n\nThe deploy smoke test is flaky on cold caches.\n\nRe-running it after "
        "warming the cache fixes it."
    ),
    "viking://~/peers/bob/memories/preferences/bob/drinks.md": (
        "# Summary\n\nBob prefers espresso and deploys on Fridays.\n\nBob drinks two "
        "espressos before every deploy rollback drill."
    ),
}
RESOURCES = {
    "viking://resources/guide/deploy.md": DEPLOY_GUIDE,
    "viking://resources/guide/robots.py": (
        '"""Robot fleet helpers used by the deploy scripts."""\n\n\nclass Fleet:\n'
        '    def deploy(self, version: str) -> None:\n        """Roll out a version."""\n'
        "        self.version = version\n\n    def rollback(self) -> None:\n"
        "        self.version = None\n"
    ),
    "viking://resources/kitchen/tea.md": (
        "# Tea\n\nGreen tea brews at 80 degrees for two minutes.\n"
    ),
}
SKILL = "viking://agent/skills/deploy-helper"
SKILL_FILES = {
    f"{SKILL}/SKILL.md": "---\nname: deploy-helper\ndescription: Deploys services and rolls "
    "them back safely.\n---\n\n# Deploy helper\n\nRun scripts/rollback.py "
    "to roll a deploy back.\n\n## Steps\n\n1. Check.\n2. Roll back.\n",
    f"{SKILL}/scripts/rollback.py": '"""Roll back the last deploy."""\n\n\n'
    "def rollback(version: str) -> None:\n    pass\n",
}
PRESETS = {
    "viking://resources",
    "viking://agent",
    "viking://agent/skills",
    ME,
    f"{ME}/memories",
    f"{ME}/resources",
    f"{ME}/skills",
    f"{ME}/peers",
    f"{ME}/sessions",
    f"{ME}/memories/events",
    f"{ME}/memories/preferences",
    f"{ME}/memories/entities",
    f"{ME}/memories/experiences",
}


# --------------------------------------------------------------------------------------------
# The documented token accounting, written independently of the server's code.


def estimate(text: str) -> int:
    wide = sum(1 for ch in text if ord(ch) >= 0x3000)
    return math.ceil(wide * 1.5 + (len(text) - wide) / 4)


def esc(text: str, attribute: bool = False) -> str:
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return out.replace('"', "&quot;") if attribute else out


def block(e: dict[str, Any]) -> str:
    return (
        f'<memory uri="{esc(e["uri"], True)}" type="{esc(e["category"], True)}" '
        f'score="{e["score"]:.2f}" detail="{e["detail"]}">\n{esc(e["text"])}\n</memory>'
    )


def check_budget(res: dict[str, Any], max_tokens: int) -> None:
    entries, stats = res["entries"], res["stats"]
    blocks = [block(e) for e in entries]
    assert res["rendered"] == "\n".join(blocks)
    costs = [estimate(b + "\n") for b in blocks]
    assert [e["tokens"] for e in entries] == costs
    assert stats["used_tokens"] == sum(costs) <= max_tokens == stats["max_tokens"]
    assert estimate(res["rendered"]) <= stats["used_tokens"]
    assert stats["returned"] == len(entries)
    assert sum(stats["tier_counts"].values()) == len(entries)
    for e in entries:
        assert e["detail"] in {"uri", "abstract", "overview", "full"}
        assert (e["text"] == "") == (e["detail"] == "uri")
        assert not e["uri"].endswith((".abstract.md", ".overview.md"))
        assert e["uri"] not in PRESETS


def ctx(
    c: SyncHTTPClient, query: str, *, session_id: str | None = None, limit: int = 10, **options: Any
) -> dict[str, Any]:
    res: dict[str, Any] = c.search_context(
        query, session_id=session_id, limit=limit, options=options or None
    )
    return res


def wait_task(c: SyncHTTPClient, task_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        task = c.get_task(task_id)
        if task and task["status"] in {"completed", "failed", "cancelled"}:
            return dict(task)
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} did not finish")


def populate(c: SyncHTTPClient, *, with_commit: bool) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if with_commit:
        s = c.session("history")
        s.add_message("user", "Hi! My name is Alice Martin and I work at Acme Robotics.")
        s.add_message("assistant", "Nice to meet you, Alice.")
        s.add_message("user", "I prefer green tea over coffee in the morning.")
        s.add_message("assistant", "Noted: green tea.")
        res = s.commit()
        assert wait_task(c, res["task_id"])["status"] == "completed"
        found["diff"] = json.loads(c.read(res["archive_uri"] + "/memory_diff.json"))
    for uri, text in {**MEMORIES, **RESOURCES, **SKILL_FILES}.items():
        c.write(uri, text, wait=True)
    c.wait_processed()
    return found


@pytest.fixture(scope="module")
def kb(dev_server: SkaldServer) -> Iterator[SyncHTTPClient]:
    c = make_client(dev_server.url, account="ctx-" + uuid.uuid4().hex[:8], user="alice")
    c.committed = populate(c, with_commit=True)
    yield c
    c.close()


@pytest.fixture
def raw(dev_server: SkaldServer, kb: SyncHTTPClient) -> Iterator[httpx.Client]:
    account = kb._async_client._account
    headers = {"X-OpenViking-Account": account, "X-OpenViking-User": "alice"}
    with httpx.Client(base_url=dev_server.url, headers=headers, timeout=60) as h:
        yield h


# --------------------------------------------------------------------------------------------
# shape, budgets and tiers


def test_result_shape_and_token_accounting(kb: SyncHTTPClient) -> None:
    res = ctx(kb, "how do I roll back a deploy")
    assert set(res) == {"entries", "rendered", "digest", "stats"}
    assert res["entries"] and res["digest"] == ""
    check_budget(res, 1600)
    for e in res["entries"]:
        assert set(e) >= {"uri", "category", "score", "detail", "text", "origin"}
        assert e["category"] in {
            "events",
            "entities",
            "preferences",
            "experiences",
            "memories",
            "resources",
            "skills",
        }
    scores = [e["score"] for e in res["entries"]]
    assert scores == sorted(scores, reverse=True)
    stats = res["stats"]
    for key in (
        "searched",
        "candidates",
        "returned",
        "dropped",
        "deduped",
        "max_tokens",
        "used_tokens",
        "per_entry_cap",
        "detail",
        "tier_counts",
        "fill",
        "query_expansion",
        "rewrite",
        "rewrite_usage",
        "excluded",
        "dedup",
        "ignored",
    ):
        assert key in stats, key
    assert stats["query_expansion"] == "no_session" and stats["rewrite"] == "off"
    assert stats["dedup"] == {"turns": 0, "status": "off", "turn": None, "cooled": 0}
    assert stats["per_entry_cap"] == 1600 * 2 // stats["selected"]
    assert len(res["entries"]) <= 10  # limit 10 (the SDK's default)
    assert "retrieval_errors" not in stats


@pytest.mark.parametrize("detail", [None, "abstract", "full", {"resources": "full"}])
@pytest.mark.parametrize("max_tokens", [64, 150, 400, 1600, 8000])
def test_budget_is_never_exceeded(
    kb: SyncHTTPClient, max_tokens: int, detail: str | dict[str, str] | None
) -> None:
    options: dict[str, Any] = {"max_tokens": max_tokens, "purpose": "coding"}
    if detail is not None:
        options["detail"] = detail
    res = ctx(kb, "deploy rollback", **options)
    check_budget(res, max_tokens)
    assert res["entries"]  # the best entry always fits at least as a bare uri
    for e in res["entries"]:
        if e["detail"] == "full" and e["category"] != "skills":
            assert e["text"] == kb.read(e["uri"]).strip()  # whole file, never cut
        if e["category"] == "skills" and e["detail"] == "full":
            assert e["text"] == SKILL_FILES[f"{SKILL}/SKILL.md"].strip()
    if detail == "abstract":
        assert {e["detail"] for e in res["entries"]} <= {"uri", "abstract"}


def test_tiers_fall_back_instead_of_truncating(kb: SyncHTTPClient) -> None:
    guide = "viking://resources/guide/deploy.md"
    full = kb.read(guide).strip()
    assert estimate(full) > 1500
    only: dict[str, Any] = {"filter": {"op": "must", "field": "uri", "conds": [guide]}}
    small = ctx(kb, "deploy guide", max_tokens=1500, detail={"resources": "full"}, **only)
    check_budget(small, 1500)
    (entry,) = small["entries"]
    assert entry["uri"] == guide and entry["detail"] in {"uri", "abstract", "overview"}
    assert entry["text"] != full[: len(entry["text"])] or entry["text"] == ""
    big = ctx(kb, "deploy guide", max_tokens=8000, detail={"resources": "full"}, **only)
    (entry,) = big["entries"]
    assert entry["detail"] == "full" and entry["text"] == full
    # auto: documents stop at their outline (heading tree + first paragraph)
    auto = ctx(kb, "deploy guide", max_tokens=8000, **only)
    (entry,) = auto["entries"]
    assert entry["detail"] == "overview"
    assert "- Rollback" in entry["text"] and "How to deploy services" in entry["text"]
    # the fallback is the outline itself, the same text the overview tier gives
    (fallback,) = small["entries"]
    if fallback["detail"] == "overview":
        assert fallback["text"] == entry["text"]


def test_category_default_tiers(kb: SyncHTTPClient) -> None:
    # a budget too small for deepening: events start at their summary, others at abstracts
    res = ctx(
        kb,
        "rocket launch apollo editor",
        max_tokens=400,
        quotas={"events": 1, "entities": 1, "preferences": 1},
    )
    check_budget(res, 400)
    by_cat = {e["category"]: e for e in res["entries"]}
    event = by_cat["events"]
    assert event["detail"] in {"overview", "full"}
    if event["detail"] == "overview":
        assert event["text"] == "Alice watched the rocket launch with her robotics team."
    generous = ctx(
        kb,
        "rocket launch apollo editor",
        max_tokens=4000,
        quotas={"events": 1, "entities": 1, "preferences": 1},
    )
    assert all(e["detail"] == "full" for e in generous["entries"])
    assert generous["stats"]["tier_counts"]["full"] == len(generous["entries"])


# --------------------------------------------------------------------------------------------
# retrieval shape: quotas, purposes, skills, navigation directories


def test_quotas_shape_the_entries(kb: SyncHTTPClient) -> None:
    res = ctx(kb, "deploy", quotas={"resources": 2})
    assert res["entries"] and len(res["entries"]) <= 2
    assert {e["category"] for e in res["entries"]} == {"resources"}
    assert set(res["stats"]["searched"]) == {"resources"}
    assert "limit" in res["stats"]["ignored"]
    res = ctx(kb, "deploy", quotas={"preferences": 1, "experiences": 1, "skills": 0})
    cats = sorted(e["category"] for e in res["entries"])
    assert cats == ["experiences", "preferences"]
    # places a bucket cannot fill go to the best remaining hits of the other buckets
    res = ctx(kb, "deploy", quotas={"skills": 3, "experiences": 1})
    cats = [e["category"] for e in res["entries"]]
    assert cats.count("skills") == 1 and len(cats) <= 4 and "experiences" in cats
    assert set(cats) <= {"skills", "experiences"}
    # every bucket disabled: nothing at all
    res = ctx(kb, "deploy", quotas={"events": 0})
    assert res["entries"] == [] and res["rendered"] == ""


def test_purposes_are_presets(kb: SyncHTTPClient) -> None:
    chat = ctx(kb, "deploy rollback", purpose="chat")
    coding = ctx(kb, "deploy rollback", purpose="coding")
    assert chat["stats"]["quotas"] == {
        "events": 3,
        "entities": 3,
        "preferences": 1,
        "experiences": 1,
        "resources": 1,
        "skills": 1,
    }
    assert coding["stats"]["quotas"] == {
        "events": 1,
        "entities": 2,
        "preferences": 1,
        "experiences": 1,
        "resources": 3,
        "skills": 2,
    }
    for res in (chat, coding):
        assert len(res["entries"]) <= 10
        assert "memories" not in {e["category"] for e in res["entries"]}  # global only
        check_budget(res, 1600)
    count = sum(e["category"] == "resources" for e in coding["entries"])
    assert count >= min(3, coding["stats"]["searched"]["resources"], 2)
    # explicit quotas win over the purpose
    res = ctx(kb, "deploy rollback", purpose="chat", quotas={"skills": 1})
    assert [e["category"] for e in res["entries"]] == ["skills"]
    assert "purpose" in res["stats"]["ignored"]


def test_skill_package_is_one_entry(kb: SyncHTTPClient) -> None:
    res = ctx(
        kb,
        "rollback script deploy helper",
        limit=20,
        context_type="skill",
        detail="full",
        max_tokens=4000,
    )
    uris = [e["uri"] for e in res["entries"]]
    assert uris == [f"{SKILL}/SKILL.md"]
    res = ctx(kb, "rollback script deploy helper", context_type="skill", detail="abstract")
    assert res["entries"][0]["text"] == "Deploys services and rolls them back safely."


def test_preset_directories_are_never_entries(kb: SyncHTTPClient) -> None:
    for query in ("memories resources skills", "", "user space agent skills preferences"):
        res = ctx(kb, query, limit=50, max_tokens=32000)
        check_budget(res, 32000)
        assert res["entries"]
        for e in res["entries"]:
            # memory directories (types, dates, names) are listings: only files are entries
            assert not e["uri"].startswith(f"{ME}/memories") or e["uri"].endswith(".md")


def test_global_retrieval_uses_the_catch_all_and_commit_memories(kb: SyncHTTPClient) -> None:
    res = ctx(kb, "flaky smoke test cold caches", limit=5)
    assert any(e["category"] == "memories" and "flaky" in e["uri"] for e in res["entries"])
    committed = kb.committed["diff"]["operations"]["adds"]
    pref = next(op["uri"] for op in committed if op["memory_type"] == "preferences")
    res = ctx(kb, "what does the user like to drink in the morning", limit=5)
    assert pref in [e["uri"] for e in res["entries"]]


def test_filters_pass_through(kb: SyncHTTPClient) -> None:
    res = ctx(kb, "deploy", context_type="resource", limit=20)
    assert res["entries"] and {e["category"] for e in res["entries"]} == {"resources"}
    res = ctx(kb, "deploy", until="2000-01-01")
    assert res["entries"] == []
    res = ctx(kb, "deploy", score_threshold=0.99999)
    assert all(e["score"] >= 0.99999 for e in res["entries"] if e["origin"] == "self")
    res = ctx(kb, "deploy", tags=["memory_type=experiences"], limit=20)
    assert {e["category"] for e in res["entries"]} == {"experiences"}


# --------------------------------------------------------------------------------------------
# exclusion, dedup, peers


def test_exclude_uris_remove_subtrees(kb: SyncHTTPClient) -> None:
    res = ctx(
        kb,
        "deploy",
        limit=30,
        exclude_uris=["viking://resources/guide", "viking://~/memories/preferences"],
    )
    uris = [e["uri"] for e in res["entries"]]
    assert uris and not any(u.startswith("viking://resources/guide") for u in uris)
    assert not any(u.startswith(f"{ME}/memories/preferences") for u in uris)
    assert res["stats"]["excluded"] == 2
    # excluding a skill's entry excludes the whole package
    res = ctx(kb, "rollback script deploy helper", limit=30, exclude_uris=[f"{SKILL}/SKILL.md"])
    assert not any(e["uri"].startswith(SKILL) for e in res["entries"])
    with pytest.raises(OpenVikingError) as exc:
        ctx(kb, "deploy", exclude_uris=["/not/a/uri"])
    assert exc.value.code in {"INVALID_URI", "INVALID_ARGUMENT"}


def test_dedup_cools_across_turns(kb: SyncHTTPClient) -> None:
    kb.create_session("dedup-1")
    seen: list[set[str]] = []
    for turn in range(1, 5):
        res = ctx(kb, "deploy", limit=2, session_id="dedup-1", dedup_turns=2)
        uris = {e["uri"] for e in res["entries"]}
        assert uris, turn
        dedup = res["stats"]["dedup"]
        assert dedup["status"] == "ok" and dedup["turn"] == turn and dedup["turns"] == 2
        for previous in seen[-2:]:
            assert not uris & previous  # returned in one of the last two turns: cooled
        if turn > 1:
            assert dedup["cooled"] > 0
        seen.append(uris)
    # the ledger lives with the session, hidden
    assert "recall_log" not in json.dumps(kb.ls("viking://~/sessions/dedup-1"))
    # without dedup_turns nothing cools
    res = ctx(kb, "deploy", limit=2, session_id="dedup-1")
    assert res["stats"]["dedup"]["status"] == "off"
    assert {e["uri"] for e in res["entries"]} == seen[0]
    # a skill package cools as a whole
    kb.create_session("dedup-2")
    first = ctx(kb, "rollback script", context_type="skill", dedup_turns=5, session_id="dedup-2")
    assert [e["uri"] for e in first["entries"]] == [f"{SKILL}/SKILL.md"]
    again = ctx(
        kb, "rollback script python", context_type="skill", dedup_turns=5, session_id="dedup-2"
    )
    assert again["entries"] == [] and again["stats"]["dedup"]["cooled"] == 1
    # an unknown session: no cooling, reported
    res = ctx(kb, "deploy", dedup_turns=2, session_id="no-such-session")
    assert res["stats"]["dedup"]["status"] == "no_session" and res["entries"]


def test_peer_scope_and_penalty(kb: SyncHTTPClient, dev_server: SkaldServer) -> None:
    bob = f"{ME}/peers/bob/memories/preferences/bob/drinks.md"
    q = "espresso before deploy rollback drill"
    res = ctx(kb, q, limit=20)
    (entry,) = [e for e in res["entries"] if e["uri"] == bob]
    assert entry["origin"] == "peer:bob" and entry["category"] == "preferences"
    full = ctx(kb, q, limit=20, other_peer_penalty=1.0)
    (unpenalised,) = [e for e in full["entries"] if e["uri"] == bob]
    assert entry["score"] == pytest.approx(unpenalised["score"] * 0.02, abs=2e-4)
    per_cat = ctx(kb, q, limit=20, other_peer_penalty={"preferences": 0.5})
    (half,) = [e for e in per_cat["entries"] if e["uri"] == bob]
    assert half["score"] == pytest.approx(unpenalised["score"] * 0.5, abs=2e-4)
    res = ctx(kb, q, limit=20, peer_scope="actor")
    assert not any("/peers/" in e["uri"] for e in res["entries"])
    account = kb._async_client._account
    as_bob = make_client(dev_server.url, account=account, user="alice", actor_peer_id="bob")
    as_carol = make_client(dev_server.url, account=account, user="alice", actor_peer_id="carol")
    try:
        res = ctx(as_bob, q, limit=20, peer_scope="actor")
        (mine,) = [e for e in res["entries"] if e["uri"] == bob]
        assert mine["origin"] == "self" and mine["score"] == unpenalised["score"]
        res = ctx(as_carol, q, limit=20, peer_scope="actor")
        assert not any("/peers/" in e["uri"] for e in res["entries"])
        res = ctx(as_carol, q, limit=20)  # "all": other peers are swept, demoted
        assert [e["origin"] for e in res["entries"] if e["uri"] == bob] == ["peer:bob"]
    finally:
        as_bob.close()
        as_carol.close()


# --------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize(
    "body",
    [
        {"quotas": {"bogus": 1}},
        {"quotas": {"memories": 1}},
        {"quotas": {"events": -1}},
        {"quotas": {"events": 51}},
        {"quotas": {"events": "many"}},
        {"dedup_turns": 2},  # needs a session_id
        {"dedup_turns": 101, "session_id": "s"},
        {"dedup_turns": -1, "session_id": "s"},
        {"detail": "everything"},
        {"detail": {"bogus": "full"}},
        {"detail": {"resources": "everything"}},
        {"max_tokens": 63},
        {"max_tokens": 32001},
        {"rewrite_max_bullets": 0},
        {"rewrite_max_bullets": 21},
        {"rewrite": "sometimes"},
        {"purpose": "gaming"},
        {"peer_scope": "nobody"},
        {"query_expansion": "always"},
        {"other_peer_penalty": 2},
        {"other_peer_penalty": -0.5},
        {"other_peer_penalty": {"bogus": 0.5}},
        {"exclude_uris": [f"viking://resources/x{i}" for i in range(201)]},
        {"exclude_uris": ["viking://nope/x"]},
        {"exclude_uris": ["viking://"]},
        {"target_uri": "viking://resources"},
        {"read_content": True},
        {"session_id": "bad/id"},
        {"since": "not-a-time"},
        {"filter": {"op": "bogus"}},
        {"level": 7},
    ],
)
def test_validation_answers_400(raw: httpx.Client, body: dict[str, Any]) -> None:
    r = raw.post("/api/v1/search/search", json={"query": "deploy", "mode": "context", **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] in {"INVALID_ARGUMENT", "INVALID_URI", "INVALID_FILTER"}


def test_context_fields_are_rejected_in_list_mode(kb: SyncHTTPClient, raw: httpx.Client) -> None:
    for field_name, value in (
        ("max_tokens", 100),
        ("quotas", {"events": 1}),
        ("dedup_turns", 0),
        ("rewrite", False),
        ("purpose", "chat"),
    ):
        r = raw.post("/api/v1/search/search", json={"query": "x", field_name: value})
        assert r.status_code == 400, field_name
    with pytest.raises(InvalidArgumentError):
        kb.search_context("deploy", target_uri="viking://resources")
    with pytest.raises(InvalidArgumentError):
        kb.search("deploy", options={"extra": {"max_tokens": 100}})


def test_ignored_fields_are_reported(raw: httpx.Client) -> None:
    r = raw.post(
        "/api/v1/search/search",
        json={
            "query": "deploy",
            "mode": "context",
            "level": 2,
            "limit": 3,
            "quotas": {"resources": 1},
        },
    )
    assert r.status_code == 200
    assert set(r.json()["result"]["stats"]["ignored"]) == {"level", "limit"}


def test_rewrite_without_llm(kb: SyncHTTPClient) -> None:
    res = ctx(kb, "deploy", rewrite=True)
    assert res["stats"]["rewrite"] == "unavailable" and res["digest"] == ""
    assert res["rendered"]
    assert ctx(kb, "deploy", rewrite="auto")["stats"]["rewrite"] == "skipped"
    kb.create_session("no-llm")
    kb.add_message("no-llm", "user", "we were talking about deploys")
    res = ctx(kb, "deploy", session_id="no-llm")
    assert res["stats"]["query_expansion"] == "unavailable"
    res = ctx(kb, "deploy", query_expansion="off", session_id="no-llm")
    assert res["stats"]["query_expansion"] == "off"


# --------------------------------------------------------------------------------------------
# a scripted OpenAI-compatible LLM for rewrite and query expansion


@dataclass
class FakeLLM:
    """Answers the rewrite and expansion prompts from a script; everything else (summaries,
    memory extraction) gets a 400 so the server falls back at once."""

    rewrite: list[tuple[str, Any]] = field(default_factory=list)
    expand: list[tuple[str, Any]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def answer(self, body: dict[str, Any]) -> tuple[int, str, float]:
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"]
        kind: str
        arg: Any
        if "condense retrieved context" in system:
            self.calls.append("rewrite")
            kind, arg = self.rewrite.pop(0) if self.rewrite else ("cite", None)
        elif "help a retrieval system" in system:
            self.calls.append("expand")
            kind, arg = self.expand.pop(0) if self.expand else ("error", 400)
        else:
            return 400, "", 0.0
        if kind == "error":
            return int(arg), "", 0.0
        if kind == "sleep":
            return 200, "- too late [viking://resources]", float(arg)
        if kind == "cite":
            uris = re.findall(r'<memory uri="([^"]+)"', user)
            lines = ["- an unsupported claim without any citation"]
            lines += [f"- fact number {i} [{u}]" for i, u in enumerate(uris)]
            return 200, "\n".join(lines), 0.0
        return 200, str(arg), 0.0


@pytest.fixture(scope="module")
def llm_kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SyncHTTPClient, FakeLLM]]:
    fake = FakeLLM()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, text, delay = fake.answer(body)
            time.sleep(delay)
            payload = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": text}}]}
            ).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up waiting (timeout tests)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    data: Path = tmp_path_factory.mktemp("ctx-llm") / "data"
    server = SkaldServer(
        data,
        env={
            "SKALD_LLM_BASE_URL": f"http://127.0.0.1:{httpd.server_address[1]}",
            "SKALD_LLM_MODEL": "fake",
            "SKALD_LLM_TIMEOUT_S": "2",
        },
    )
    server.start()
    c = make_client(server.url, account="llm", user="alice")
    try:
        populate(c, with_commit=False)
        yield c, fake
    finally:
        c.close()
        server.stop()
        httpd.shutdown()


def test_rewrite_digest_cites_entries(llm_kb: tuple[SyncHTTPClient, FakeLLM]) -> None:
    c, fake = llm_kb
    fake.rewrite[:] = [("cite", None)]
    res = ctx(c, "deploy rollback", rewrite=True, rewrite_max_bullets=2)
    stats = res["stats"]
    assert stats["rewrite"] == "ok", stats
    bullets = res["digest"].splitlines()
    assert len(bullets) == 2 and all(b.startswith("- fact number") for b in bullets)
    uris = {e["uri"] for e in res["entries"]}
    assert all(any(u in b for u in uris) for b in bullets)
    assert res["rendered"] and res["entries"]  # the block stays next to the digest
    check_budget(res, 1600)
    usage = stats["rewrite_usage"]
    assert usage["input_tokens"] > 0 and usage["digest_tokens"] == estimate(res["digest"])
    # auto: only when the block is over half the budget
    calls = len(fake.calls)
    res = ctx(c, "deploy rollback", rewrite="auto", max_tokens=32000)
    assert res["stats"]["rewrite"] == "skipped" and len(fake.calls) == calls
    fake.rewrite[:] = [("cite", None)]
    res = ctx(c, "deploy rollback", rewrite="auto", max_tokens=300)
    assert res["stats"]["rewrite"] == "ok" and fake.calls[-1] == "rewrite"


def test_rewrite_failures_keep_the_block(llm_kb: tuple[SyncHTTPClient, FakeLLM]) -> None:
    c, fake = llm_kb
    fake.rewrite[:] = [("error", 400)]
    res = ctx(c, "deploy rollback", rewrite=True)
    assert res["stats"]["rewrite"] == "failed" and res["digest"] == "" and res["rendered"]
    check_budget(res, 1600)
    fake.rewrite[:] = [("text", "Here is a summary without bullets or citations.")]
    res = ctx(c, "deploy rollback", rewrite=True)
    assert res["stats"]["rewrite"] == "failed" and res["rendered"]
    fake.rewrite[:] = [("sleep", 5)]
    started = time.monotonic()
    res = ctx(c, "deploy rollback", rewrite=True)
    assert time.monotonic() - started < 4.5  # the 2 s LLM timeout, not the 5 s answer
    assert res["stats"]["rewrite"] == "failed" and res["rendered"]
    assert res["stats"]["rewrite_usage"]["error"] == "timeout"


def test_no_relevant_answer_empties_and_records_nothing(
    llm_kb: tuple[SyncHTTPClient, FakeLLM],
) -> None:
    c, fake = llm_kb
    c.create_session("quiet")
    baseline = ctx(c, "deploy rollback", limit=3)
    fake.rewrite[:] = [("text", "NO_RELEVANT_MEMORY")]
    res = ctx(
        c,
        "deploy rollback",
        limit=3,
        rewrite=True,
        dedup_turns=3,
        query_expansion="off",
        session_id="quiet",
    )
    assert res["stats"]["rewrite"] == "no_relevant"
    assert res["entries"] == [] and res["rendered"] == "" and res["digest"] == ""
    assert res["stats"]["used_tokens"] == 0 and res["stats"]["dedup"]["turn"] is None
    # nothing was cooled: the next turn returns the same entries and is turn 1
    res = ctx(
        c, "deploy rollback", limit=3, dedup_turns=3, query_expansion="off", session_id="quiet"
    )
    assert [e["uri"] for e in res["entries"]] == [e["uri"] for e in baseline["entries"]]
    assert res["stats"]["dedup"]["turn"] == 1 and res["stats"]["dedup"]["cooled"] == 0


def test_query_expansion(llm_kb: tuple[SyncHTTPClient, FakeLLM]) -> None:
    c, fake = llm_kb
    c.create_session("talk")
    c.add_message("talk", "user", "We were discussing the Apollo forklift project.")
    c.add_message("talk", "assistant", "Yes, and its nightly deploys.")
    fake.expand[:] = [
        (
            "text",
            json.dumps(
                {"queries": ["apollo forklift deploy", "helix editor", "what next?", "one", "two"]}
            ),
        )
    ]
    res = ctx(c, "what next?", session_id="talk")
    stats = res["stats"]
    assert stats["query_expansion"] == "used"
    # at most 3 expansions, the original query first, duplicates of it dropped
    assert stats["queries"] == ["what next?", "apollo forklift deploy", "helix editor", "one"]
    assert any("apollo" in e["uri"] for e in res["entries"])
    fake.expand[:] = [("error", 400)]
    res = ctx(c, "what next?", session_id="talk")
    assert res["stats"]["query_expansion"] == "failed"
    assert res["stats"]["queries"] == ["what next?"]
    fake.expand[:] = [("sleep", 5)]
    started = time.monotonic()
    res = ctx(c, "what next?", session_id="talk")
    assert res["stats"]["query_expansion"] == "timeout" and time.monotonic() - started < 4.5
    res = ctx(c, "what next?")
    assert res["stats"]["query_expansion"] == "no_session"
