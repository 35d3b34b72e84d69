"""The JSON of a set of representative calls is what it was when the results were still dicts
(tests/fixtures/wire_shapes.json): the same keys, the same nulls, the same value types and, where
a value is stable, the same value. Typed results must not change the wire.

`SKALD_RECORD_WIRE=1` rewrites the fixture from the server under test (only when the wire is
meant to change, with the change reviewed in the fixture's diff).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.support.server import SkaldServer

FIXTURE = Path(__file__).parent.parent / "fixtures" / "wire_shapes.json"

_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")
_HEX = re.compile(r"^[0-9a-f]{16,64}$")
_SESSION_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{16}")
_UUIDISH = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
# Values that move between runs (times, ids, scores, sizes of generated text) keep their type.
_VOLATILE_KEYS = {
    "score",
    "origin_score",
    "time_score",
    "created_at",
    "updated_at",
    "processing_seconds",
    "mod_time",
    "modTime",
    "last_commit_at",
    "duration_ms",
    "abstract",
    "overview",
    "size",
    "rendered",
    "digest",
    "text",
    "pending_tokens",
    "used_tokens",
    "estimatedTokens",
    "tokens",
    "elapsed_ms",
    "expires_at",
    "last_used_at",
    "uptime_s",
    "version",
    "success_rate",
    "count",
    "total",
    "user_key",
    "processed",
    "pending",
    "in_progress",
    "requeue_count",
    "error_count",
    "page",
    "next_cursor",
}


def normalise(value: Any, key: str = "", account: str = "") -> Any:
    if isinstance(value, dict):
        return {k: normalise(v, k, account) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [normalise(v, key, account) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return "<float>"
    if isinstance(value, int):
        return "<int>" if key in _VOLATILE_KEYS or key.endswith(("_at", "_ms", "_s")) else value
    if isinstance(value, str):
        if key in _VOLATILE_KEYS:
            return "<str>"
        value = value.replace(account, "<acct>") if account else value
        if _ISO.match(value):
            return "<iso>"
        if _HEX.match(value):
            return "<hex>"
        return _UUIDISH.sub("<id>", _SESSION_ID.sub("<sid>", value))
    return value


def _calls(c: httpx.Client) -> list[tuple[str, httpx.Response]]:
    out: list[tuple[str, httpx.Response]] = []

    def call(name: str, method: str, url: str, **kw: Any) -> dict[str, Any]:
        resp = c.request(method, url, **kw)
        assert resp.status_code < 300, (name, resp.status_code, resp.text)
        out.append((name, resp))
        body: dict[str, Any] = resp.json()
        return body

    call(
        "mkdir",
        "POST",
        "/api/v1/fs/mkdir",
        json={"uri": "viking://resources/wire", "description": "wire shapes"},
    )
    call(
        "write",
        "POST",
        "/api/v1/content/write",
        json={
            "uri": "viking://resources/wire/a.md",
            "content": "# Alpha\n\nalpha beta gamma\n",
            "mode": "create",
            "wait": True,
        },
    )
    call(
        "write_append",
        "POST",
        "/api/v1/content/write",
        json={
            "uri": "viking://resources/wire/a.md",
            "content": "delta\n",
            "mode": "append",
            "wait": True,
            "tags": ["k=v"],
        },
    )
    call(
        "batch_write",
        "POST",
        "/api/v1/content/batch-write",
        json={
            "root_uri": "viking://resources/wire",
            "wait": True,
            "operations": [
                {"uri": "viking://resources/wire/b.md", "content": "bravo\n"},
                {"uri": "viking://resources/wire/sub/c.md", "content": "c\n"},
            ],
        },
    )
    call("read", "GET", "/api/v1/content/read", params={"uri": "viking://resources/wire/a.md"})
    call("abstract", "GET", "/api/v1/content/abstract", params={"uri": "viking://resources/wire"})
    call("ls", "GET", "/api/v1/fs/ls", params={"uri": "viking://resources/wire"})
    call(
        "ls_simple",
        "GET",
        "/api/v1/fs/ls",
        params={"uri": "viking://resources/wire", "simple": "true"},
    )
    call(
        "ls_original",
        "GET",
        "/api/v1/fs/ls",
        params={
            "uri": "viking://resources/wire",
            "output": "original",
            "recursive": "true",
            "include_tags": "true",
        },
    )
    call("tree", "GET", "/api/v1/fs/tree", params={"uri": "viking://resources"})
    call("stat", "GET", "/api/v1/fs/stat", params={"uri": "viking://resources/wire/a.md"})
    call("stat_dir", "GET", "/api/v1/fs/stat", params={"uri": "viking://resources/wire"})
    call("attrs", "GET", "/api/v1/fs/attrs", params={"uri": "viking://resources/wire/a.md"})
    call(
        "set_tags",
        "POST",
        "/api/v1/content/set_tags",
        json={"uri": "viking://resources/wire/b.md", "tags": ["x=y"]},
    )
    call(
        "fs_set_tags",
        "POST",
        "/api/v1/fs/attrs/set_tags",
        json={"uri": "viking://resources/wire", "tags": ["x=z"], "recursive": True},
    )
    call("reindex", "POST", "/api/v1/content/reindex", json={"uri": "viking://resources/wire/b.md"})
    call(
        "cp",
        "POST",
        "/api/v1/fs/cp",
        json={
            "from_uri": "viking://resources/wire/b.md",
            "to_uri": "viking://resources/wire/b2.md",
        },
    )
    call(
        "mv",
        "POST",
        "/api/v1/fs/mv",
        json={
            "from_uri": "viking://resources/wire/b2.md",
            "to_uri": "viking://resources/wire/b3.md",
        },
    )
    call("wait_mv", "POST", "/api/v1/system/wait", json={"timeout": 60})
    call(
        "rm",
        "DELETE",
        "/api/v1/fs",
        params={"uri": "viking://resources/wire/b3.md", "wait": "true"},
    )
    call("wait", "POST", "/api/v1/system/wait", json={"timeout": 60})
    call(
        "find",
        "POST",
        "/api/v1/search/find",
        json={"query": "alpha gamma", "target_uri": "viking://resources/wire"},
    )
    call(
        "find_prov",
        "POST",
        "/api/v1/search/find",
        json={
            "query": "alpha",
            "include_provenance": True,
            "read_content": True,
            "telemetry": True,
            "level": 2,
        },
    )
    call("search", "POST", "/api/v1/search/search", json={"query": "bravo"})
    call(
        "search_context",
        "POST",
        "/api/v1/search/search",
        json={"query": "alpha", "mode": "context", "max_tokens": 200},
    )
    call(
        "grep",
        "POST",
        "/api/v1/search/grep",
        json={"uri": "viking://resources/wire", "pattern": "alpha", "after_context": 1},
    )
    call(
        "glob",
        "POST",
        "/api/v1/search/glob",
        json={"uri": "viking://resources/wire", "pattern": "**/*.md"},
    )
    up = call(
        "temp_upload",
        "POST",
        "/api/v1/resources/temp_upload",
        files={"file": ("notes.md", b"# Notes\n\nsome notes\n")},
    )
    call(
        "add_resource",
        "POST",
        "/api/v1/resources",
        json={
            "temp_file_id": up["result"]["temp_file_id"],
            "to": "viking://resources/notes",
            "wait": True,
        },
    )
    call(
        "consistency", "POST", "/api/v1/system/consistency", json={"uri": "viking://resources/wire"}
    )
    call("system_status", "GET", "/api/v1/system/status")

    sess = call(
        "session_create",
        "POST",
        "/api/v1/sessions",
        json={"auto_commit_policy": {"pending_messages": 50}},
    )
    sid = sess["result"]["session_id"]
    call(
        "session_message",
        "POST",
        f"/api/v1/sessions/{sid}/messages",
        json={"role": "user", "content": "I prefer short answers with code first."},
    )
    call(
        "session_batch",
        "POST",
        f"/api/v1/sessions/{sid}/messages/batch",
        json={
            "messages": [
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "parts": [{"type": "text", "text": "thanks"}]},
            ]
        },
    )
    call("session_get", "GET", f"/api/v1/sessions/{sid}")
    call("session_list", "GET", "/api/v1/sessions")
    call(
        "session_config",
        "PATCH",
        f"/api/v1/sessions/{sid}/config",
        json={"memory_extraction_config": {"events": {"tags": ["t=1"]}}},
    )
    call("session_context", "GET", f"/api/v1/sessions/{sid}/context")
    committed = call("commit", "POST", f"/api/v1/sessions/{sid}/commit", json={})
    call("wait_commit", "POST", "/api/v1/system/wait", json={"timeout": 60})
    call("archive", "GET", f"/api/v1/sessions/{sid}/archives/archive_001")
    call("tool_results", "GET", f"/api/v1/sessions/{sid}/tool-results")
    call("session_stats", "GET", f"/api/v1/stats/sessions/{sid}")
    task_id = committed["result"].get("task_id")
    if task_id:
        call("task", "GET", f"/api/v1/tasks/{task_id}")
    call("tasks", "GET", "/api/v1/tasks", params={"limit": 2})
    call("tasks_page", "GET", "/api/v1/tasks", params={"limit": 2, "pagination": "cursor"})
    call("session_delete", "DELETE", f"/api/v1/sessions/{sid}")

    call(
        "skill_add",
        "POST",
        "/api/v1/skills",
        json={
            "data": "---\nname: wire-skill\ndescription: Checks wire shapes.\n---\n\n"
            "# Wire skill\n\nUse it to check shapes.\n",
            "wait": True,
        },
    )
    call("skill_list", "GET", "/api/v1/skills")
    call("skill_get", "GET", "/api/v1/skills/wire-skill")
    call("skill_find", "POST", "/api/v1/skills/find", json={"query": "wire shapes"})
    call(
        "skill_validate",
        "POST",
        "/api/v1/skills/validate",
        json={"data": "---\nname: other\ndescription: d\n---\n\nbody\n"},
    )
    call("skill_delete", "DELETE", "/api/v1/skills/wire-skill")
    call("memory_stats", "GET", "/api/v1/stats/memories")
    call("vector_count", "GET", "/api/v1/debug/vector/count")
    call("debug_health", "GET", "/api/v1/debug/health")
    call("watches", "GET", "/api/v1/watches")
    return out


def _admin_calls(c: httpx.Client, account: str) -> list[tuple[str, httpx.Response]]:
    out: list[tuple[str, httpx.Response]] = []

    def call(name: str, method: str, url: str, **kw: Any) -> dict[str, Any]:
        resp = c.request(method, url, **kw)
        assert resp.status_code < 300, (name, resp.status_code, resp.text)
        out.append((name, resp))
        body: dict[str, Any] = resp.json()
        return body

    other = account + "-adm"
    call(
        "account_create",
        "POST",
        "/api/v1/admin/accounts",
        json={"account_id": other, "admin_user_id": "boss"},
    )
    call("account_get", "GET", f"/api/v1/admin/accounts/{other}")
    call("account_usage", "GET", f"/api/v1/admin/accounts/{other}/usage")
    call("user_register", "POST", f"/api/v1/admin/accounts/{other}/users", json={"user_id": "bob"})
    call("users", "GET", f"/api/v1/admin/accounts/{other}/users")
    call("user_get", "GET", f"/api/v1/admin/accounts/{other}/users/bob")
    call(
        "user_role", "PUT", f"/api/v1/admin/accounts/{other}/users/bob/role", json={"role": "admin"}
    )
    call("user_key", "POST", f"/api/v1/admin/accounts/{other}/users/bob/key")
    key = call(
        "key_create", "POST", f"/api/v1/admin/accounts/{other}/users/bob/keys", json={"name": "ci"}
    )
    call("keys", "GET", f"/api/v1/admin/accounts/{other}/users/bob/keys")
    call(
        "key_revoke",
        "DELETE",
        f"/api/v1/admin/accounts/{other}/users/bob/keys/{key['result']['key_id']}",
    )
    call("user_delete", "DELETE", f"/api/v1/admin/accounts/{other}/users/bob")
    call("account_delete", "DELETE", f"/api/v1/admin/accounts/{other}")
    call("audit", "GET", "/api/v1/console/audit", params={"page_size": 1})
    return out


def _shape(name: str, resp: httpx.Response, account: str) -> dict[str, Any]:
    return {"status": resp.status_code, "body": normalise(resp.json(), account=account)}


def test_the_json_of_representative_calls_is_unchanged(dev_server: SkaldServer) -> None:
    account = "acct-" + uuid.uuid4().hex[:10]
    headers = {"X-OpenViking-Account": account, "X-OpenViking-User": "alice"}
    with httpx.Client(base_url=dev_server.url, timeout=120, headers=headers) as c:
        c.get("/api/v1/fs/ls", params={"uri": "viking://"})
        calls = _calls(c) + _admin_calls(c, account)
    got = {name: _shape(name, resp, account) for name, resp in calls}
    if os.environ.get("SKALD_RECORD_WIRE") == "1":
        FIXTURE.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(FIXTURE.read_text())
    assert set(got) == set(want)
    for name in want:
        assert got[name] == want[name], name
