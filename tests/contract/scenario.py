"""The drive: every route of every HTTP function and every MCP tool, through the emulated API
Gateway, with the workers run in between (settle) and the idle auto-commit schedules fired.
openviking-sdk where it has the call, plain HTTP (httpx) for the rest. Each step checks its
answer, so a step that silently failed cannot leave its AWS calls out of the recording.

Beyond the happy paths, the paths a grant exists for: setup resuming a run that stopped
half-way, context mode recording its recall ledger, and failures with their recovery (a job
failing once, a semantic job short of time continuing in a new job, an extraction running out
of attempts and redriven from its DLQ, a send to SQS that does not go through); see the
`failing` faults of the recorder.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import OpenVikingError

from skald.api.authorizer import CACHE_TTL_S
from tests.contract import seams
from tests.contract.harness import Deployment

ACCOUNT = "acme"


def _client(url: str, key: str) -> SyncHTTPClient:
    client = SyncHTTPClient(url=url, api_key=key, timeout=120)
    client.initialize()
    return client


class Http:
    """Plain requests for the routes the SDK does not call."""

    def __init__(self, url: str, key: str | None) -> None:
        headers = {"X-API-Key": key} if key else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=120)

    def __call__(self, verb: str, path: str, expect: int = 200, **kw: Any) -> Any:
        response = self.http.request(verb, path, **kw)
        assert response.status_code == expect, (
            verb,
            path,
            response.status_code,
            response.text[:500],
        )
        return (
            response.json()
            if "json" in response.headers.get("content-type", "")
            else response.content
        )


def drive(deployment: Deployment, url: str, root_key: str, workdir: Path) -> None:
    settle = deployment.settle
    _deploy(deployment)
    public, nokey = Http(url, None), Http(url, None)
    assert public("GET", "/health")["status"] == "ok"
    public("GET", "/ready")
    # The console: its page and assets are public static files (no AWS call behind them).
    for path in ("/", "/console"):
        assert public.http.get(path).status_code in (301, 302, 307, 308), path
    assert b"<html" in public("GET", "/console/").lower()
    assert public("GET", "/console/console.js")
    nokey("GET", "/api/v1/fs/ls", expect=401, params={"uri": "viking://resources"})
    Http(url, "not-a-key")("GET", "/api/v1/fs/ls", expect=401, params={"uri": "viking://resources"})

    root = _client(url, root_key)
    raw_root = Http(url, root_key)
    alice_key = root.admin_create_account(ACCOUNT, "alice")["user_key"]
    deployment.callers[alice_key] = ACCOUNT
    root.admin_list_accounts()
    root.admin_get_account(ACCOUNT)
    root.admin_register_user(ACCOUNT, "bob", "user")
    root.admin_list_users(ACCOUNT)
    root.admin_get_user(ACCOUNT, "bob")
    root.admin_set_role(ACCOUNT, "bob", "admin")
    bob_key = root.admin_regenerate_key(ACCOUNT, "bob")["user_key"]
    _keys(url, bob_key)
    _removed_user(url, bob_key, root_key)
    root.get_status()
    raw_root("GET", "/api/v1/system/status")
    raw_root("GET", "/api/v1/observer/system")
    raw_root("GET", "/api/v1/observer/queue")
    for component in ("vikingdb", "models", "lock", "retrieval", "filesystem"):
        raw_root("GET", f"/api/v1/observer/{component}", params={"format": "json"})
    raw_root("GET", "/api/v1/debug/health")

    alice = _client(url, alice_key)
    raw = Http(url, alice_key)
    # The account's own admin manages its users: in its account's scope, so these go with
    # the content function's tenant-scoped credentials (root's above, with its own role).
    alice.admin_register_user(ACCOUNT, "carol", "user")
    alice.admin_list_users(ACCOUNT)
    alice.admin_set_role(ACCOUNT, "carol", "admin")
    alice.admin_regenerate_key(ACCOUNT, "carol")
    alice.admin_remove_user(ACCOUNT, "carol")
    alice.admin_get_account(ACCOUNT)
    _content(alice, raw, settle, workdir)
    _packs(alice, settle, workdir)
    # After the packs: their backup and restore of the whole tree need not carry its 320 files.
    _large_job(alice, settle, workdir)
    _search(alice, raw, settle)
    _skills(alice, settle, workdir)
    _sessions(alice, raw, deployment)
    _tasks(alice, raw, root, settle)
    _remote(alice, raw, settle)
    _mcp(alice, raw, deployment)
    _failures(alice, raw, deployment)
    _audit(raw_root, raw)
    # An account's usage: its users, sessions (listed) and index records (counted).
    usage = raw_root("GET", f"/api/v1/admin/accounts/{ACCOUNT}/usage")["result"]
    assert usage["sessions"]["total"] > 0 and usage["records"]["total"] > 0
    mine = raw("GET", f"/api/v1/admin/accounts/{ACCOUNT}/usage")["result"]  # its own admin
    assert mine["sessions"]["total"] == usage["sessions"]["total"]
    _metered(raw_root, raw)
    # Its plan: read by its admin, changed by root (the edge moves the account's key to the
    # new tier's usage plan), then back to the default tier.
    settings = f"/api/v1/admin/accounts/{ACCOUNT}/settings"
    raw("GET", settings)
    raw_root("PATCH", settings, json={"plan": "business"})
    raw_root("PATCH", settings, json={"plan": None})

    # An account with data, deleted: a tombstone at once, then its purge (a job on the purge
    # worker) removes every version of its blobs, its index records, its sessions with their
    # idle timers, its dead letters, its tasks, users and keys. A purge whose job was lost is
    # re-queued by the stack's purge sweeper (a rate schedule).
    doomed_key = root.admin_create_account("doomed", "dora")["user_key"]
    deployment.callers[doomed_key] = "doomed"
    doomed = _client(url, doomed_key)
    doomed.write("viking://resources/d.md", "# Doomed\n\nSoon gone.\n")
    doomed.write("viking://resources/d.md", "# Doomed\n\nA second version.\n")
    doomed.create_session("s-doomed", options={"auto_commit_policy": {"idle_seconds": 3600}})
    doomed.add_message("s-doomed", "user", "hello")
    raw_doomed = Http(url, doomed_key)
    raw_doomed("POST", "/api/v1/sessions/s-doomed/commit", json={})
    raw_doomed(
        "POST",
        "/api/v1/resources",
        json={  # a watch: one of the account's objects
            "path": "https://docs.example.invalid/doomed.html",
            "watch_interval": 60,
        },
    )
    with deployment.recorder.failing(
        "memory", "bedrock-runtime", "InvokeModel", code="AccessDeniedException", status=403
    ):
        settle()  # its extraction runs out of attempts: a dead letter of the account
    removed = raw_root("DELETE", "/api/v1/admin/accounts/doomed", expect=202)["result"]
    assert deployment.fire_stack_schedules() >= 1  # the sweeps, the purge sweeper among them
    # Each job short of time: the purge moves on a batch at a time, each job queuing the rest.
    with deployment.short_of_time("purge", 20.0):
        settle()
    assert root.get_task(removed["task_id"])["status"] == "completed"
    raw_root("GET", "/api/v1/admin/accounts/doomed", expect=404)
    alice.wait_processed()
    for client in (alice, doomed, root):
        client.close()


def _keys(url: str, key: str) -> None:
    """A user's named keys: minted (by the user), listed, used (its last use recorded by the
    authorizer), revoked."""
    me = Http(url, key)
    keys = f"/api/v1/admin/accounts/{ACCOUNT}/users/bob/keys"
    made = me("POST", keys, json={"name": "ci", "expires_in_s": 3600})["result"]
    Http(url, made["user_key"])("GET", "/api/v1/fs/ls", params={"uri": "viking://resources"})
    assert {k["name"] for k in me("GET", keys)["result"]} == {"default", "ci"}
    me("DELETE", f"{keys}/{made['key_id']}")
    time.sleep(CACHE_TTL_S)  # the warm authorizer trusts what it learnt for that long
    Http(url, made["user_key"])(
        "GET", "/api/v1/fs/ls", expect=401, params={"uri": "viking://resources"}
    )


def _removed_user(url: str, key: str, root_key: str) -> None:
    """A user with data (a private file, an unused upload, a session), removed: 202 with the
    purge's task, the key refused at once; the purge runs on the next settle."""
    bob = Http(url, key)
    bob(
        "POST",
        "/api/v1/content/write",
        json={"uri": "viking://user/bob/resources/private.md", "content": "# Private\n"},
    )
    bob("POST", "/api/v1/resources/temp_upload", files={"file": ("a.md", b"# A\n")})
    bob("POST", "/api/v1/sessions", json={"session_id": "s-bob"})
    answer = Http(url, root_key)(
        "DELETE", f"/api/v1/admin/accounts/{ACCOUNT}/users/bob", expect=202
    )
    assert answer["result"]["status"] == "deleting"
    time.sleep(CACHE_TTL_S)
    bob("GET", "/api/v1/fs/ls", expect=401, params={"uri": "viking://resources"})


