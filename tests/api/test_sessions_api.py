"""Sessions through openviking-sdk: messages, parts, commit, memory extraction, context."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    OpenVikingError,
)
from openviking_sdk.message import ContextPart, ImagePart, TextPart, ToolPart

from tests.support.server import SkaldServer


def wait_task(c: SyncHTTPClient, task_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        task: dict[str, Any] | None = c.get_task(task_id)
        if task and task["status"] in {"completed", "failed", "cancelled"}:
            return task
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} did not finish")


def read_json(c: SyncHTTPClient, uri: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(c.read(uri))
    return data


def test_create_get_list_delete(client: SyncHTTPClient) -> None:
    res = client.create_session()
    sid = res["session_id"]
    assert len(sid) == len("20261202-131356-77dbb879add34b2c") and sid[8] == "-"
    assert res["uri"] == f"viking://user/alice/sessions/{sid}"
    assert (
        res["user"] == {"account_id": client._async_client._account, "user_id": "alice"}
        if hasattr(client._async_client, "_account")
        else True
    )
    client.create_session("s-named")
    with pytest.raises(AlreadyExistsError):
        client.create_session("s-named")
    ids = {s["session_id"] for s in client.list_sessions()}
    assert {sid, "s-named"} <= ids
    meta = client.get_session("s-named")
    assert meta["message_count"] == 0 and meta["commit_count"] == 0
    with pytest.raises(NotFoundError):
        client.get_session("nope")
    assert client.session_exists("nope") is False
    assert client.get_session("auto-made", auto_create=True)["session_id"] == "auto-made"
    client.delete_session("s-named")
    with pytest.raises(NotFoundError):
        client.get_session("s-named")
    with pytest.raises(NotFoundError):
        client.stat("viking://~/sessions/s-named")


def test_messages_parts_and_context(client: SyncHTTPClient) -> None:
    s = client.session("parts")  # add_message auto-creates the session
    s.add_message("user", "hello there")
    s.add_message(
        "assistant",
        parts=[
            TextPart(text="see the doc"),
            ContextPart(uri="viking://~/resources/doc", context_type="resource", abstract="a doc"),
            ToolPart(
                tool_id="t1",
                tool_name="search",
                tool_input={"q": "x"},
                tool_output="found",
                tool_status="completed",
            ),
            ImagePart(url="https://example.com/cat.png", detail="low"),
        ],
    )
    res = client.batch_add_messages(
        "parts", [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]
    )
    assert res["added"] == 2 and res["message_count"] == 4
    ctx = s.get_session_context()
    msgs = ctx["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "tool"]
    parts = msgs[1]["parts"]
    assert parts[1]["uri"] == "viking://user/alice/resources/doc"  # ~ expanded
    assert parts[2]["tool_input"] == {"q": "x"} and parts[2]["tool_status"] == "completed"
    assert parts[3]["image_url"] == {"url": "https://example.com/cat.png", "detail": "low"}
    assert all(m["id"].startswith("msg_") for m in msgs)
    assert ctx["estimatedTokens"] > 0 and ctx["stats"]["totalArchives"] == 0


def test_bad_messages(client: SyncHTTPClient, dev_server: SkaldServer, account: str) -> None:
    client.create_session("bad")
    for parts in (
        [{"type": "image_url", "image_url": {"url": ""}}],
        [{"type": "context", "uri": "viking://resources/../x"}],
        [{"type": "tool", "tool_status": "exploded"}],
        [{"type": "context", "uri": "viking://resources/x", "context_type": "x"}],
    ):
        with pytest.raises(OpenVikingError) as exc:
            client.add_message("bad", "user", parts=parts)
        assert exc.value.code in {"INVALID_ARGUMENT", "INVALID_URI"}
    with pytest.raises(OpenVikingError) as exc:
        client.add_message("bad", "user", "x" * 300_000)
    assert exc.value.code == "PAYLOAD_TOO_LARGE"
    with pytest.raises(InvalidArgumentError):
        client.batch_add_messages("bad", [{"role": "user", "content": "x"}] * 101)
    headers = {"X-OpenViking-Account": account, "X-OpenViking-User": "alice"}
    with httpx.Client(base_url=dev_server.url, headers=headers) as h:
        r = h.post("/api/v1/sessions", json={"auto_commit_policy": {"pending_tokens": -1}})
        assert r.status_code == 400
        r = h.post("/api/v1/sessions", json={"auto_commit_policy": {"bogus": 1}})
        assert r.status_code == 400
        r = h.post("/api/v1/sessions", json={"memory_policy": {"self": "yes"}})
        assert r.status_code == 400
        r = h.post("/api/v1/sessions/nope/commit", json={})
        assert r.status_code == 404
        r = h.post("/api/v1/sessions/bad/commit", json={"keep_recent_count": -1})
        assert r.status_code == 400
        r = h.post("/api/v1/sessions/bad/messages", json={"role": "user"})
        assert r.status_code == 400  # neither content nor parts
        r = h.post("/api/v1/sessions/bad/messages", json={"role": "user", "parts": []})
        assert r.status_code == 400
        r = h.post("/api/v1/sessions/a..b%2F/messages", json={"role": "user", "content": "x"})
        assert r.status_code in {400, 404}
    assert client.get_session("bad")["message_count"] == 0  # nothing half-written


def test_commit_extracts_memories_and_they_are_found(client: SyncHTTPClient) -> None:
    s = client.session("chat1")
    s.add_message("user", "Hi! My name is Alice Martin and I work at Acme Robotics.")
    s.add_message("assistant", "Nice to meet you, Alice.")
    s.add_message("user", "I prefer green tea over coffee in the morning.")
    s.add_message("assistant", "Noted: green tea.")
    res = s.commit(options={"event_tags": ["project=demo"]})
    assert res["status"] == "accepted" and res["archived"] is True
    assert res["archive_uri"] == "viking://user/alice/sessions/chat1/history/archive_001"
    task = wait_task(client, res["task_id"])
    assert task["status"] == "completed", task
    base = res["archive_uri"]
    diff = read_json(client, f"{base}/memory_diff.json")
    assert diff["summary"]["total_adds"] >= 2
    types = {op["memory_type"] for op in diff["operations"]["adds"]}
    assert "preferences" in types and "events" in types
    done = read_json(client, f"{base}/.done")
    assert len(done["completed_memory_steps"]["long_term"]) == 4
    archived = s.get_archive("archive_001")
    assert len(archived["messages"]) == 4 and archived["abstract"]
    meta = client.get_session("chat1")
    assert meta["message_count"] == 0 and meta["commit_count"] == 1
    assert (
        meta["memories_extracted"]["total"]
        == diff["summary"]["total_adds"] + diff["summary"]["total_updates"]
    )
    pref = next(op for op in diff["operations"]["adds"] if op["memory_type"] == "preferences")
    assert "tea" in client.read(pref["uri"]).lower()
    assert "MEMORY_FIELDS" in client.read_raw(pref["uri"])
    assert "MEMORY_FIELDS" not in client.read(pref["uri"])
    event = next(op for op in diff["operations"]["adds"] if op["memory_type"] == "events")
    assert "project=demo" in client.attrs(event["uri"])["attrs"]["tags"]
    # a new session finds the extracted preference
    client.create_session("chat2")
    hits = client.search(
        "what does the user like to drink", session_id="chat2", options={"context_type": "memory"}
    )
    assert any("preferences" in h["uri"] for h in hits["memories"][:3]), hits
    assert all(h["context_type"] == "memory" for h in hits["memories"])


def test_commit_without_messages_and_keep_recent(client: SyncHTTPClient) -> None:
    client.create_session("k")
    res = client.commit_session("k")
    assert res["status"] == "skipped" and res["reason"] == "no_messages"
    for i in range(5):
        client.add_message("k", "user", f"message {i}")
    res = client.commit_session("k", keep_recent_count=2)
    wait_task(client, res["task_id"])
    assert client.get_session("k")["message_count"] == 2
    assert len(client.get_session_archive("k", "archive_001")["messages"]) == 3
    res = client.commit_session("k")
    assert res["archive_uri"].endswith("archive_002")
    wait_task(client, res["task_id"])
    ctx = client.get_session_context("k")
    assert ctx["messages"] == [] and ctx["stats"]["totalArchives"] == 2
    assert ctx["latest_archive_overview"]
    with pytest.raises(OpenVikingError):
        client.get_session_archive("k", "archive_999")


def test_peer_memories(client: SyncHTTPClient, dev_server: SkaldServer, account: str) -> None:
    client.create_session("peer", options={"memory_policy": {"peer": {"enabled": True}}})
    client.add_message("peer", "user", "My name is Bob and I prefer espresso.", peer_id="bob")
    res = client.commit_session("peer")
    assert wait_task(client, res["task_id"])["status"] == "completed"
    diff = read_json(client, res["archive_uri"] + "/memory_diff.json")
    uris = [op["uri"] for op in diff["operations"]["adds"]]
    assert any(u.startswith("viking://user/alice/peers/bob/memories/") for u in uris), uris
    # an actor peer only sees its own peer subtree
    headers = {
        "X-OpenViking-Account": account,
        "X-OpenViking-User": "alice",
        "X-OpenViking-Actor-Peer": "carol",
    }
    with httpx.Client(base_url=dev_server.url, headers=headers) as h:
        r = h.get("/api/v1/fs/ls", params={"uri": "viking://~/peers"})
        assert r.json()["result"] == []
        r = h.post("/api/v1/search/find", json={"query": "espresso"})
        assert not any("/peers/bob/" in x["uri"] for x in r.json()["result"]["memories"])


def test_concurrent_adds_and_commits(client: SyncHTTPClient) -> None:
    client.create_session("conc")
    errors: list[Exception] = []

    def add(n: int) -> None:
        try:
            for i in range(15):
                client.add_message("conc", "user", f"t{n}-m{i}")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def commit() -> None:
        try:
            for _ in range(5):
                client.commit_session("conc")
                time.sleep(0.01)
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(4)]
    threads += [threading.Thread(target=commit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    client.wait_processed()
    meta = client.get_session("conc")
    seen: list[str] = []
    numbers = []
    for n in range(1, meta["commit_count"] + 1):
        arch = client.get_session_archive("conc", f"archive_{n:03d}")
        numbers.append(n)
        seen += [p["text"] for m in arch["messages"] for p in m["parts"]]
    live = client.get_session_context("conc")["messages"]
    seen += [p["text"] for m in live for p in m["parts"]]
    expected = {f"t{n}-m{i}" for n in range(4) for i in range(15)}
    assert sorted(seen) == sorted(expected)  # each message exactly once
    assert numbers == list(range(1, meta["commit_count"] + 1))


def test_auto_commit_thresholds(client: SyncHTTPClient) -> None:
    client.create_session("auto", options={"auto_commit_policy": {"pending_messages": 3}})
    for i in range(3):
        client.add_message("auto", "user", f"I like number {i}")
    meta = client.get_session("auto")
    assert meta["commit_count"] == 1 and meta["message_count"] == 0
    client.update_session_config("auto", options={"auto_commit_policy": None})
    for i in range(4):
        client.add_message("auto", "user", f"more {i}")
    assert client.get_session("auto")["commit_count"] == 1


def test_idle_auto_commit(client: SyncHTTPClient) -> None:
    client.create_session("idle", options={"auto_commit_policy": {"idle_seconds": 1}})
    client.add_message("idle", "user", "I always use vim for editing.")
    deadline = time.time() + 20
    while time.time() < deadline and client.get_session("idle")["commit_count"] == 0:
        time.sleep(0.2)
    assert client.get_session("idle")["commit_count"] == 1


def test_sessions_are_per_user(dev_server: SkaldServer) -> None:
    from tests.api.conftest import make_client

    acct = "sess-" + uuid.uuid4().hex[:6]
    a = make_client(dev_server.url, account=acct, user="ann")
    b = make_client(dev_server.url, account=acct, user="ben")
    a.create_session("private")
    a.add_message("private", "user", "secret")
    with pytest.raises(NotFoundError):
        b.get_session("private")
    assert b.list_sessions() == []
