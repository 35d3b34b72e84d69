"""Observer, debug, stats, the consistency check, recall and /metrics against a live server,
through openviking-sdk where it has a call for the route and httpx otherwise."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient

from tests.api.conftest import ROOT_KEY, make_client
from tests.support.server import SkaldServer

COMPONENTS = ("queue", "vikingdb", "models", "lock", "retrieval", "filesystem")


@pytest.fixture
def http(dev_server: SkaldServer, account: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=dev_server.url,
        timeout=60,
        headers={"X-OpenViking-Account": account, "X-OpenViking-User": "alice"},
    ) as c:
        yield c


@pytest.fixture
def alice(dev_server: SkaldServer, account: str) -> Iterator[SyncHTTPClient]:
    c = make_client(dev_server.url, account=account, user="alice")
    yield c
    c.close()


def result(resp: httpx.Response, status: int = 200) -> Any:
    assert resp.status_code == status, resp.text
    body = resp.json()
    return body["result"] if status == 200 else body["error"]


def write(http: httpx.Client, uri: str, content: str) -> None:
    result(http.post("/api/v1/content/write", json={"uri": uri, "content": content}))


def wait(http: httpx.Client) -> None:
    result(http.post("/api/v1/system/wait", json={}))


def pipe_rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.strip().startswith("|")
    ]


# -------------------------------------------------------------------------------- observer


def test_system_status_has_every_component_with_real_numbers(
    alice: SyncHTTPClient, http: httpx.Client, account: str
) -> None:
    write(http, "viking://resources/obs/a.md", "# A\n\nalpha text\n")
    wait(http)
    status = alice.get_status()
    assert status["is_healthy"] is True and status["errors"] == []
    assert set(status["components"]) == set(COMPONENTS)
    for name, comp in status["components"].items():
        assert comp["name"] == name and comp["is_healthy"] is True, comp
        assert isinstance(comp["status"], str) and comp["status"]
    assert alice.is_healthy() is True
    # Skald's own summary stays alongside
    assert status["healthy"] is True and status["backend"] == "local"
    assert "Semantic" in status["queues"]

    vikingdb = pipe_rows(status["components"]["vikingdb"]["status"])
    assert vikingdb[0] == ["Collection", "Index Count", "Vector Count", "Status"]
    total = next(r for r in vikingdb if r[0] == "TOTAL")
    # a.md, obs's abstract and overview, resources' abstract and overview
    assert int(total[2]) == result(http.get("/api/v1/debug/vector/count"))["count"] >= 3
    assert f"Account: {account}" in status["components"]["vikingdb"]["status"]


def test_each_component_route_as_table_and_json(alice: SyncHTTPClient, http: httpx.Client) -> None:
    queue = alice.queue_status()
    rows = pipe_rows(queue["status"])
    assert rows[0] == [
        "Queue",
        "Pending",
        "In Progress",
        "Processed",
        "Requeued",
        "Errors",
        "Total",
    ]
    assert [r[0] for r in rows[1:]] == [
        "Semantic",
        "SessionCommit",
        "AutoCommit",
        "Fetch",
        "Purge",
        "TOTAL",
    ]
    as_json = alice.queue_status(format="json")["status"]
    assert [q["name"] for q in as_json["queues"]] == [
        "Semantic",
        "SessionCommit",
        "AutoCommit",
        "Fetch",
        "Purge",
    ]
    assert set(as_json["summary"]) == {
        "pending",
        "in_progress",
        "processed",
        "requeued",
        "errors",
        "total",
    }

    models = alice.models_status()["status"]
    assert "VLM Models:" in models and "Embedding Models:" in models
    assert "all-MiniLM-L6-v2-int8" in models
    assert alice.models_status(format="json")["status"]["embedding"] == [
        {"model": "all-MiniLM-L6-v2-int8", "provider": "onnx"}
    ]
    db = alice.vikingdb_status(format="json")["status"]
    assert db["backend"] == "embedded" and db["dimension"] == 384
    assert db["vector_count"] == result(http.get("/api/v1/debug/vector/count"))["count"]

    lock = result(http.get("/api/v1/observer/lock"))
    assert lock["is_healthy"] and "No active locks" in lock["status"]
    assert result(http.get("/api/v1/observer/lock", params={"format": "json"}))["status"] == {
        "active_locks": 0,
        "waiting_locks": 0,
        "stale_locks_removed": 0,
        "conflict_count": 0,
    }
    fs = result(http.get("/api/v1/observer/filesystem", params={"format": "json"}))["status"]
    assert "viking://resources" in fs["mounts"] and fs["store"] == "local directory"

    bad = result(http.get("/api/v1/observer/queue", params={"format": "xml"}), 400)
    assert bad["code"] == "INVALID_ARGUMENT"


def test_retrieval_and_filesystem_counters_move_with_requests(http: httpx.Client) -> None:
    def counters() -> tuple[int, int, int]:
        ret = result(http.get("/api/v1/observer/retrieval", params={"format": "json"}))
        fs = result(http.get("/api/v1/observer/filesystem", params={"format": "json"}))
        return (
            ret["status"]["total_queries"],
            ret["status"]["rejected_queries"],
            fs["status"]["total_operations"],
        )

    queries, rejected, ops = counters()
    result(http.post("/api/v1/search/find", json={"query": "alpha"}))
    result(http.post("/api/v1/search/find", json={"query": "x", "limit": 0}), 400)
    result(http.get("/api/v1/fs/ls", params={"uri": "viking://resources"}))
    after = counters()
    # other tests share the server: at least ours were counted
    assert after[0] >= queries + 2 and after[1] >= rejected + 1 and after[2] >= ops + 1
    table = result(http.get("/api/v1/observer/retrieval"))["status"]
    assert {r[0] for r in pipe_rows(table)} >= {"Total Queries", "Total Errors", "Zero-Result Rate"}
    as_json = result(http.get("/api/v1/observer/retrieval", params={"format": "json"}))
    assert 0.0 <= as_json["status"]["zero_result_rate"] <= 1.0


def test_debug_health_and_root_key_reach_the_observer(key_server: SkaldServer) -> None:
    root = {"X-API-Key": ROOT_KEY}
    with httpx.Client(base_url=key_server.url, timeout=30) as c:
        assert result(c.get("/api/v1/debug/health", headers=root)) == {"healthy": True}
        assert result(c.get("/api/v1/observer/system", headers=root))["is_healthy"] is True
        # the root key reads no tenant data: index views are refused
        err = result(c.get("/api/v1/debug/vector/count", headers=root), 403)
        assert err["code"] == "PERMISSION_DENIED"
        assert result(c.get("/api/v1/debug/health"), 401)["code"] == "UNAUTHENTICATED"


def test_a_wait_that_runs_out_of_time_is_an_error_and_the_work_goes_on(
    alice: SyncHTTPClient, http: httpx.Client
) -> None:
    # A wait that ended at its limit once answered 200 with the counters, and a client (the
    # SDK's wait_processed; the `ov` binary calls the same route) took the queue for done.
    folder = "viking://resources/wait-limit"
    alice.mkdir(folder)
    alice.batch_write(
        folder,
        [
            {
                "uri": f"{folder}/note{i:03d}.md",
                "content": f"# Note {i}\n\n" + f"keeper {i} of the lighthouse on the reef. " * 30,
            }
            for i in range(120)
        ],
        wait=False,
    )
    err = result(http.post("/api/v1/system/wait", params={"timeout": 0}), 504)
    assert err["code"] == "DEADLINE_EXCEEDED"
    assert err["details"]["timeout_s"] == 0
    assert err["details"]["pending"] + err["details"]["in_progress"] >= 1
    assert "wait again" in err["message"]
    # The work went on: the next wait sees it done, and find sees every note.
    done = alice.wait_processed()
    assert all(q["pending"] == 0 and q["in_progress"] == 0 for q in done.values()), done
    hits = alice.find("keeper of the lighthouse on the reef", target_uri=folder, limit=200)
    assert len({h["uri"] for h in hits["resources"] if h["uri"].endswith(".md")}) == 120
    for bad in ("-1", "nan", "inf"):
        assert (
            result(http.post("/api/v1/system/wait", params={"timeout": bad}), 400)["code"]
            == "INVALID_ARGUMENT"
        )


# ---------------------------------------------------------------------------- debug/vector


def test_vector_scroll_pages_through_the_callers_records(http: httpx.Client) -> None:
    for i in range(3):
        write(http, f"viking://resources/scroll/f{i}.md", f"file {i}\n")
    wait(http)
    scope = {"uri": "viking://resources/scroll"}
    count = result(http.get("/api/v1/debug/vector/count", params=scope))["count"]
    assert count == 5  # three files, the directory's abstract and overview
    seen: list[tuple[str, int]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {**scope, "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = result(http.get("/api/v1/debug/vector/scroll", params=params))
        assert len(page["records"]) <= 2
        seen += [(r["uri"], r["level"]) for r in page["records"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == count
    assert ("viking://resources/scroll/f1.md", 2) in seen
    assert ("viking://resources/scroll/.abstract.md", 0) in seen

    level2 = '{"op": "must", "field": "level", "conds": [2]}'
    assert (
        result(http.get("/api/v1/debug/vector/count", params={**scope, "filter": level2}))["count"]
        == 3
    )
    assert (
        result(http.get("/api/v1/debug/vector/count", params={"filter": "{nope"}), 400)["message"]
        == "Invalid filter JSON"
    )
    assert (
        result(http.get("/api/v1/debug/vector/scroll", params={"cursor": "not-a-cursor"}), 400)[
            "code"
        ]
        == "INVALID_ARGUMENT"
    )
    assert result(http.get("/api/v1/debug/vector/scroll", params={"limit": 0}), 400)


def test_vector_views_stay_inside_the_callers_account(
    dev_server: SkaldServer, http: httpx.Client
) -> None:
    write(http, "viking://resources/mine.md", "mine\n")
    wait(http)
    with httpx.Client(
        base_url=dev_server.url,
        timeout=30,
        headers={
            "X-OpenViking-Account": "other-" + str(time.time_ns()),
            "X-OpenViking-User": "bob",
        },
    ) as other:
        assert result(other.get("/api/v1/debug/vector/count"))["count"] == 0
        assert result(other.get("/api/v1/debug/vector/scroll"))["records"] == []


# ----------------------------------------------------------------------------------- stats


def test_memory_stats_count_memories_by_category(http: httpx.Client) -> None:
    empty = result(http.get("/api/v1/stats/memories"))
    assert empty["total_memories"] == 0 and set(empty["by_category"]) >= {"profile", "events"}
    write(http, "viking://user/alice/memories/preferences/tea.md", "Likes green tea.\n")
    write(http, "viking://user/alice/memories/preferences/desk.md", "Standing desk.\n")
    write(http, "viking://user/alice/memories/events/trip.md", "Went to Oslo.\n")
    wait(http)
    stats = result(http.get("/api/v1/stats/memories"))
    assert stats["total_memories"] == 3
    assert stats["by_category"]["preferences"] == 2 and stats["by_category"]["events"] == 1
    assert stats["hotness_distribution"] == {"cold": 0, "warm": 0, "hot": 3}
    assert stats["staleness"]["not_accessed_7d"] == 0
    prefs = result(http.get("/api/v1/stats/memories", params={"category": "preferences"}))
    assert prefs["by_category"] == {"preferences": 2} and prefs["total_memories"] == 2
    assert sum(prefs["hotness_distribution"].values()) == 2
    err = result(http.get("/api/v1/stats/memories", params={"category": "nope"}), 400)
    assert err["code"] == "INVALID_ARGUMENT" and "Valid categories" in err["message"]


def test_session_stats_and_detail(http: httpx.Client, alice: SyncHTTPClient) -> None:
    sid = result(http.post("/api/v1/sessions", json={}))["session_id"]
    detail = alice.get_session(sid)
    zero = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert detail["llm_token_usage"] == zero and detail["last_commit_at"] is None
    result(
        http.post(
            f"/api/v1/sessions/{sid}/messages",
            json={
                "role": "user",
                "parts": [
                    {"type": "text", "text": "I prefer tea over coffee."},
                    {
                        "type": "context",
                        "uri": "viking://resources/obs",
                        "context_type": "resource",
                        "abstract": "obs",
                    },
                    {
                        "type": "context",
                        "uri": "viking://agent/skills/s",
                        "context_type": "skill",
                        "abstract": "s",
                    },
                ],
            },
        )
    )
    result(
        http.post(
            f"/api/v1/sessions/{sid}/messages", json={"role": "assistant", "content": "Noted."}
        )
    )
    stats = result(http.get(f"/api/v1/stats/sessions/{sid}"))
    assert stats == {
        "session_id": sid,
        "total_turns": 1,
        "memories_extracted": 0,
        "contexts_used": 1,
        "skills_used": 1,
    }
    result(http.post(f"/api/v1/sessions/{sid}/commit", json={}))
    wait(http)
    committed = alice.get_session(sid)
    assert re.match(r"\d{4}-\d\d-\d\dT", committed["last_commit_at"])
    assert committed["llm_token_usage"] == zero  # the dev server runs no LLM
    after = result(http.get(f"/api/v1/stats/sessions/{sid}"))
    assert after["memories_extracted"] == committed["memories_extracted"]["total"]
    assert result(http.get("/api/v1/stats/sessions/nope"), 404)["code"] == "NOT_FOUND"


# ----------------------------------------------------------------------------- consistency


def test_consistency_reports_drift_between_storage_and_index(
    dev_server: SkaldServer, http: httpx.Client, alice: SyncHTTPClient, account: str
) -> None:
    write(http, "viking://resources/cons/a.md", "alpha\n")
    write(http, "viking://resources/cons/sub/b.md", "beta\n")
    wait(http)
    clean = alice.check_consistency("viking://resources/cons")
    assert clean["ok"] is True and clean["expected_count"] == 4  # two files, two directories
    assert clean["missing_records"] == [] and clean["orphan_records"] == []

    # Drift behind the server's back: a file appears without a job, another vanishes.
    blobs = dev_server.data_dir / "blobs" / account / "resources" / "cons"
    (blobs / "sub" / "c.md").write_text("gamma\n")
    (blobs / "a.md").unlink()
    drift = alice.check_consistency("viking://resources/cons")
    assert drift["ok"] is False
    assert drift["missing_record_count"] == 1 and drift["missing_records"] == [
        {
            "uri": "viking://resources/cons/sub/c.md",
            "path": "sub/c.md",
            "level": 2,
            "key": "sub/c.md#level=2",
        }
    ]
    assert drift["orphan_record_count"] == 1
    assert drift["orphan_records"] == ["viking://resources/cons/a.md"]

    # the check itself only reads
    assert alice.check_consistency("viking://resources/cons") == drift

    # a vectors-only reindex rebuilds the subtree's records, directories' included
    result(
        http.post(
            "/api/v1/content/reindex",
            json={"uri": "viking://resources/cons", "mode": "vectors_only", "wait": True},
        )
    )
    wait(http)
    assert alice.check_consistency("viking://resources/cons")["ok"] is True

    err = result(http.post("/api/v1/system/consistency", json={"uri": "nope://x"}), 400)
    assert err["code"] in ("INVALID_URI", "INVALID_ARGUMENT")
    missing = result(
        http.post("/api/v1/system/consistency", json={"uri": "viking://resources/none-such"})
    )
    assert missing["expected_count"] == 0 and missing["ok"] is True


# ---------------------------------------------------------------------------------- recall


def test_recall_is_a_deprecated_context_preset(http: httpx.Client) -> None:
    write(http, "viking://resources/recall/guide.md", "# Deploying\n\nShip the widget.\n")
    wait(http)
    resp = http.post(
        "/api/v1/search/recall",
        json={"query": "deploy the widget", "max_chars": 2000, "min_score": 0.0},
    )
    body = result(resp)
    assert resp.headers["Deprecation"] == "true"
    assert "successor-version" in resp.headers["Link"]
    assert body["stats"]["max_tokens"] == 500  # 2000 characters at four per token
    assert body["stats"]["deprecated"]["aliases_used"] == ["max_chars", "min_score"]
    assert any(e["uri"].startswith("viking://resources/recall") for e in body["entries"])
    assert body["rendered"]
    quiet = result(
        http.post(
            "/api/v1/search/recall",
            json={"query": "deploy the widget", "min_score": 0.0, "render": False},
        )
    )
    assert quiet["rendered"] == "" and quiet["entries"]
    assert (
        result(http.post("/api/v1/search/recall", json={"query": "x", "bogus": 1}), 400)["code"]
        == "INVALID_ARGUMENT"
    )
    assert result(http.post("/api/v1/search/recall", json={}), 400)


# --------------------------------------------------------------------------------- metrics


def test_metrics_are_scraped_by_route_template(dev_server: SkaldServer, http: httpx.Client) -> None:
    write(http, "viking://resources/metrics/m.md", "measured\n")
    wait(http)
    result(http.get("/api/v1/fs/ls", params={"uri": "viking://resources/metrics"}))
    sid = result(http.post("/api/v1/sessions", json={}))["session_id"]
    result(http.get(f"/api/v1/sessions/{sid}"))
    http.get("/no/such/path")
    text = httpx.get(f"{dev_server.url}/metrics", timeout=30).text
    assert re.search(
        r'skald_http_requests_total\{method="GET",route="/api/v1/fs/ls",'
        r'status="200"\} \d',
        text,
    )
    # a template, never the session id itself
    assert 'route="/api/v1/sessions/{session_id}"' in text and sid not in text
    assert 'route="unmatched",status="404"' in text
    assert (
        'skald_http_request_duration_seconds_bucket{le="0.005",method="POST",'
        'route="/api/v1/content/write"}' in text
    )
    assert re.search(
        r'skald_jobs_total\{kind="semantic.process",outcome="ok",'
        r'queue="semantic"\} \d',
        text,
    )
    assert 'skald_queue_depth{queue="Semantic",state="pending"} 0.0' in text


def test_metrics_need_the_root_key_in_api_key_mode(
    key_server: SkaldServer, key_admin: SyncHTTPClient
) -> None:
    with httpx.Client(base_url=key_server.url, timeout=30) as c:
        assert c.get("/metrics").status_code == 401
        scraped = c.get("/metrics", headers={"Authorization": f"Bearer {ROOT_KEY}"})
        assert scraped.status_code == 200 and "skald_http_requests_total" in scraped.text
        account = "m-" + str(time.time_ns())
        key = result(
            c.post(
                "/api/v1/admin/accounts",
                headers={"X-API-Key": ROOT_KEY},
                json={"account_id": account, "admin_user_id": "boss"},
            )
        )["user_key"]
        assert c.get("/metrics", headers={"X-API-Key": key}).status_code == 403


# ---------------------------------------------------------------------------- tool results


def test_tool_results_are_listed_read_by_range_and_searched(http: httpx.Client) -> None:
    sid = result(http.post("/api/v1/sessions", json={}))["session_id"]
    log = "".join(f"line {i}: ok\n" for i in range(200)) + "ERROR: disk full on /var\n"
    result(
        http.post(
            f"/api/v1/sessions/{sid}/messages",
            json={
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool",
                        "tool_id": "call_1",
                        "tool_name": "shell",
                        "tool_input": {"cmd": "ls"},
                        "tool_status": "running",
                    }
                ],
            },
        )
    )
    result(
        http.post(
            f"/api/v1/sessions/{sid}/messages",
            json={
                "role": "assistant",
                "parts": [
                    {"type": "text", "text": "done"},
                    {
                        "type": "tool",
                        "tool_id": "call_1",
                        "tool_name": "shell",
                        "tool_input": {"cmd": "ls"},
                        "tool_status": "completed",
                        "tool_output": log,
                    },
                    {
                        "type": "tool",
                        "tool_id": "call_2",
                        "tool_name": "search",
                        "tool_input": {"q": "é"},
                        "tool_output": "café ☕ crème",
                    },
                ],
            },
        )
    )
    base = f"/api/v1/sessions/{sid}/tool-results"
    listed = result(http.get(base))["tool_results"]
    assert [t["tool_result_id"] for t in listed] == ["call_2", "call_1"]  # newest first
    shell = listed[1]
    assert shell["tool_status"] == "completed" and shell["original_chars"] == len(log)
    assert shell["storage_uri"].endswith(f"/sessions/{sid}/tool-results/call_1")
    only = result(http.get(base, params={"tool_name": "search"}))["tool_results"]
    assert [t["tool_result_id"] for t in only] == ["call_2"]

    first = result(http.get(f"{base}/call_1", params={"limit": 100}))
    assert first["content"] == log[:100] and first["has_more"] is True
    assert first["total_chars"] == len(log) and first["metadata"]["tool_name"] == "shell"
    rest = result(
        http.get(f"{base}/call_1", params={"offset": 100, "limit": -1, "include_metadata": "false"})
    )
    assert first["content"] + rest["content"] == log and rest["has_more"] is False
    assert "metadata" not in rest or rest["metadata"] is None
    # offsets count code points, not bytes
    cafe = result(http.get(f"{base}/call_2", params={"offset": 5, "limit": 1}))
    assert cafe["content"] == "☕" and cafe["offset_unit"] == "unicode_code_point"

    found = result(http.get(f"{base}/call_1/search", params={"q": "error", "context_chars": 5}))
    assert len(found["matches"]) == 1
    match = found["matches"][0]
    assert log[match["offset"] :].startswith("ERROR") and "disk" not in match["snippet"]
    assert match["snippet"].startswith("...") and "ERROR" in match["snippet"]
    assert (
        len(result(http.get(f"{base}/call_1/search", params={"q": "line", "limit": 3}))["matches"])
        == 3
    )

    assert result(http.get(f"{base}/nope"), 404)["code"] == "NOT_FOUND"
    assert result(http.get("/api/v1/sessions/nope/tool-results"), 404)["code"] == "NOT_FOUND"
    assert result(http.get(f"{base}/call_1/search"), 400)["code"] == "INVALID_ARGUMENT"
    assert (
        result(http.get(f"{base}/call_1", params={"limit": -2}), 400)["code"] == "INVALID_ARGUMENT"
    )