def _audit(root: Http, admin: Http) -> None:
    """The audit trail the steps above left: each function that ran an audited action put
    its record (content: rm, mv, packs, skills, watches; sessions: a session's deletion; mcp:
    forget), and the content function lists them: an account admin's view reads the
    account's own partitions, root's view every account's through gsi1."""
    mine = admin("GET", "/api/v1/console/audit", params={"page_size": 100})["result"]
    actions = {i["action"] for i in mine["items"]}
    assert {
        "fs.rm",
        "fs.mv",
        "pack.import",
        "pack.restore",
        "skill.delete",
        "session.delete",
        "watch.create",
        "watch.update",
        "watch.cancel",
    } <= actions, actions
    assert all(i["outcome"] != "pending" for i in mine["items"]), mine["items"]
    every = root("GET", "/api/v1/console/audit", params={"page_size": 100})["result"]
    assert {i["account_id"] for i in every["items"]} == {ACCOUNT}
    assert every["total"] == mine["total"]
    forgot = root(
        "GET", "/api/v1/console/audit", params={"account_id": ACCOUNT, "action": "fs.rm"}
    )["result"]
    assert any(i["route"] == "/mcp" for i in forgot["items"]), forgot["items"]
    admin("GET", "/api/v1/console/audit", expect=400, params={"status": "sometimes"})


