"""Metering through openviking-sdk against a live `skald serve`: the usage series match what
the test did (requests by family, bytes up and down, bytes stored against the data directory,
records, texts embedded, LLM tokens by purpose and model with a fake model that reports
usage), the CSV export and OpenViking's console views agree with it, nothing was dropped, and
the two plan limits that read the meters (`storage_bytes`, `llm_tokens_per_day`) refuse at,
over and let through after the limit is raised (the account's settings, or the default plan
across a restart) or space is freed."""

from __future__ import annotations

import csv
import io
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient

from tests.api.conftest import ROOT_KEY
from tests.support.server import SkaldServer

MODEL = "metered-model"
FAMILIES = {
    "fs": "fs",
    "content": "fs",
    "search": "search",
    "sessions": "sessions",
    "resources": "resources",
    "skills": "skills",
    "tasks": "tasks",
    "system": "system",
    "admin": "admin",
}


class FakeLLM:
    """An OpenAI-compatible endpoint reporting `usage` per completion; counts calls by kind."""

    def __init__(self) -> None:
        self.prompt_tokens = 100
        self.completion_tokens = 10
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def answer(self, body: dict[str, Any]) -> str:
        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        schema = json.dumps((body.get("response_format") or {}).get("json_schema", {}))
        with self.lock:
            if "queries" in schema:
                self.calls["query_rewrite"] += 1
                return json.dumps({"queries": [{"query": "notes", "context_type": "resource"}]})
            if "operations" in schema:
                self.calls["extraction"] += 1
                return json.dumps({"operations": []})
            self.calls["summary"] += 1
            if "Describe this directory" in system:
                return "A directory of notes."
            return "A short note."


@pytest.fixture(scope="module")
def llm() -> Iterator[tuple[FakeLLM, str]]:
    fake = FakeLLM()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = fake.answer(body)
            usage = {
                "prompt_tokens": fake.prompt_tokens,
                "completion_tokens": fake.completion_tokens,
            }
            payload = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": text}}], "usage": usage}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield fake, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, llm: tuple[FakeLLM, str]
) -> Iterator[SkaldServer]:
    data: Path = tmp_path_factory.mktemp("metering") / "data"
    srv = SkaldServer(
        data,
        root_api_key=ROOT_KEY,
        env={
            "SKALD_LLM_BASE_URL": llm[1],
            "SKALD_LLM_MODEL": MODEL,
            "SKALD_DEFAULT_PLAN": "free",
            "SKALD_USAGE_FLUSH_S": "0.5",
        },
    )
    srv.start()
    yield srv
    srv.stop()


class Traffic:
    """What the SDK sent and received, seen by httpx's hooks: /api/v1 requests by family and
    the bytes of their bodies both ways."""

    def __init__(self) -> None:
        self.families: Counter[str] = Counter()
        self.uploaded = 0
        self.downloaded = 0

    async def on_response(self, response: httpx.Response) -> None:
        parts = response.request.url.path.split("/")
        if parts[1:3] != ["api", "v1"]:
            return
        await response.aread()
        self.families[FAMILIES.get(parts[3], "other")] += 1
        self.uploaded += int(response.request.headers.get("content-length") or 0)
        self.downloaded += len(response.content)


def new_account(srv: SkaldServer, settings: dict[str, Any] | None = None) -> tuple[str, str]:
    """A fresh account (its admin's key), created by root with `settings`."""
    account = "m-" + uuid.uuid4().hex[:8]
    body: dict[str, Any] = {"account_id": account, "admin_user_id": "ann"}
    if settings is not None:
        body["settings"] = settings
    r = httpx.post(
        srv.url + "/api/v1/admin/accounts", json=body, headers={"X-API-Key": ROOT_KEY}, timeout=30
    )
    assert r.status_code == 200, r.text
    return account, r.json()["result"]["user_key"]


def sdk(srv: SkaldServer, key: str, traffic: Traffic | None = None) -> SyncHTTPClient:
    hooks = {"response": [traffic.on_response]} if traffic is not None else None
    client = SyncHTTPClient(url=srv.url, api_key=key, timeout=120, event_hooks=hooks)
    client.initialize()
    return client


