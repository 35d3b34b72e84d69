"""find / search / grep / glob through openviking-sdk on a fixture corpus."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import InvalidArgumentError, OpenVikingError

from tests.api.conftest import make_client
from tests.fixtures.corpus import DOCS, QUERIES
from tests.support.server import SkaldServer

ROOT = "viking://resources/kb"


@pytest.fixture(scope="module")
def kb(
    dev_server: SkaldServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SyncHTTPClient]:
    src = tmp_path_factory.mktemp("src") / "kb"
    for rel, text in DOCS.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    c = make_client(dev_server.url, account="retrieval", user="rita")
    c.add_resource(str(src), wait=True)
    c.write(
        "viking://~/memories/preferences/rita/tea.md",
        "Rita prefers green tea without sugar.",
        wait=True,
    )
    c.set_tags(f"{ROOT}/recipes/pasta.md", ["cuisine=italian", "meal=dinner"])
    c.set_tags(f"{ROOT}/recipes/curry.md", ["meal=dinner"])
    c.wait_processed()
    yield c
    c.close()


def files_of(result: dict[str, Any]) -> list[str]:
    hits = result["resources"] + result["memories"] + result["skills"]
    hits.sort(key=lambda h: -h["score"])
    return [h["uri"] for h in hits if h["level"] == 2]


def top3_rate(c: SyncHTTPClient, search_type: str) -> float:
    good = 0
    for query, expected in QUERIES:
        res = c.search(query, target_uri=ROOT, limit=3, options={"search_type": search_type})
        if f"{ROOT}/{expected}" in files_of(res)[:3]:
            good += 1
    return good / len(QUERIES)


def test_ranking_quality(kb: SyncHTTPClient) -> None:
    rates = {t: top3_rate(kb, t) for t in ("semantic", "keywords", "hybrid")}
    assert rates["semantic"] >= 0.9, rates
    assert rates["keywords"] >= 0.9, rates
    assert rates["hybrid"] >= max(rates["semantic"], rates["keywords"]), rates


def test_find_shape_and_grouping(kb: SyncHTTPClient) -> None:
    res = kb.find("green tea", limit=5)
    assert set(res) >= {"memories", "resources", "skills", "total"}
    mem = [h for h in res["memories"] if h["uri"].endswith("tea.md")]
    assert mem and mem[0]["context_type"] == "memory"
    assert "memory_type=preferences" in mem[0]["tags"]
    hit = res["resources"][0] if res["resources"] else res["memories"][0]
    assert set(hit) >= {"uri", "context_type", "level", "score", "abstract", "tags", "match_reason"}


def test_sidecars_are_hits_and_read_back(kb: SyncHTTPClient) -> None:
    res = kb.find("recipes", target_uri=f"{ROOT}/recipes", options={"level": [0, 1]})
    uris = {h["uri"] for h in res["resources"]}
    assert uris <= {f"{ROOT}/recipes/.abstract.md", f"{ROOT}/recipes/.overview.md"}
    assert uris
    assert "pasta.md" in kb.overview(f"{ROOT}/recipes")
    assert kb.abstract(f"{ROOT}/recipes")


def test_filters(kb: SyncHTTPClient) -> None:
    q = "dinner recipe"
    res = kb.find(q, target_uri=ROOT, options={"tags": ["meal=dinner"]})
    assert sorted(files_of(res)) == [f"{ROOT}/recipes/curry.md", f"{ROOT}/recipes/pasta.md"]
    res = kb.find(q, target_uri=ROOT, options={"tags": ["meal=dinner", "cuisine=italian"]})
    assert files_of(res) == [f"{ROOT}/recipes/pasta.md"]
    res = kb.find(
        "anything", target_uri=[f"{ROOT}/travel", f"{ROOT}/science"], limit=20, options={"level": 2}
    )
    assert {u.split("/")[4] for u in files_of(res)} == {"travel", "science"}
    res = kb.find("tea", options={"context_type": "memory"})
    assert res["resources"] == [] and res["memories"]
    res = kb.find("tea", options={"context_type": "resource,skill"})
    assert res["memories"] == []
    res = kb.find("backups", target_uri=ROOT, options={"since": "1h", "level": "2"})
    assert files_of(res)
    res = kb.find("backups", target_uri=ROOT, options={"until": "2000-01-01"})
    assert res["total"] == 0
    res = kb.find(
        "backups",
        target_uri=ROOT,
        options={
            "filter": {"op": "must", "field": "uri", "conds": [f"{ROOT}/handbook/ops/backups.md"]}
        },
    )
    assert files_of(res) == [f"{ROOT}/handbook/ops/backups.md"]
    res = kb.find("backups", target_uri=ROOT, options={"score_threshold": 0.99999})
    assert all(h["score"] >= 0.99999 for h in res["resources"])
    res = kb.find("backups", target_uri=ROOT, limit=2)
    assert res["total"] <= 2
    res = kb.find("backups", target_uri=ROOT, limit=1, options={"read_content": True})
    assert "snapshotted" in res["resources"][0]["content"] or res["resources"][0]["level"] < 2
    with pytest.raises(OpenVikingError) as exc:
        kb.find("x", options={"filter": {"op": "bogus"}})
    assert exc.value.code in {"INVALID_FILTER", "INVALID_ARGUMENT"}
    with pytest.raises(InvalidArgumentError):
        kb.find("x", options={"level": 7})
    with pytest.raises(InvalidArgumentError):
        kb.find("x", options={"since": "yesterday-ish"})


def test_filters_apply_before_ranking(kb: SyncHTTPClient) -> None:
    # the only tagged files are unrelated to the query, yet they still fill the results
    res = kb.find("black hole event horizon", target_uri=ROOT, options={"tags": ["meal=dinner"]})
    assert len(files_of(res)) == 2


def test_keywords_and_list_mode_validation(kb: SyncHTTPClient) -> None:
    res = kb.search("guanciale", options={"search_type": "keywords"})
    assert files_of(res)[0] == f"{ROOT}/recipes/pasta.md"
    with pytest.raises(InvalidArgumentError):
        kb.search("", options={"search_type": "keywords"})
    with pytest.raises(InvalidArgumentError):
        kb.search("x", options={"extra": {"max_tokens": 500}})  # context-only in list mode


def test_grep(kb: SyncHTTPClient, dev_server: SkaldServer) -> None:
    res = kb.grep(ROOT, "thirty")
    uris = {m["uri"] for m in res["matches"]}
    assert uris == {f"{ROOT}/handbook/ops/backups.md", f"{ROOT}/handbook/ops/incident-response.md"}
    assert res["count"] == res["match_count"] == 2 and res["files_scanned"] >= 20
    res = kb.grep(ROOT, "THIRTY", case_insensitive=True)
    assert res["count"] == 2
    assert kb.grep(ROOT, "THIRTY")["count"] == 0
    res = kb.grep(ROOT, "e", node_limit=3)
    assert res["count"] == 3
    with httpx.Client(
        base_url=dev_server.url,
        headers={"X-OpenViking-Account": "retrieval", "X-OpenViking-User": "rita"},
    ) as h:
        body = h.post(
            "/api/v1/search/grep",
            json={
                "uri": ROOT,
                "pattern": "thirty days",
                "before_context": 1,
                "after_context": 1,
                "exclude_uri": f"{ROOT}/handbook/people",
            },
        ).json()["result"]
        m = body["matches"][0]
        assert m["before_context"][0]["content"] == "" and m["line"] == 3
        body = h.post(
            "/api/v1/search/grep",
            json={
                "uri": ROOT,
                "pattern": "dinner|pecorino",
                "tags": ["cuisine=italian"],
                "include_tags": True,
            },
        ).json()["result"]
        assert {m["uri"] for m in body["matches"]} == {f"{ROOT}/recipes/pasta.md"}
        assert body["matches"][0]["tags"] == ["cuisine=italian", "meal=dinner"]
        body = h.post(
            "/api/v1/search/grep", json={"uri": ROOT, "pattern": "x", "level_limit": 1}
        ).json()["result"]
        assert body["files_scanned"] == 0  # every file is deeper than one level
    with pytest.raises(InvalidArgumentError):
        kb.grep(ROOT, "(unclosed")


def test_grep_keeps_line_semantics_across_line_endings(kb: SyncHTTPClient) -> None:
    """Files are searched whole before line by line: anchors, CRLF, lone CR and Unicode line
    separators must give the same matches as a plain per-line search."""
    base = f"{ROOT}/endings"
    files = {
        "lf.txt": "alpha\nbeta end\ngamma\n",
        "crlf.txt": "alpha\r\nbeta end\r\ngamma\r\n",
        "cr.txt": "alpha\rbeta end\rgamma",
        "ls.txt": "alpha\u2028beta end\u2028gamma",
    }
    for name, text in files.items():
        kb.write(f"{base}/{name}", text, wait=True)
    for pattern in ("^beta", "end$", "^beta end$"):
        res = kb.grep(base, pattern)
        assert sorted((m["uri"].rsplit("/", 1)[1], m["line"]) for m in res["matches"]) == sorted(
            (name, 2) for name in files
        ), pattern
    # A pattern able to span a newline in the whole file must not match across lines.
    res = kb.grep(base, "alpha[^x]*gamma")
    assert res["count"] == 0
    assert kb.grep(base, "^gamma$")["count"] == 4


def test_hostile_patterns_return_promptly(kb: SyncHTTPClient) -> None:
    kb.write(f"{ROOT}/evil/aaa.txt", "a" * 50_000 + "!", wait=True)
    for pattern in ["(a+)+$", "(a|aa)+$", "(.*a){20}", "^(a?){30}a{30}$"]:
        start = time.monotonic()
        with contextlib.suppress(InvalidArgumentError):
            kb.grep(f"{ROOT}/evil", pattern)
        assert time.monotonic() - start < 5, pattern
    for pattern in ["**/**/**/**/**/**/**/*a*a*a*a*a*b", "[[[[", "*" * 500]:
        start = time.monotonic()
        with contextlib.suppress(InvalidArgumentError):
            kb.glob(pattern, uri=ROOT)
        assert time.monotonic() - start < 5, pattern


def test_glob(kb: SyncHTTPClient) -> None:
    res = kb.glob("**/*.md", uri=f"{ROOT}/recipes")
    assert sorted(res["matches"]) == [f"{ROOT}/recipes/{n}.md" for n in ("bread", "curry", "pasta")]
    res = kb.glob("*.md", uri=f"{ROOT}/handbook")
    assert res["matches"] == []  # `*` stays inside one segment
    res = kb.glob("*/*.md", uri=f"{ROOT}/handbook")
    assert len(res["matches"]) == 7
    res = kb.glob("code/*.[pt][ys]", uri=ROOT)
    assert sorted(res["matches"]) == [
        f"{ROOT}/code/cache.py",
        f"{ROOT}/code/retry.py",
        f"{ROOT}/code/server.ts",
    ]
    res = kb.glob("recipes/?????.md", uri=ROOT)
    assert sorted(res["matches"]) == [
        f"{ROOT}/recipes/bread.md",
        f"{ROOT}/recipes/curry.md",
        f"{ROOT}/recipes/pasta.md",
    ]
    res = kb.glob("**/", uri=f"{ROOT}/handbook")
    assert sorted(res["matches"]) == [f"{ROOT}/handbook/{d}/" for d in ("auth", "ops", "people")]
    res = kb.glob("**/*.md", uri=ROOT, node_limit=2)
    assert res["count"] == 2


def test_rm_and_mv_leave_no_stale_hits(kb: SyncHTTPClient) -> None:
    kb.write(
        "viking://resources/moving/zebra.md", "# Zebras\n\nStriped horses of Africa.", wait=True
    )
    assert "viking://resources/moving/zebra.md" in files_of(kb.find("striped zebra"))
    kb.mv("viking://resources/moving", "viking://resources/moved")
    kb.wait_processed()
    found = files_of(kb.find("striped zebra", limit=20))
    assert "viking://resources/moved/zebra.md" in found
    assert not any(u.startswith("viking://resources/moving/") for u in found)
    kb.rm("viking://resources/moved", recursive=True)
    kb.wait_processed()
    res = kb.find("striped zebra horses", limit=50)
    assert not any("/moved/" in h["uri"] or "/moving/" in h["uri"] for h in res["resources"])
    res = kb.search("zebras", options={"search_type": "keywords"})
    assert not any("zebra" in u for u in files_of(res))


def test_reindex_rebuilds_records(kb: SyncHTTPClient) -> None:
    res = kb.reindex(f"{ROOT}/travel")
    assert res["files"] == 2
    assert f"{ROOT}/travel/japan.md" in files_of(kb.find("cherry blossoms Kyoto"))[:3]


def test_restart_keeps_the_index(tmp_path: Path) -> None:
    server = SkaldServer(tmp_path / "data")
    server.start()
    try:
        c = make_client(server.url, account="r", user="u")
        c.write("viking://resources/keep/owl.md", "# Owls\n\nNocturnal birds of prey.", wait=True)
        server.restart()
        c = make_client(server.url, account="r", user="u")
        assert files_of(c.find("nocturnal birds"))[0] == "viking://resources/keep/owl.md"
    finally:
        server.stop()


def test_long_files_are_indexed_as_sections(kb: SyncHTTPClient) -> None:
    filler = "\n".join(
        f"Paragraph {i} talks about general housekeeping of the office and nothing in particular."
        for i in range(60)
    )
    text = (
        f"# Office manual\n\n{filler}\n\n## Fire safety\n\nThe fire extinguisher hangs "
        f"next to the kitchen door; assemble in the north car park.\n\n## Plants\n\n"
        f"{filler}\n"
    )
    kb.write("viking://resources/manual/office.md", text, wait=True)
    res = kb.find(
        "where do we assemble after a fire",
        target_uri="viking://resources/manual",
        options={"level": 2},
    )
    hit = res["resources"][0]
    assert hit["uri"] == "viking://resources/manual/office.md"  # sections resolve to the file
    start, end = (int(x) for x in hit["match_reason"].split("lines ")[1].split("-"))
    lines = text.splitlines()[start - 1 : end]
    assert any("extinguisher" in line for line in lines), hit["match_reason"]
    assert len([h for h in res["resources"] if h["uri"].endswith("office.md")]) == 1


def test_event_memories_decay_with_age(kb: SyncHTTPClient) -> None:
    import json as _json

    body = "Team offsite in the mountains with hiking and a barbecue."
    kb.write("viking://~/memories/events/2020/01/01/offsite.md", body, wait=True)
    res = kb.find("team offsite hiking", options={"context_type": "memory"})
    hit = next(h for h in res["memories"] if h["uri"].endswith("offsite.md"))
    # written just now: inside the default protection window, no decay yet
    assert hit["time_score"] == 1.0 and hit["origin_score"] == hit["score"]
    res = kb.find(
        "team offsite hiking",
        options={
            "context_type": "memory",
            "events_time_decay_protection": "0",
            "until": "2999-01-01",
        },
    )
    hit = next(h for h in res["memories"] if h["uri"].endswith("offsite.md"))
    assert 0 < hit["time_score"] <= 1.0 and "origin_score" in hit
    with pytest.raises(InvalidArgumentError):
        kb.find("x", options={"events_time_decay_protection": "soon"})
    assert _json.dumps(hit)  # hits stay JSON-serialisable with the decay fields


def test_telemetry_is_in_the_envelope_only_when_asked(
    kb: SyncHTTPClient, dev_server: SkaldServer
) -> None:
    headers = {"X-OpenViking-Account": "retrieval", "X-OpenViking-User": "rita"}
    query = {"query": "how do I cook pasta", "target_uri": ROOT, "limit": 3}
    with httpx.Client(base_url=dev_server.url, headers=headers, timeout=60) as http:
        for route, operation in (
            ("/api/v1/search/find", "search.find"),
            ("/api/v1/search/search", "search.search"),
        ):
            for option in (True, {"summary": True}, {}):
                body = http.post(route, json={**query, "telemetry": option}).json()
                telemetry = body["telemetry"]
                assert len(telemetry["id"]) == 32
                summary = telemetry["summary"]
                assert (summary["operation"], summary["status"]) == (operation, "ok")
                assert isinstance(summary["duration_ms"], float)
                returned = sum(len(body["result"][k]) for k in ("memories", "resources", "skills"))
                assert summary["search"] == {
                    "search_type": "hybrid",
                    "queries": [query["query"]],
                    "candidates": summary["search"]["candidates"],
                    "returned": returned,
                }
                assert summary["search"]["candidates"] >= returned > 0
            for option in (False, {"summary": False}):
                body = http.post(route, json={**query, "telemetry": option}).json()
                assert body["status"] == "ok" and "telemetry" not in body
            listing = http.post(route, json={"target_uri": ROOT, "telemetry": True}).json()
            assert listing["telemetry"]["summary"]["search"]["search_type"] == "listing"
            for bad in ({"events": True}, {"summary": "yes"}):
                refused = http.post(route, json={**query, "telemetry": bad})
                assert refused.status_code == 400, refused.text
                assert refused.json()["error"]["code"] == "INVALID_ARGUMENT"
        skills = http.post("/api/v1/skills/find", json={"query": "pasta", "telemetry": True}).json()
        assert skills["telemetry"]["summary"]["operation"] == "skills.find"
        assert "telemetry" not in http.post("/api/v1/skills/find", json={"query": "pasta"}).json()
    # The SDK passes the option through and reads the result as ever.
    found = kb.find("how do I cook pasta", target_uri=ROOT, limit=3, options={"telemetry": True})
    assert f"{ROOT}/recipes/pasta.md" in files_of(found)