def _metered(root: Http, admin: Http) -> None:
    """The account's metered usage, flushed by each function at the end of its invocations:
    the series and the billing CSV (its admin), OpenViking's console views (its admin; root
    naming it)."""
    path = f"/api/v1/admin/accounts/{ACCOUNT}/usage"
    series = admin("GET", path, params={"from": "1d", "granularity": "hour"})["result"]["series"]
    assert series["totals"]["requests"] > 0 and series["totals"]["bytes_stored"] > 0
    assert admin("GET", path + ".csv", params={"from": "1d"}).startswith(b"period,account_id,")
    today = datetime.now(UTC).date().isoformat()
    days = {"start_date": today, "end_date": today}
    summary = admin("GET", "/api/v1/console/dashboard/summary")["result"]
    assert summary["context_counts"]["total"] > 0
    admin("GET", "/api/v1/console/tokens", params=days)
    admin("GET", "/api/v1/console/context-commits", params=days)
    root("GET", "/api/v1/console/dashboard/summary", params={"account_id": ACCOUNT})
    # Its plan: read by its admin, a limit set by root (large: nothing the drive does meets it)
    settings = f"/api/v1/admin/accounts/{ACCOUNT}/settings"
    admin("GET", settings)
    root("PATCH", settings, json={"limits": {"storage_bytes": 10**12}})


