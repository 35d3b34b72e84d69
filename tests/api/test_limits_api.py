"""Limits: request heads, path depth, upload names, and back-pressure on queued work."""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openviking_sdk import SyncHTTPClient

from tests.api.conftest import make_client
from tests.api.test_bad_input_api import envelope
from tests.api.test_hostile_input_api import _read_response
from tests.support.server import SkaldServer


def _head_response(port: int, head: bytes) -> tuple[int, bytes, bool]:
    """Sends a request head; (status, body, whether the server then closed the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        # refused while we were still sending: the answer is already there
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head)
        status, _, body = _read_response(sock)
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
        return status, body, closed


def test_oversize_request_heads_are_431(dev_server: SkaldServer) -> None:
    big = b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
    many = (
        b"GET /health HTTP/1.1\r\nHost: t\r\n"
        + b"".join(b"X-H%d: 1\r\n" % i for i in range(150))
        + b"\r\n"
    )
    long_url = b"GET /health?" + b"q" * 70000 + b" HTTP/1.1\r\nHost: t\r\n\r\n"
    for head in (big, many, long_url):
        status, body, closed = _head_response(dev_server.port, head)
        assert status == 431 and closed
        assert b'"REQUEST_HEADER_FIELDS_TOO_LARGE"' in body
    ok = b"GET /health HTTP/1.1\r\nHost: t\r\nX-Fine: " + b"a" * 30000 + b"\r\n\r\n"
    assert _head_response(dev_server.port, ok)[0] == 200


def test_a_head_that_never_ends_is_cut_at_the_limit(dev_server: SkaldServer) -> None:
    with socket.create_connection(("127.0.0.1", dev_server.port), timeout=30) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        sent = 0
        try:
            while sent < 8 * (1 << 20):  # the server must answer long before 8 MiB
                sock.sendall(b"a" * 16384)
                sent += 16384
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, _, _ = _read_response(sock)
        assert status == 431
        # refused once the head passed the limit (what is sent after that only fills the
        # kernel's socket buffers before the reset)
        assert sent < 8 * (1 << 20)


def test_deep_paths_are_refused_before_any_work(http: httpx.Client) -> None:
    deep = "viking://resources/" + "/".join(["a"] * 1000)
    started = time.monotonic()
    resp = http.post("/api/v1/fs/mkdir", json={"uri": deep})
    assert resp.status_code == 400 and envelope(resp)["code"] == "INVALID_URI"
    assert time.monotonic() - started < 2
    resp = http.post(
        "/api/v1/content/write",
        json={"uri": "viking://resources/" + "/".join(["b"] * 64) + ".md", "content": "x"},
    )
    assert resp.status_code == 400 and "deeper than 64" in envelope(resp)["message"]
    assert http.get("/api/v1/fs/stat", params={"uri": "viking://resources/a"}).status_code == 404
    at_limit = "viking://resources/" + "/".join(["c"] * 62) + "/f.md"  # 64 segments
    assert (
        http.post("/api/v1/content/write", json={"uri": at_limit, "content": "x"}).status_code
        == 200
    )


@pytest.fixture
def http(dev_server: SkaldServer, account: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=dev_server.url,
        timeout=60,
        headers={"X-OpenViking-Account": account, "X-OpenViking-User": "alice"},
    ) as c:
        yield c


@pytest.mark.parametrize(
    "name",
    [
        "a%00b.md",
        "a%2fb.md",
        "%2e%2e.md",
        "a{x}.md",
        "a{calendar:today}.md",
        "tab\there.md",
        "a%2Eb.md",
    ],
)
def test_upload_names_become_addressable_entries(
    client: SyncHTTPClient, tmp_path: Path, name: str
) -> None:
    source = tmp_path / name
    source.write_text("# Title\n\nbody text\n")
    result = client.add_resource(str(source))
    root = result["root_uri"]
    files = [e for e in client.ls(root, recursive=True) if not e["isDir"]]
    assert len(files) == 1
    uri = files[0]["uri"]
    assert "{" not in uri and "%2" not in uri.lower() and "%00" not in uri
    assert client.read(uri).startswith("# Title")
    assert client.stat(uri)["isDir"] is False
    client.rm(root, recursive=True)
    assert all(e["uri"] != root for e in client.ls("viking://resources"))


def test_zip_member_names_become_addressable_and_collisions_are_refused(
    client: SyncHTTPClient, http: httpx.Client, tmp_path: Path
) -> None:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pkg/a{x}/b%2f.md", "# B\n")
        zf.writestr("pkg/c.md", "# C\n")
    up = http.post("/api/v1/resources/temp_upload", files={"file": ("pkg.zip", buf.getvalue())})
    added = http.post(
        "/api/v1/resources",
        json={"temp_file_id": up.json()["result"]["temp_file_id"], "wait": True},
    )
    assert added.status_code == 200, added.text
    root = added.json()["result"]["root_uri"]
    uris = sorted(e["uri"] for e in client.ls(root, recursive=True) if not e["isDir"])
    assert uris == [f"{root}/a(x)/b_2f.md", f"{root}/c.md"]
    assert client.read(uris[0]) == "# B\n"

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("twins/a{x}.md", "1")
        zf.writestr("twins/a(x).md", "2")
    up = http.post("/api/v1/resources/temp_upload", files={"file": ("twins.zip", buf.getvalue())})
    resp = http.post(
        "/api/v1/resources",
        json={"temp_file_id": up.json()["result"]["temp_file_id"], "wait": True},
    )
    assert resp.status_code == 400 and "both be stored" in envelope(resp)["message"]


# --------------------------------------------------------------------------------------------
# Back-pressure: a server whose queues are never drained, with a bound of 3 jobs.


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    server = SkaldServer(
        tmp_path_factory.mktemp("busy") / "data",
        env={
            "SKALD_WORKER_THREADS": "0",
            "SKALD_MAX_QUEUED_JOBS": "3",
            "SKALD_QUEUE_DEPTH_CACHE_S": "0",
            "SKALD_RETRY_AFTER_S": "7",
        },
    )
    server.start()
    yield server
    server.stop()


def test_queued_work_beyond_the_bound_is_429_with_retry_after(busy_server: SkaldServer) -> None:
    account = "acct-" + uuid.uuid4().hex[:8]
    with httpx.Client(
        base_url=busy_server.url,
        timeout=60,
        headers={"X-OpenViking-Account": account, "X-OpenViking-User": "alice"},
    ) as http:
        for i in range(3):
            resp = http.post(
                "/api/v1/content/write",
                json={"uri": f"viking://resources/q/{i}.md", "content": "x"},
            )
            assert resp.status_code == 200, resp.text
        refused = [
            http.post(
                "/api/v1/content/write",
                json={"uri": "viking://resources/q/late.md", "content": "x"},
            ),
            http.post("/api/v1/fs/mkdir", json={"uri": "viking://resources/late"}),
            http.post("/api/v1/sessions/s1/messages", json={"role": "user", "content": "x"}),
            http.post("/api/v1/sessions/s1/commit", json={}),
            http.delete("/api/v1/fs", params={"uri": "viking://resources/q/0.md"}),
        ]
        for resp in refused:
            assert resp.status_code == 429, resp.text
            assert resp.headers["Retry-After"] == "7"
            err = envelope(resp)
            assert err["code"] == "RESOURCE_EXHAUSTED"
            details = err["details"]
            assert (details["limit"], details["value"]) == ("jobs_in_flight", 3)
            assert details["current"] >= 3
        # nothing of the refused requests happened; reads still work
        for uri in ("viking://resources/q/late.md", "viking://resources/late"):
            assert http.get("/api/v1/fs/stat", params={"uri": uri}).status_code == 404
        assert (
            http.get("/api/v1/fs/stat", params={"uri": "viking://resources/q/0.md"}).status_code
            == 200
        )
        assert http.get("/api/v1/sessions/s1").status_code == 404
        assert http.get("/api/v1/fs/ls", params={"uri": "viking://resources/q"}).status_code == 200
    sdk = make_client(busy_server.url, account=account, user="alice")
    try:
        with pytest.raises(Exception) as exc:
            sdk.write("viking://resources/q/sdk.md", "x")
        assert getattr(exc.value, "code", "") == "RESOURCE_EXHAUSTED"
    finally:
        sdk.close()
    # Another account is not held back by this one's backlog.
    other = make_client(busy_server.url, account="acct-" + uuid.uuid4().hex[:8], user="bob")
    try:
        other.write("viking://resources/mine.md", "mine")
        assert other.read("viking://resources/mine.md") == "mine"
    finally:
        other.close()


LIMITS_ROOT = "limits-root-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def busy_key_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    server = SkaldServer(
        tmp_path_factory.mktemp("busy-keys") / "data",
        root_api_key=LIMITS_ROOT,
        env={"SKALD_WORKER_THREADS": "0", "SKALD_QUEUE_DEPTH_CACHE_S": "0"},
    )
    server.start()
    yield server
    server.stop()


def test_an_accounts_plan_sets_its_jobs_in_flight(busy_key_server: SkaldServer) -> None:
    """The plan's jobs_in_flight (an override root sets through the settings route) bounds
    the account's queued work, at once in the process that changed it."""
    root = make_client(busy_key_server.url, api_key=LIMITS_ROOT)
    account = "acct-" + uuid.uuid4().hex[:8]
    key = root.admin_create_account(account, "boss")["user_key"]
    sdk = make_client(busy_key_server.url, api_key=key)
    try:
        sdk.write("viking://resources/one.md", "one")
        sdk.write("viking://resources/two.md", "two")  # the default bound (1000) admits it
        with httpx.Client(base_url=busy_key_server.url, timeout=60) as http:
            changed = http.patch(
                f"/api/v1/admin/accounts/{account}/settings",
                headers={"X-API-Key": LIMITS_ROOT},
                json={"limits": {"jobs_in_flight": 2}},
            )
            assert changed.status_code == 200, changed.text
        with pytest.raises(Exception) as exc:
            sdk.write("viking://resources/three.md", "three")
        assert getattr(exc.value, "code", "") == "RESOURCE_EXHAUSTED"
        details = getattr(exc.value, "details", None) or {}
        assert (details.get("limit"), details.get("value"), details.get("current")) == (
            "jobs_in_flight",
            2,
            2,
        )
    finally:
        sdk.close()
        root.close()