def series(srv: SkaldServer, key: str, account: str, **params: str) -> dict[str, Any]:
    r = httpx.get(
        f"{srv.url}/api/v1/admin/accounts/{account}/usage",
        params={"from": "1d", "granularity": "hour", **params},
        headers={"X-API-Key": key},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()["result"]["series"]
    return result


def summed(items: list[dict[str, Any]], unit: str, **dims: str) -> int:
    return sum(
        i["value"]
        for i in items
        if i["unit"] == unit and all(i["dims"].get(k) == v for k, v in dims.items())
    )


def stored_on_disk(srv: SkaldServer, account: str) -> int:
    root = srv.data_dir / "blobs" / account
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def dropped(srv: SkaldServer) -> int:
    r = httpx.get(srv.url + "/metrics", headers={"X-API-Key": ROOT_KEY}, timeout=30)
    assert r.status_code == 200
    line = next(ln for ln in r.text.splitlines() if ln.startswith("skald_usage_dropped_total "))
    return int(float(line.split()[1]))


def test_the_meters_match_what_the_client_did(
    server: SkaldServer, llm: tuple[FakeLLM, str]
) -> None:
    fake, _ = llm
    account, key = new_account(server, {"plan": "unlimited"})
    traffic = Traffic()
    calls_before = Counter(fake.calls)
    c = sdk(server, key, traffic)
    try:
        c.write("viking://resources/notes/a.md", "# A\n\nFirst note about meters.\n", wait=True)
        c.write("viking://resources/notes/b.md", "# B\n\n" + "Second note. " * 200, wait=True)
        assert "Second note" in c.read("viking://resources/notes/b.md")
        c.ls("viking://resources/notes")
        c.find("meters", target_uri="viking://resources/notes")
        c.wait_processed()
    finally:
        c.close()
    llm_calls = fake.calls - calls_before

    got = series(server, key, account)
    items, totals = got["items"], got["totals"]
    assert got["granularity"] == "hour" and got["account_id"] == account
    # requests by family, and the bytes both ways, exactly as the client saw them
    families = Counter({i["dims"]["family"]: i["value"] for i in items if i["unit"] == "requests"})
    assert families == traffic.families
    assert totals["bytes_uploaded"] == traffic.uploaded
    assert totals["bytes_downloaded"] == traffic.downloaded
    # bytes stored: what the account's tree holds on disk
    assert totals["bytes_stored"] == stored_on_disk(server, account)
    # index records written: at least every record the index holds now
    usage = httpx.get(
        f"{server.url}/api/v1/admin/accounts/{account}/usage",
        headers={"X-API-Key": key},
        timeout=30,
    ).json()["result"]
    assert "series" not in usage  # the plain route keeps its shape
    assert totals["index_records"] >= usage["records"]["total"] > 0
    # texts embedded (by model), one of them the find's query
    assert summed(items, "texts_embedded") >= 3
    # every completion: its tokens by purpose and model
    assert sum(llm_calls.values()) > 0
    for purpose, n in llm_calls.items():
        assert summed(items, "llm_tokens_in", purpose=purpose, model=MODEL) == 100 * n
        assert summed(items, "llm_tokens_out", purpose=purpose, model=MODEL) == 10 * n
    assert totals["llm_tokens_in"] == 100 * sum(llm_calls.values())
    # worker time of the semantic jobs, the console's operations
    assert summed(items, "worker_ms", kind="semantic.process") > 0
    assert summed(items, "operations", op="find") == 1
    assert {i["user_id"] for i in items} == {"ann"}
    assert dropped(server) == 0

    # a find more: one request, one text embedded, one find
    c = sdk(server, key)
    try:
        c.find("meters again", target_uri="viking://resources/notes")
    finally:
        c.close()
    after = series(server, key, account)
    assert after["totals"]["texts_embedded"] == totals["texts_embedded"] + 1
    assert summed(after["items"], "operations", op="find") == 2
    # the granularities agree, and a user filter keeps that user's only
    day = series(server, key, account, granularity="day")
    assert (
        day["totals"] == after["totals"] or day["totals"]["requests"] > after["totals"]["requests"]
    )
    assert series(server, key, account, user_id="nobody")["items"] == []


def test_csv_export_and_console_views(server: SkaldServer, llm: tuple[FakeLLM, str]) -> None:
    account, key = new_account(server, {"plan": "unlimited"})
    c = sdk(server, key)
    try:
        c.write("viking://resources/csv/a.md", "# CSV\n\nA note.\n", wait=True)
        sid = c.create_session()["session_id"]
        c.add_message(sid, "user", "hello")
        c.search("note", session_id=sid)
        c.wait_processed()
    finally:
        c.close()
    headers = {"X-API-Key": key}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        r = http.get(f"/api/v1/admin/accounts/{account}/usage.csv", params={"from": "1d"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(r.text)))
        assert list(rows[0]) == ["period", "account_id", "user_id", "unit", "dims", "value"]
        assert {row["account_id"] for row in rows} == {account}
        same = http.get(
            f"/api/v1/admin/accounts/{account}/usage", params={"from": "1d", "format": "csv"}
        )
        # the same rows, but for the first export's own request
        traffic_units = {"requests", "bytes_uploaded", "bytes_downloaded"}
        assert [
            row
            for row in csv.DictReader(io.StringIO(same.text))
            if row["unit"] not in traffic_units
        ] == [row for row in rows if row["unit"] not in traffic_units]
        tokens_in = sum(int(row["value"]) for row in rows if row["unit"] == "llm_tokens_in")
        assert tokens_in > 0

        today = datetime.now(UTC).date().isoformat()
        summary = http.get("/api/v1/console/dashboard/summary").json()["result"]
        assert set(summary) == {"context_counts", "today_tokens", "today_retrievals"}
        assert set(summary["context_counts"]) == {"files", "skills", "memories", "total"}
        assert summary["context_counts"]["files"] >= 1
        assert summary["today_tokens"]["vlm_input"] == tokens_in
        assert set(summary["today_tokens"]) == {
            "vlm_input",
            "vlm_output",
            "embedding_input",
            "total",
        }
        assert summary["today_retrievals"] == {"find": 0, "search": 1, "total": 1}
        tokens = http.get(
            "/api/v1/console/tokens", params={"start_date": today, "end_date": today}
        ).json()["result"]
        assert tokens["bucket"] == "day"
        assert tokens["items"] == [
            {
                "date": today,
                "vlm_input": tokens_in,
                "vlm_output": summary["today_tokens"]["vlm_output"],
                "embedding_input": summary["today_tokens"]["embedding_input"],
            }
        ]
        commits = http.get(
            "/api/v1/console/context-commits",
            params={"start_date": today, "end_date": today, "bucket": "4h"},
        ).json()["result"]
        assert [row["hour"] for row in commits["items"]] == [0, 4, 8, 12, 16, 20]
        assert sum(row["session_add_message"] for row in commits["items"]) == 1
        row = commits["items"][0]
        assert set(row) == {
            "date",
            "hour",
            "total",
            "add_resource",
            "add_skill",
            "session_add_message",
            "session_commit",
        }
        bad = http.get(
            "/api/v1/console/tokens", params={"start_date": today, "end_date": "yesterday"}
        )
        assert bad.status_code == 400
        bad = http.get(f"/api/v1/admin/accounts/{account}/usage", params={"granularity": "week"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_ARGUMENT"
    # a user sees their own usage in the console, not the admin's
    r = httpx.post(
        f"{server.url}/api/v1/admin/accounts/{account}/users",
        json={"user_id": "ben", "role": "user"},
        headers={"X-API-Key": ROOT_KEY},
        timeout=30,
    )
    ben = r.json()["result"]["user_key"]
    mine = httpx.get(
        server.url + "/api/v1/console/dashboard/summary", headers={"X-API-Key": ben}, timeout=30
    ).json()["result"]
    assert mine["today_tokens"]["total"] == 0 and mine["today_retrievals"]["total"] == 0
    denied = httpx.get(
        f"{server.url}/api/v1/admin/accounts/{account}/usage",
        params={"from": "1d"},
        headers={"X-API-Key": ben},
        timeout=30,
    )
    assert denied.status_code == 403


def write_body(uri: str, size: int) -> bytes:
    """A content/write JSON body of exactly `size` bytes."""
    empty = json.dumps({"uri": uri, "content": "", "mode": "create"}).encode()
    body = json.dumps({"uri": uri, "content": "x" * (size - len(empty)), "mode": "create"}).encode()
    assert len(body) == size
    return body


def test_storage_limit_at_over_and_after_freeing_space(server: SkaldServer) -> None:
    limit = 20_000
    account, key = new_account(server, {"plan": "unlimited", "limits": {"storage_bytes": limit}})
    c = sdk(server, key)
    try:
        c.ls("viking://resources")  # the account's preset directories
        c.wait_processed()
    finally:
        c.close()
    used = series(server, key, account)["totals"].get("bytes_stored", 0)
    assert 0 < used < limit // 2
    headers = {"X-API-Key": key, "Content-Type": "application/json"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        # at: exactly what is left
        at = http.post(
            "/api/v1/content/write", content=write_body("viking://resources/at.md", limit - used)
        )
        assert at.status_code == 200, at.text
        # over: refused, nothing written
        over = http.post(
            "/api/v1/content/write", content=write_body("viking://resources/over.md", 100)
        )
        assert over.status_code == 403, over.text
        err = over.json()["error"]
        assert err["code"] == "QUOTA_EXCEEDED"
        assert err["details"]["limit"] == "storage_bytes"
        assert err["details"]["value"] == limit
        assert err["details"]["current"] >= limit - 100
        assert err["details"]["requested"] == 100
        assert (
            http.get(
                "/api/v1/content/read", params={"uri": "viking://resources/over.md"}
            ).status_code
            == 404
        )
        # an upload is refused the same way
        up = http.post(
            "/api/v1/resources/temp_upload",
            files={"file": ("big.md", b"y" * 500, "text/markdown")},
            headers={"X-API-Key": key},
        )
        assert up.status_code == 403 and up.json()["error"]["code"] == "QUOTA_EXCEEDED"
        # raising the limit (the account's settings) lets the same write through
        raised = httpx.patch(
            f"{server.url}/api/v1/admin/accounts/{account}/settings",
            json={"limits": {"storage_bytes": limit + 1000}},
            headers={"X-API-Key": ROOT_KEY},
            timeout=30,
        )
        assert raised.status_code == 200, raised.text
        over = http.post(
            "/api/v1/content/write", content=write_body("viking://resources/over.md", 100)
        )
        assert over.status_code == 200, over.text
        # reads still work, and removing a file frees its bytes
        assert http.get("/api/v1/fs/ls", params={"uri": "viking://resources"}).status_code == 200
        rm = http.request("DELETE", "/api/v1/fs", params={"uri": "viking://resources/at.md"})
        assert rm.status_code == 200, rm.text
        http.post("/api/v1/system/wait", json={})
        time.sleep(0.1)
        again = http.post(
            "/api/v1/content/write", content=write_body("viking://resources/after.md", 300)
        )
        assert again.status_code == 200, again.text
    assert dropped(server) == 0


def _search_with_session(http: httpx.Client, sid: str) -> httpx.Response:
    return http.post("/api/v1/search/search", json={"query": "notes", "session_id": sid})


def test_llm_tokens_per_day_at_over_and_after_raising(
    server: SkaldServer, llm: tuple[FakeLLM, str]
) -> None:
    fake, _ = llm
    # at and over, with the account's own limit: 110 tokens per call, 220 a day
    account, key = new_account(server, {"plan": "unlimited", "limits": {"llm_tokens_per_day": 220}})
    headers = {"X-API-Key": key}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        sid = http.post("/api/v1/sessions", json={}).json()["result"]["session_id"]
        assert (
            http.post(
                f"/api/v1/sessions/{sid}/messages", json={"role": "user", "content": "my notes?"}
            ).status_code
            == 200
        )
        for _ in range(2):  # 0, then 110 used: below the limit
            before = fake.calls["query_rewrite"]
            assert _search_with_session(http, sid).status_code == 200
            assert fake.calls["query_rewrite"] == before + 1
        before = sum(fake.calls.values())
        at = _search_with_session(http, sid)  # 220 used: at the limit
        assert at.status_code == 403, at.text
        err = at.json()["error"]
        assert err["code"] == "QUOTA_EXCEEDED"
        assert err["details"]["limit"] == "llm_tokens_per_day"
        assert err["details"]["value"] == 220 and err["details"]["current"] == 220
        tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
        assert err["details"]["resets_at"] == f"{tomorrow}T00:00:00Z"
        assert sum(fake.calls.values()) == before  # no call made
        # a background job at the limit fails its task with the error, no retries
        w = http.post(
            "/api/v1/content/write",
            json={"uri": "viking://resources/deep/x/n.md", "content": "# N\n\nA note.\n"},
        )
        assert w.status_code == 200, w.text
        task_id = w.json()["result"]["task_id"]
        task: dict[str, Any] = {}
        deadline = time.time() + 60
        while time.time() < deadline:
            task = http.get(f"/api/v1/tasks/{task_id}").json()["result"]
            if task["status"] in ("completed", "failed"):
                break
            time.sleep(0.1)
        assert task["status"] == "failed", task
        assert "QUOTA_EXCEEDED" in task["error"] and "llm_tokens_per_day" in task["error"]
        assert sum(fake.calls.values()) == before
        # raising the limit (the account's settings) lets the model be called again
        raised_limit = httpx.patch(
            f"{server.url}/api/v1/admin/accounts/{account}/settings",
            json={"limits": {"llm_tokens_per_day": 1000}},
            headers={"X-API-Key": ROOT_KEY},
            timeout=30,
        )
        assert raised_limit.status_code == 200, raised_limit.text
        assert _search_with_session(http, sid).status_code == 200
        assert sum(fake.calls.values()) == before + 1

    # after raising: an account on the default plan (free: 200,000 a day) crosses it with
    # one call, and a restart with a higher default plan lets it through; what was metered
    # before the restart was flushed at shutdown
    raised, raised_key = new_account(server)
    fake.prompt_tokens, fake.completion_tokens = 250_000, 0
    try:
        with httpx.Client(
            base_url=server.url, headers={"X-API-Key": raised_key}, timeout=60
        ) as http:
            sid = http.post("/api/v1/sessions", json={}).json()["result"]["session_id"]
            http.post(f"/api/v1/sessions/{sid}/messages", json={"role": "user", "content": "hi"})
            assert _search_with_session(http, sid).status_code == 200
            over = _search_with_session(http, sid)
            assert over.status_code == 403
            assert over.json()["error"]["details"]["value"] == 200_000
        server.extra_env["SKALD_DEFAULT_PLAN"] = "team"
        server.restart()

        calls = fake.calls["query_rewrite"]
        with httpx.Client(
            base_url=server.url, headers={"X-API-Key": raised_key}, timeout=60
        ) as http:
            assert _search_with_session(http, sid).status_code == 200
        assert fake.calls["query_rewrite"] == calls + 1
        totals = series(server, raised_key, raised)["totals"]
        assert totals["llm_tokens_in"] == 500_000
    finally:
        fake.prompt_tokens, fake.completion_tokens = 100, 10
        server.extra_env["SKALD_DEFAULT_PLAN"] = "free"
    assert dropped(server) == 0


def test_a_removed_accounts_usage_goes_with_it(server: SkaldServer) -> None:
    """An account created again under a removed account's id starts with no usage: the
    purge removes the cells and the running totals."""
    account, key = new_account(server, {"plan": "unlimited"})
    c = sdk(server, key)
    try:
        c.write("viking://resources/gone/a.md", "# Gone\n\nSoon removed.\n", wait=True)
    finally:
        c.close()
    deadline = time.monotonic() + 30
    while not summed(series(server, key, account)["items"], "bytes_stored"):
        assert time.monotonic() < deadline, "the write was never metered"
        time.sleep(0.5)

    root = {"X-API-Key": ROOT_KEY}
    with httpx.Client(base_url=server.url, headers=root, timeout=60) as http:
        removal = http.delete(f"/api/v1/admin/accounts/{account}")
        assert removal.status_code == 202, removal.text
        task_id = removal.json()["result"]["task_id"]
        deadline = time.monotonic() + 60
        while True:
            task = http.get(f"/api/v1/tasks/{task_id}").json()["result"]
            if task["status"] == "completed":
                break
            assert task["status"] in ("pending", "running"), task
            assert time.monotonic() < deadline, task
            time.sleep(0.3)
        assert "usage" in task["result"]["removed"], task["result"]

        again = http.post(
            "/api/v1/admin/accounts",
            json={"account_id": account, "admin_user_id": "bob"},
        )
        assert again.status_code == 200, again.text
        new_key = again.json()["result"]["user_key"]
    items = series(server, new_key, account)["items"]
    assert summed(items, "bytes_stored") == 0
    assert not [
        i for i in items if i["unit"] not in ("requests", "bytes_uploaded", "bytes_downloaded")
    ], items