def _deploy(deployment: Deployment) -> None:
    """Deploy time: the setup trigger creates the search index behind its alias; a redeploy
    after a run that stopped half-way drops the index it left and builds it again; a plain
    redeploy changes nothing when the mapping did not change."""
    setup = deployment.hosts[seams.SETUP]
    steps = setup.invoke({}, "deploy: setup trigger")["steps"]
    assert any(": created" in step for step in steps), steps
    left = deployment.interrupt_setup(setup.env["SKALD_OPENSEARCH_INDEX"])
    steps = setup.invoke({}, "redeploy after an interrupted setup run")["steps"]
    assert any(f"-> {left[0]}: created" in step for step in steps), (left, steps)
    steps = setup.invoke({}, "redeploy: setup trigger")["steps"]
    assert any(": unchanged" in step for step in steps), steps


def _content(alice: SyncHTTPClient, raw: Http, settle: Any, workdir: Path) -> None:
    alice.mkdir("viking://resources/notes", description="Notes kept in S3.")
    alice.write("viking://resources/notes/a.md", "# Alpha\n\nFirst line about tea.\n")
    alice.write("viking://resources/notes/a.md", "Second line.\n", mode="append")
    alice.batch_write(
        "viking://resources/notes",
        [
            {"uri": "viking://resources/notes/b.md", "content": "# Beta\n\nCoffee notes.\n"},
            {"uri": "viking://resources/notes/c.md", "content": "# Gamma\n\nWater.\n"},
        ],
        wait=False,
    )
    settle()
    assert alice.read("viking://resources/notes/a.md").startswith("# Alpha")
    alice.abstract("viking://resources/notes")
    alice.overview("viking://resources/notes")
    assert alice.download_bytes("viking://resources/notes/b.md").startswith(b"# Beta")
    alice.set_tags("viking://resources/notes/a.md", ["lang=en"])
    raw(
        "POST",
        "/api/v1/content/set_tags",
        json={"uri": "viking://resources/notes/c.md", "tags": ["kind=note"]},
    )
    raw(
        "POST",
        "/api/v1/fs/attrs/set_tags",
        json={"uri": "viking://resources/notes/b.md", "tags": ["kind=doc"]},
    )
    alice.attrs("viking://resources/notes/a.md")
    alice.ls("viking://resources/notes")
    alice.tree("viking://resources")
    alice.stat("viking://resources/notes/a.md")
    raw(
        "POST",
        "/api/v1/fs/cp",
        json={
            "from_uri": "viking://resources/notes/c.md",
            "to_uri": "viking://resources/notes/c2.md",
        },
    )
    alice.mv("viking://resources/notes/c2.md", "viking://resources/notes/c3.md")
    alice.rm("viking://resources/notes/c3.md")
    alice.reindex("viking://resources/notes", wait=False)
    settle()
    # A directory upload: temp_upload (zip) then add_resource.
    src = workdir / "handbook"
    (src / "ops").mkdir(parents=True)
    (src / "ops" / "backups.md").write_text("# Backups\n\nSnapshots run nightly at 02:00.\n")
    (src / "intro.md").write_text("# Intro\n\nWelcome to the handbook.\n")
    res = alice.add_resource(str(src))
    settle()
    assert alice.get_task(res["task_id"])["status"] == "completed"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("one.md", "# One\n")
    upload = raw(
        "POST",
        "/api/v1/resources/temp_upload",
        files={"file": ("one.zip", buffer.getvalue(), "application/zip")},
    )
    assert upload["status"] == "ok"
    settle()
    # Storage against the index (S3 listing, OpenSearch scroll), the index views, statistics.
    report = alice.check_consistency("viking://resources/notes")
    assert report["ok"] is True, report
    assert (
        raw("GET", "/api/v1/debug/vector/count", params={"uri": "viking://resources/notes"})[
            "result"
        ]["count"]
        > 0
    )
    page = raw("GET", "/api/v1/debug/vector/scroll", params={"limit": 2})["result"]
    raw("GET", "/api/v1/debug/vector/scroll", params={"limit": 2, "cursor": page["next_cursor"]})
    raw("GET", "/api/v1/stats/memories")


