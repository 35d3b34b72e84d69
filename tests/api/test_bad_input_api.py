"""Hostile and malformed input gets a clear 4xx in the error envelope and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import OpenVikingError

from tests.support.server import SkaldServer

BAD_URIS = [
    "viking://resources/../user/bob",
    "viking://resources/a/../../x",
    "viking://resources/%2e%2e/x",
    "viking://resources/%2E%2E%2Fescape",
    "viking://resources/a%2fb",
    "viking://resources/a%5cb",
    "viking://resources/a\\b",
    "viking://resources//double",
    "viking://resources/./here",
    "viking://foo/bar",
    "viking://temp/x",
    "viking://queue/x",
    "viking://upload/x",
    "/resources/x",
    "resources/x",
    "viking://resources/{calendar:nope}",
    "viking://resources/{unknown}",
    "viking://user/../default",
    "viking://resources/a\x00b",
]


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "blobs" in p.parts and ".locks" not in p.parts
    }


def envelope(resp: httpx.Response) -> dict[str, Any]:
    body = resp.json()
    assert body["status"] == "error", body
    assert set(body["error"]) >= {"code", "message"}
    error: dict[str, Any] = body["error"]
    return error


@pytest.fixture
def http(dev_server: SkaldServer, account: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=dev_server.url,
        timeout=30,
        headers={"X-OpenViking-Account": account, "X-OpenViking-User": "alice"},
    ) as c:
        c.get("/api/v1/fs/ls", params={"uri": "viking://"})  # create the preset tree
        yield c


@pytest.mark.parametrize("uri", BAD_URIS)
def test_bad_uris_are_400_and_write_nothing(
    http: httpx.Client, dev_server: SkaldServer, uri: str
) -> None:
    before = snapshot(dev_server.data_dir)
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/api/v1/content/read", {"params": {"uri": uri}}),
        ("GET", "/api/v1/fs/ls", {"params": {"uri": uri}}),
        ("GET", "/api/v1/fs/stat", {"params": {"uri": uri}}),
        ("POST", "/api/v1/content/write", {"json": {"uri": uri + "/f.md", "content": "x"}}),
        ("POST", "/api/v1/fs/mkdir", {"json": {"uri": uri}}),
        ("POST", "/api/v1/fs/mv", {"json": {"from_uri": "viking://resources", "to_uri": uri}}),
        ("DELETE", "/api/v1/fs", {"params": {"uri": uri, "recursive": "true"}}),
    ]
    for method, path, kw in requests:
        resp = http.request(method, path, **kw)
        assert resp.status_code == 400, (method, path, resp.text)
        assert envelope(resp)["code"] in {"INVALID_URI", "INVALID_ARGUMENT"}
    assert snapshot(dev_server.data_dir) == before


def test_unknown_scope_message(http: httpx.Client) -> None:
    err = envelope(http.get("/api/v1/fs/ls", params={"uri": "viking://foo"}))
    assert err["code"] == "INVALID_URI" and "Invalid scope 'foo'" in err["message"]


def test_reserved_short_form_hint_for_non_root(key_admin: SyncHTTPClient) -> None:
    with pytest.raises(OpenVikingError) as exc:
        key_admin.ls("viking://user/memories")
    assert exc.value.code == "INVALID_URI" and "viking://~/" in exc.value.message


def test_malformed_json_and_unknown_fields(http: httpx.Client) -> None:
    resp = http.post(
        "/api/v1/content/write", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert resp.status_code == 400 and envelope(resp)["code"] == "INVALID_ARGUMENT"
    resp = http.post(
        "/api/v1/content/write", json={"uri": "viking://resources/a.md", "content": "x", "bogus": 1}
    )
    err = envelope(resp)
    assert resp.status_code == 400 and "bogus" in err["message"]
    resp = http.post("/api/v1/content/write", json={"uri": "viking://resources/a.md"})
    assert resp.status_code == 400
    assert envelope(resp)["details"]["validation_errors"][0]["loc"][-1] == "content"


def test_unknown_route_and_method(http: httpx.Client) -> None:
    resp = http.get("/api/v1/nope")
    assert resp.status_code == 404 and envelope(resp) == {
        "code": "NOT_FOUND",
        "message": "Not Found: GET /api/v1/nope is not implemented by this server",
        "details": {"method": "GET", "path": "/api/v1/nope"},
    }
    resp = http.get("/nope")
    assert resp.status_code == 404 and envelope(resp) == {
        "code": "NOT_FOUND",
        "message": "Not Found",
    }
    resp = http.put("/api/v1/fs/ls")
    assert resp.status_code == 405 and envelope(resp)["code"] == "UNKNOWN"


def test_oversize_write_upload_and_body(http: httpx.Client, dev_server: SkaldServer) -> None:
    before = snapshot(dev_server.data_dir)
    resp = http.post(
        "/api/v1/content/write",
        json={"uri": "viking://resources/big.md", "content": "x" * (300 * 1024)},
    )
    assert resp.status_code == 413
    assert envelope(resp)["details"]["limit"] == 256 * 1024
    resp = http.post(
        "/api/v1/resources/temp_upload", files={"file": ("big.bin", b"\0" * (600 * 1024))}
    )
    assert resp.status_code == 413 and envelope(resp)["details"]["limit"] == 512 * 1024
    resp = http.post(
        "/api/v1/content/write",
        content=b"{" + b" " * (3 * 1024 * 1024) + b"}",
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 413
    assert snapshot(dev_server.data_dir) == before


def test_unknown_task_and_bad_task_queries(http: httpx.Client) -> None:
    resp = http.get("/api/v1/tasks/does-not-exist")
    assert resp.status_code == 404
    assert envelope(resp)["message"] == "Task not found or expired"
    assert http.get("/api/v1/tasks", params={"limit": 0}).status_code == 400
    assert http.get("/api/v1/tasks", params={"status": "bogus"}).status_code == 400


def test_write_reserved_names_and_directories(http: httpx.Client) -> None:
    for uri in [
        "viking://resources/x/.abstract.md",
        "viking://resources/.overview.md",
        "viking://resources/x/.f.md.attrs.json",
    ]:
        resp = http.post("/api/v1/content/write", json={"uri": uri, "content": "x"})
        assert resp.status_code == 400, uri
    resp = http.post("/api/v1/content/write", json={"uri": "viking://resources", "content": "x"})
    assert resp.status_code == 400
    http.post("/api/v1/fs/mkdir", json={"uri": "viking://resources/adir"})
    resp = http.post(
        "/api/v1/content/write", json={"uri": "viking://resources/adir", "content": "x"}
    )
    assert resp.status_code == 409


def test_preset_and_scope_roots_cannot_be_removed(http: httpx.Client) -> None:
    for uri in [
        "viking://resources",
        "viking://user/alice",
        "viking://~/memories",
        "viking://agent/skills",
    ]:
        resp = http.delete("/api/v1/fs", params={"uri": uri, "recursive": "true"})
        assert resp.status_code == 403, uri
    assert http.get("/api/v1/fs/stat", params={"uri": "viking://~/memories"}).status_code == 200


def test_hostile_zip_is_rejected(http: httpx.Client, tmp_path: Path) -> None:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("ok.md", "fine")
        zf.writestr("../../escape.md", "evil")
    up = http.post("/api/v1/resources/temp_upload", files={"file": ("evil.zip", buf.getvalue())})
    tid = up.json()["result"]["temp_file_id"]
    resp = http.post("/api/v1/resources", json={"temp_file_id": tid, "source_name": "evil"})
    assert resp.status_code == 400
    assert http.get("/api/v1/fs/stat", params={"uri": "viking://resources/evil"}).status_code == 404


def test_local_paths_and_unfetchable_urls_are_refused(http: httpx.Client) -> None:
    resp = http.post("/api/v1/resources", json={"path": "/etc/passwd"})
    assert resp.status_code == 403
    resp = http.post("/api/v1/resources", json={"path": "git://127.0.0.1/x.git"})
    assert resp.status_code == 400
    resp = http.post("/api/v1/resources", json={})
    assert resp.status_code == 400