def _large_job(alice: SyncHTTPClient, settle: Any, workdir: Path) -> None:
    """A folder of long names: its semantic job lists more URIs than one SQS message holds,
    so the content function stores the payload under `_jobs/semantic/` and the semantic
    worker reads it, then deletes it once the folder is indexed."""
    deep = workdir.joinpath("archive", "d" * 240, "e" * 240)
    deep.mkdir(parents=True)
    # Siblings at each level: an upload's lone top directory would be folded away.
    for level in (deep.parent, deep.parent.parent):
        (level / "index.md").write_text("# Index\n")
    for i in range(320):
        (deep / (f"{i:04d}-" + "n" * 215 + ".md")).write_text(f"# Note {i}\n")
    res = alice.add_resource(str(workdir / "archive"))
    settle()
    assert alice.get_task(res["task_id"])["status"] == "completed"


def _packs(alice: SyncHTTPClient, settle: Any, workdir: Path) -> None:
    """`.ovpack` export / import (S3 reads, writes, a delete on overwrite, semantic jobs) and
    an admin's backup / restore of the whole tree."""
    pack = alice.export_ovpack("viking://resources/notes", str(workdir / "notes.ovpack"))
    alice.import_ovpack(pack, "viking://resources/copies")
    alice.import_ovpack(pack, "viking://resources/copies", on_conflict="overwrite")
    backup = alice.backup_ovpack(str(workdir))
    alice.restore_ovpack(backup, on_conflict="overwrite")
    settle()
    assert alice.read("viking://resources/copies/notes/a.md").startswith("# Alpha")


def _search(alice: SyncHTTPClient, raw: Http, settle: Any) -> None:
    hits = alice.search("snapshots nightly", options={"search_type": "keywords"})
    assert any("backups.md" in h["uri"] for h in hits["resources"])
    # osmem-server has no k-NN engine: 400, after the query embedding and the request.
    with contextlib.suppress(OpenVikingError):
        alice.find("tea notes")
    with contextlib.suppress(OpenVikingError):
        alice.search("tea notes", options={"search_type": "semantic"})
    assert alice.grep("viking://resources/handbook", "nightly")["matches"]
    assert alice.glob("**/*.md", uri="viking://resources/handbook")["matches"]
    # The recall preset is context mode (hybrid): osmem-server refuses its k-NN half, a 4xx.
    assert raw.http.post("/api/v1/search/recall", json={"query": "tea"}).status_code < 500


def _skills(alice: SyncHTTPClient, settle: Any, workdir: Path) -> None:
    """Skill packages: written by the content function, found through the search function."""
    tea = "---\nname: brew-tea\ndescription: Brew green tea.\n---\n\nUse water at 80 C.\n"
    assert alice.validate_skill(tea)["valid"] is True
    alice.add_skill(tea)
    package = workdir / "deploy-widget"
    package.mkdir()
    (package / "SKILL.md").write_text(
        "---\nname: deploy-widget\ndescription: Deploy the widget.\n---\n\nRun deploy.sh.\n"
    )
    (package / "deploy.sh").write_text("#!/bin/sh\necho deploy\n")
    alice.add_skill(str(package), options={"target_uri": "viking://agent/skills"})
    settle()
    assert {s["name"] for s in alice.list_skills()["skills"]} == {"brew-tea", "deploy-widget"}
    assert alice.get_skill("deploy-widget", include_integrity=True)["revision"]
    # osmem-server has no k-NN engine: hybrid find is a 400 there, after the embedding.
    with contextlib.suppress(OpenVikingError):
        alice.find_skills("green tea")
    alice.update_skill("brew-tea", tea.replace("80 C", "75 C"))
    settle()
    alice.delete_skill("brew-tea")
    settle()


def _sessions(alice: SyncHTTPClient, raw: Http, deployment: Deployment) -> None:
    alice.create_session("s1", options={"auto_commit_policy": {"idle_seconds": 3600}})
    alice.list_sessions()
    alice.get_session("s1")
    alice.update_session_config("s1", options={"memory_extraction_config": {}})
    alice.add_message("s1", "user", "I prefer green tea in the morning.")  # schedule created
    alice.batch_add_messages(
        "s1",
        [
            {"role": "assistant", "content": "Noted: green tea."},
            {"role": "user", "content": "My name is Alice and I work at Acme."},
        ],
    )  # moved
    alice.get_session_context("s1")
    # Context mode reads and records the recall ledger of the session.
    context = raw(
        "POST",
        "/api/v1/search/search",
        json={
            "query": "tea",
            "session_id": "s1",
            "mode": "context",
            "search_type": "keywords",
            "dedup_turns": 2,
        },
    )["result"]
    assert context["stats"]["dedup"]["turn"] == 1, context["stats"]["dedup"]
    alice.add_message(
        "s1",
        "assistant",
        parts=[
            {
                "type": "tool",
                "tool_id": "call_1",
                "tool_name": "shell",
                "tool_input": {},
                "tool_output": "backups ran at 02:00",
            }
        ],
    )
    assert raw("GET", "/api/v1/sessions/s1/tool-results")["result"]["tool_results"]
    raw("GET", "/api/v1/sessions/s1/tool-results/call_1")
    raw("GET", "/api/v1/sessions/s1/tool-results/call_1/search", params={"q": "backups"})
    raw("GET", "/api/v1/stats/sessions/s1")
    committed = raw("POST", "/api/v1/sessions/s1/commit", json={})["result"]
    deployment.settle()
    archive = committed["archive_uri"].rstrip("/").rsplit("/", 1)[-1]
    raw("GET", f"/api/v1/sessions/s1/archives/{archive}")
    # Idle auto-commit: the schedule the last message armed fires, the worker commits.
    alice.create_session("s2", options={"auto_commit_policy": {"idle_seconds": 1}})
    alice.add_message("s2", "user", "I always use vim.")
    time.sleep(1.2)  # past the idle deadline: the auto-commit is due when it fires
    assert deployment.fire_schedules({"s2"}) == 1
    deployment.settle()
    assert alice.get_session("s2")["commit_count"] == 1  # committed by the worker
    # A reset with nothing left to archive records an empty archive and ends its task at once.
    reset = raw("POST", "/api/v1/sessions/s2/commit", json={"reset_context": True})["result"]
    assert alice.get_task(reset["task_id"])["status"] == "completed", reset
    alice.delete_session("s1")


class Mcp:
    """Tool calls on the MCP function (stateless streamable HTTP, JSON answers)."""

    HEADERS = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2025-11-25",
    }

    def __init__(self, raw: Http) -> None:
        self.raw = raw
        self.ids = 0
        self.called: set[str] = set()

    def __call__(self, method: str, params: dict[str, Any]) -> Any:
        self.ids += 1
        return self.raw(
            "POST",
            "/mcp",
            headers=self.HEADERS,
            json={"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params},
        )["result"]

    def tool(self, tool: str, /, ok: bool | None = True, **arguments: Any) -> Any:
        """Calls a tool; `ok` None takes either outcome (dense retrieval answers 400 on
        osmem-server, after the query embedding)."""
        self.called.add(tool)
        result = self("tools/call", {"name": tool, "arguments": arguments})
        if ok is not None:
            assert result["isError"] is not ok, (tool, result)
        return result.get("structuredContent") or result


def _mcp(alice: SyncHTTPClient, raw: Http, deployment: Deployment) -> None:
    """Every tool of the MCP function."""
    mcp = Mcp(raw)
    tools = {t["name"] for t in mcp("tools/list", {})["tools"]}
    mcp.tool("read", uris="viking://resources/notes/a.md")
    mcp.tool("list", uri="viking://resources/notes")
    mcp.tool("tree", uri="viking://resources", level_limit=2)
    mcp.tool("grep", pattern="nightly", uri="viking://resources/handbook")
    mcp.tool("glob", pattern="**/*.md", uri="viking://resources/handbook")
    mcp.tool("stat", uri="viking://resources/notes/a.md")
    mcp.tool("find", ok=None, query="tea notes")
    mcp.tool("search", ok=None, query="tea notes")
    # With a session's recent messages, the model plans the queries.
    alice.add_message("s-mcp", "user", "When do the backups run?")
    mcp.tool("search", query="snapshots nightly", search_type="keywords", session_id="s-mcp")
    mcp.tool("search", query="tea", mode="context", search_type="keywords", session_id="s-mcp")
    mcp.tool("write", uri="viking://resources/mcp/e.md", content="# Epsilon\n\nDraft.\n")
    deployment.settle()
    mcp.tool("edit", uri="viking://resources/mcp/e.md", old_string="Draft.", new_string="Final.")
    mcp.tool("add_resource", name="runbook.md", content="# Runbook\n\nRestart the API.\n")
    # A URL goes to the fetch worker (no network in the drive: it ends on its DNS failure).
    fetched = mcp.tool("add_resource", url="https://docs.example.invalid/mcp.html")
    deployment.settle()
    assert alice.get_task(fetched["task_id"])["status"] == "failed"
    mcp.tool("forget", uri="viking://resources/mcp/e.md")
    # Remembered into a session with an idle policy: the first arms its timer, the second
    # moves it.
    alice.create_session("s3", options={"auto_commit_policy": {"idle_seconds": 3600}})
    for text in ("I prefer dark mode.", "I work from Oslo."):
        mcp.tool("remember", messages=[{"role": "user", "content": text}], session_id="s3")
    checks = mcp.tool("health")["checks"]
    assert set(checks.values()) == {"ok"}, checks
    deployment.settle()
    assert mcp.called == tools, tools - mcp.called


def _failures(alice: SyncHTTPClient, raw: Http, deployment: Deployment) -> None:
    """Failure paths and their recovery, each with the calls it makes."""
    recorder, settle = deployment.recorder, deployment.settle
    # not retried by the adapter
    refused: dict[str, Any] = {"code": "AccessDeniedException", "status": 403}
    # A semantic job fails once (the embedding model refuses) and succeeds on its retry.
    with recorder.failing("semantic", "bedrock-runtime", "InvokeModel", times=1, **refused):
        task = alice.write("viking://resources/notes/f.md", "# Zeta\n\nRetried.\n", wait=False)[
            "task_id"
        ]
        settle()
    assert alice.get_task(task)["status"] == "completed"
    # A semantic job short of time indexes a group of files, then queues the rest of its work
    # (here: the directory refresh) on its own queue, and the next job completes the task.
    with deployment.short_of_time("semantic", 20.0):
        task = alice.write("viking://resources/notes/g.md", "# Eta\n\nContinued.\n", wait=False)[
            "task_id"
        ]
        settle()
    assert alice.get_task(task)["status"] == "completed"
    # An extraction runs out of attempts: its archive is marked failed and the job goes to
    # the DLQ; redriven, it succeeds, drops the failure note and clears the session's block.
    alice.add_message("s-fail", "user", "I keep my notes in Markdown.")
    archive = raw("POST", "/api/v1/sessions/s-fail/commit", json={})["result"]["archive_uri"]
    with recorder.failing("memory", "bedrock-runtime", "InvokeModel", **refused):
        settle()
    archive_id = archive.rstrip("/").rsplit("/", 1)[-1]
    assert alice.get_session("s-fail")["failed_archive"] == archive_id
    # Queue status reports the dead letter (its count and error) from the DLQ, and peeking
    # leaves it there for the redrive.
    commits = raw("GET", "/api/v1/observer/system")["result"]["queues"]["SessionCommit"]
    assert commits["error_count"] == 1 and len(commits["errors"]) == 1, commits
    assert deployment.redrive("memory") == 1
    settle()
    assert alice.get_session("s-fail")["failed_archive"] is None
    # SQS refuses the extraction job of a commit: the dedup claim taken for it is released.
    # Once by the auto-commit worker (it retries; the session has nothing left to commit) ...
    for sid in ("s4", "s5"):
        alice.create_session(sid, options={"auto_commit_policy": {"idle_seconds": 1}})
        alice.add_message(sid, "user", "Tabs, not spaces.")
    time.sleep(1.2)
    with recorder.failing(
        "autocommit", "sqs", "SendMessage", times=1, code="RequestThrottled"
    ) as fault:
        assert deployment.fire_schedules({"s4", "s5"}) == 2
        settle()
    assert fault.hits == 1
    assert {alice.get_session(sid)["commit_count"] for sid in ("s4", "s5")} == {1}
    # ... and once by MCP's remember, which reports the failure.
    with recorder.failing("mcp", "sqs", "SendMessage", times=1, code="RequestThrottled"):
        Mcp(raw).tool(
            "remember", ok=False, messages=[{"role": "user", "content": "Remember the milk."}]
        )
    # That commit is left half-done (archived, its job not queued): the stack's own rate
    # schedule, the sweeper of half-done commits, finishes it.
    assert deployment.fire_stack_schedules() >= 1
    settle()


def _remote(alice: SyncHTTPClient, raw: Http, settle: Any) -> None:
    """A remote source and its watch. The drive has no network: the fetch worker runs the
    fetch, which ends on its DNS failure, and removes the reserved root."""
    added = raw(
        "POST",
        "/api/v1/resources",
        json={"path": "https://docs.example.invalid/guide.html", "watch_interval": 60},
    )["result"]
    root, watch = added["root_uri"], added["watch_task_id"]
    settle()
    task = alice.get_task(added["task_id"])
    assert task["status"] == "failed" and "DNS" in task["error"], task
    raw("GET", "/api/v1/watches")
    raw("GET", "/api/v1/watches", params={"to_uri": root})
    raw("GET", f"/api/v1/watches/{watch}")
    raw("PATCH", f"/api/v1/watches/{watch}", json={"reason": "docs"})
    raw("PATCH", "/api/v1/watches", params={"to_uri": root}, json={"is_active": True})
    raw("POST", f"/api/v1/watches/{watch}/trigger")
    raw("POST", "/api/v1/watches/trigger", params={"to_uri": root})
    settle()
    raw("DELETE", f"/api/v1/watches/{watch}")
    again = raw(
        "POST",
        "/api/v1/resources",
        json={"path": "https://docs.example.invalid/faq.html", "watch_interval": 60},
    )["result"]
    raw("DELETE", "/api/v1/watches", params={"to_uri": again["root_uri"]})
    # due at once: the watch sweep (the stack's rate schedule, fired later) queues its fetch
    raw(
        "POST",
        "/api/v1/resources",
        json={"path": "https://docs.example.invalid/due.html", "watch_interval": 0.0001},
    )
    settle()


def _tasks(alice: SyncHTTPClient, raw: Http, root: SyncHTTPClient, settle: Any) -> None:
    pending = alice.write("viking://resources/notes/d.md", "# Delta\n")
    task_id = pending.get("task_id")
    assert task_id, pending
    assert alice.list_tasks()
    alice.get_task(task_id)
    raw("POST", f"/api/v1/tasks/{task_id}/cancel", expect=200)
    settle()
    root.list_tasks()
    json.dumps(alice.wait_processed())
