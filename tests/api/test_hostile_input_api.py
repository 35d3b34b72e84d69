"""Inputs that used to answer 500: each now gets a 4xx in the error envelope and writes nothing,
and an unexpected error still leaves the keep-alive connection usable."""

from __future__ import annotations

import io
import socket
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import OpenVikingError

from tests.api.test_bad_input_api import envelope
from tests.support.server import SkaldServer


def settled(http: httpx.Client, server: SkaldServer) -> dict[str, bytes]:
    """The caller's account as stored, once the background work has finished."""
    assert http.post("/api/v1/system/wait").status_code == 200
    root = server.data_dir / "blobs" / http.headers["X-OpenViking-Account"]
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def refused(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    err = envelope(resp)
    assert err["code"] == code, err
    return err


def test_bad_task_cursor_is_400(http: httpx.Client) -> None:
    for cursor in ("abc", "null", "eyJ4Ijog", "\u00e9\u00e8"):
        refused(
            http.get("/api/v1/tasks", params={"cursor": cursor, "pagination": "cursor"}),
            400,
            "INVALID_ARGUMENT",
        )
    assert http.get("/api/v1/tasks", params={"pagination": "cursor"}).status_code == 200


def test_archive_number_beyond_64_bits_is_400(http: httpx.Client) -> None:
    http.post("/api/v1/sessions/s1/messages", json={"role": "user", "content": "hi"})
    for archive in ("archive_9223372036854775808", "archive_" + "9" * 40, "archive_\u0663"):
        refused(http.get(f"/api/v1/sessions/s1/archives/{archive}"), 400, "INVALID_ARGUMENT")
    refused(http.get("/api/v1/sessions/s1/archives/archive_999"), 404, "NOT_FOUND")


def test_tags_of_the_root(http: httpx.Client, dev_server: SkaldServer) -> None:
    before = settled(http, dev_server)
    for path in ("/api/v1/content/set_tags", "/api/v1/fs/attrs/set_tags"):
        refused(
            http.post(path, json={"uri": "viking://", "tags": ["a=b"]}), 400, "INVALID_ARGUMENT"
        )
    assert settled(http, dev_server) == before
    resp = http.get("/api/v1/fs/attrs", params={"uri": "viking://"})
    assert resp.status_code == 200
    assert resp.json()["result"]["attrs"]["tags"] == []


@pytest.mark.parametrize("length", [243, 244, 250, 255])
def test_names_too_long_for_the_blob_store_are_refused_before_writing(
    client: SyncHTTPClient, http: httpx.Client, dev_server: SkaldServer, length: int
) -> None:
    client.mkdir("viking://resources/long")
    name = "n" * (length - 3) + ".md"
    before = settled(http, dev_server)
    with pytest.raises(OpenVikingError) as exc:
        client.write(f"viking://resources/long/{name}", "x", mode="create")
    assert exc.value.code == "INVALID_URI"
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/api/v1/fs/mkdir", {"json": {"uri": f"viking://resources/long/{name}"}}),
        (
            "POST",
            "/api/v1/content/batch-write",
            {
                "json": {
                    "root_uri": "viking://resources/long",
                    "operations": [
                        {"uri": "viking://resources/long/ok.md", "content": "x"},
                        {"uri": f"viking://resources/long/{name}", "content": "x"},
                    ],
                }
            },
        ),
    ]
    for method, path, kw in requests:
        refused(http.request(method, path, **kw), 400, "INVALID_URI")
    assert settled(http, dev_server) == before


def test_longest_allowed_name_is_stored_with_its_sidecars(client: SyncHTTPClient) -> None:
    uri = "viking://resources/edge/" + "e" * 239 + ".md"  # 242 bytes
    client.write(uri, "# Edge\n\nlongest name\n", mode="create", wait=True)
    assert client.read(uri).startswith("# Edge")
    assert client.stat(uri)["name"].endswith(".md")
    client.rm(uri)


def test_moving_a_tree_where_its_paths_no_longer_fit_writes_nothing(
    client: SyncHTTPClient, http: httpx.Client, dev_server: SkaldServer
) -> None:
    deep = "viking://resources/tree/" + "/".join(["d" * 200] * 3) + "/f.md"
    client.write(deep, "x", wait=False)
    before = settled(http, dev_server)
    target = "viking://resources/" + "t" * 240 + "/" + "u" * 200
    refused(
        http.post(
            "/api/v1/fs/cp",
            json={"from_uri": "viking://resources/tree", "to_uri": target, "recursive": True},
        ),
        400,
        "INVALID_URI",
    )
    assert settled(http, dev_server) == before


def test_filter_with_a_huge_number(http: httpx.Client) -> None:
    for node in (
        {"op": "must", "field": "level", "conds": [10**400]},
        {"op": "range", "field": "created_at", "gte": 10**400},
        {"op": "range", "field": "updated_at", "lt": -(10**400)},
    ):
        for route in ("/api/v1/search/find", "/api/v1/search/search"):
            refused(http.post(route, json={"query": "x", "filter": node}), 400, "INVALID_FILTER")
    # 1e400 is parsed as infinity: not a usable bound either
    body = b'{"query": "x", "filter": {"op": "range", "field": "level", "gte": 1e400}}'
    refused(
        http.post(
            "/api/v1/search/find", content=body, headers={"content-type": "application/json"}
        ),
        400,
        "INVALID_FILTER",
    )


def test_a_level_beyond_64_bits_is_400_on_every_find(
    http: httpx.Client, client: SyncHTTPClient
) -> None:
    # With records in the account, so that the index gets as far as the level
    client.write("viking://resources/lv/a.md", "# A\n\nx marks the spot.\n", wait=True)
    for route in ("/api/v1/skills/find", "/api/v1/search/find", "/api/v1/search/search"):
        for level in ([2**63], [2**64, 1], [-(2**63) - 1]):
            refused(http.post(route, json={"query": "x", "level": level}), 400, "INVALID_ARGUMENT")
    with pytest.raises(OpenVikingError) as info:
        client.find_skills("x", level=[2**63])
    assert info.value.code == "INVALID_ARGUMENT"
    # a filter tree's level and times beyond what an index can compare: the caller's mistake
    for node in (
        {"op": "must", "field": "level", "conds": [2**63]},
        {"op": "range", "field": "created_at", "gte": 1e300},
    ):
        refused(
            http.post("/api/v1/search/find", json={"query": "x", "filter": node}),
            400,
            "INVALID_FILTER",
        )


SURROGATE_BODIES = [
    ("/api/v1/content/write", '{"uri":"viking://resources/s/a.md","content":"\\ud800"}'),
    ("/api/v1/content/write", '{"uri":"viking://resources/s/\\ud800.md","content":"x"}'),
    ("/api/v1/content/write", '{"uri":"viking://resources/s/b.md","content":"a\\udc00b"}'),
    (
        "/api/v1/content/write",
        '{"uri":"viking://resources/s/c.md","content":"\\ud800\\ud800\\udc00"}',
    ),
    ("/api/v1/sessions/s2/messages", '{"role":"user","content":"\\ud800"}'),
    ("/api/v1/search/grep", '{"uri":"viking://resources","pattern":"\\ud800"}'),
    ("/api/v1/search/glob", '{"pattern":"\\udbff*"}'),
    ("/api/v1/search/find", '{"query":"\\ud800"}'),
    ("/api/v1/search/search", '{"query":"x\\ud800","search_type":"keywords"}'),
    ("/api/v1/fs/mkdir", '{"uri":"viking://resources/\\ud800"}'),
]


@pytest.mark.parametrize(("path", "body"), SURROGATE_BODIES)
def test_lone_surrogates_are_400_and_write_nothing(
    http: httpx.Client, dev_server: SkaldServer, path: str, body: str
) -> None:
    before = settled(http, dev_server)
    err = refused(
        http.post(path, content=body.encode(), headers={"content-type": "application/json"}),
        400,
        "INVALID_ARGUMENT",
    )
    assert "surrogate" in err["message"]
    assert settled(http, dev_server) == before


def test_surrogate_pairs_and_escaped_backslashes_are_text(http: httpx.Client) -> None:
    body = (
        '{"uri":"viking://resources/s/pair.md","content":"\\ud83d\\ude00 and \\\\ud800 literally"}'
    )
    resp = http.post(
        "/api/v1/content/write", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert resp.status_code == 200, resp.text
    text = http.get("/api/v1/content/read", params={"uri": "viking://resources/s/pair.md"}).json()[
        "result"
    ]
    assert text == "\U0001f600 and \\ud800 literally"


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _upload(http: httpx.Client, name: str, data: bytes) -> str:
    resp = http.post("/api/v1/resources/temp_upload", files={"file": (name, data)})
    assert resp.status_code == 200, resp.text
    temp_file_id: str = resp.json()["result"]["temp_file_id"]
    return temp_file_id


def _falsify_sizes(data: bytes, declared: int) -> bytes:
    """Rewrites every member's uncompressed size (local and central headers)."""
    out = bytearray(data)
    at = out.find(b"PK\x03\x04")
    while at >= 0:
        out[at + 22 : at + 26] = struct.pack("<I", declared)
        at = out.find(b"PK\x03\x04", at + 4)
    at = out.find(b"PK\x01\x02")
    while at >= 0:
        out[at + 24 : at + 28] = struct.pack("<I", declared)
        at = out.find(b"PK\x01\x02", at + 4)
    return bytes(out)


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _deflate_zeros(megabytes: int) -> tuple[bytes, int]:
    """A raw deflate stream of `megabytes` MiB of zeros and its CRC."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = bytes(1 << 20)
    parts = [comp.compress(block) for _ in range(megabytes)]
    parts.append(comp.flush())
    crc = 0
    for _ in range(megabytes):
        crc = zlib.crc32(block, crc)
    return b"".join(parts), crc


def _bomb(megabytes: int, declared: int) -> bytes:
    """A zip with one deflated member of `megabytes` MiB of zeros claiming `declared` bytes."""
    raw, crc = _deflate_zeros(megabytes)
    name = b"bomb/zeros.md"
    local = (
        struct.pack(
            "<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(raw), declared, len(name), 0
        )
        + name
    )
    central = (
        struct.pack(
            "<4sHHHHHHIIIHHHHHII",
            b"PK\x01\x02",
            20,
            20,
            0,
            8,
            0,
            0,
            crc,
            len(raw),
            declared,
            len(name),
            0,
            0,
            0,
            0,
            0,
            0,
        )
        + name
    )
    end = struct.pack(
        "<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local) + len(raw), 0
    )
    return local + raw + central + end


def test_zip_member_with_a_falsified_size_is_400_in_bounded_memory(
    http: httpx.Client, dev_server: SkaldServer
) -> None:
    assert dev_server.proc is not None
    small = _falsify_sizes(_zip({"d/a.md": b"hello " * 2000, "d/b.md": b"x"}), 10)
    tid = _upload(http, "small.zip", small)
    before = settled(http, dev_server)
    err = refused(
        http.post("/api/v1/resources", json={"temp_file_id": tid, "wait": True}),
        400,
        "INVALID_ARGUMENT",
    )
    assert "archive" in err["message"].lower()
    assert settled(http, dev_server) == before
    # 256 MiB of zeros declared as 10 bytes: inflated a chunk at a time, never whole
    tid = _upload(http, "bomb.zip", _bomb(256, 10))
    peak = _peak_rss_kib(dev_server.proc.pid)
    before = settled(http, dev_server)
    resp = http.post("/api/v1/resources", json={"temp_file_id": tid, "wait": True})
    assert resp.status_code in (400, 413), resp.text
    assert settled(http, dev_server) == before
    assert _peak_rss_kib(dev_server.proc.pid) - peak < 100 * 1024


def test_zip_with_a_corrupt_deflate_stream_is_400(
    http: httpx.Client, dev_server: SkaldServer
) -> None:
    data = bytearray(_zip({"d/a.md": b"hello world " * 500}))
    start = data.find(b"PK\x03\x04") + 30 + len("d/a.md")
    data[start + 2 : start + 40] = b"\xff" * 38
    tid = _upload(http, "corrupt.zip", bytes(data))
    before = settled(http, dev_server)
    refused(
        http.post("/api/v1/resources", json={"temp_file_id": tid, "wait": True}),
        400,
        "INVALID_ARGUMENT",
    )
    assert settled(http, dev_server) == before


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before a response"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside a response"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def test_unexpected_error_is_a_500_envelope_and_the_connection_stays_usable(
    dev_server: SkaldServer,
) -> None:
    with socket.create_connection(("127.0.0.1", dev_server.port), timeout=30) as sock:
        for _ in range(2):
            sock.sendall(b"GET /api/v1/debug/fault HTTP/1.1\r\nHost: t\r\n\r\n")
            status, headers, body = _read_response(sock)
            assert status == 500
            assert headers.get("connection", "").lower() != "close"
            assert b'"code":"INTERNAL"' in body and b'"status":"error"' in body
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
            status, _, body = _read_response(sock)
            assert status == 200 and b'"healthy":true' in body


MANAGED_NAMES = (
    ".overview.md",
    ".abstract.md",
    ".attrs.json",
    ".a.md.parsed.json",
    ".a.md.attrs.json",
    ".meta.json",
    ".done",
    ".failed.json",
)


def test_no_route_creates_a_name_the_product_manages(
    http: httpx.Client, client: SyncHTTPClient, dev_server: SkaldServer
) -> None:
    # A directory by such a name stood where its parent's sidecar goes: every write in it then
    # failed its summary. Refused as a file, a directory, any directory above a new entry, a
    # move or copy target and an upload's target.
    client.write("viking://resources/m/ok.md", "# Ok\n\nfine\n", wait=True)
    up = http.post("/api/v1/resources/temp_upload", files={"file": ("n.md", b"# N\n")})
    temp_id = up.json()["result"]["temp_file_id"]
    before = settled(http, dev_server)
    for name in MANAGED_NAMES:
        target = f"viking://resources/m/{name}"
        for route, body in (
            ("/api/v1/fs/mkdir", {"uri": target}),
            ("/api/v1/fs/mkdir", {"uri": f"{target}/below"}),
            ("/api/v1/content/write", {"uri": target, "content": "x", "mode": "create"}),
            ("/api/v1/content/write", {"uri": f"{target}/a.md", "content": "x", "mode": "create"}),
            ("/api/v1/fs/mv", {"from_uri": "viking://resources/m/ok.md", "to_uri": target}),
            (
                "/api/v1/fs/cp",
                {"from_uri": "viking://resources/m/ok.md", "to_uri": f"{target}/ok.md"},
            ),
            ("/api/v1/resources", {"temp_file_id": temp_id, "to": target}),
            (
                "/api/v1/resources",
                {"temp_file_id": temp_id, "parent": target, "create_parent": True},
            ),
        ):
            refused(http.post(route, json=body), 400, "INVALID_ARGUMENT")
    with pytest.raises(OpenVikingError) as info:
        client.mkdir("viking://resources/m/.overview.md")
    assert info.value.code == "INVALID_ARGUMENT"
    assert settled(http, dev_server) == before
    # The folder is unharmed: a write in it is summarised as ever.
    written = http.post(
        "/api/v1/content/write",
        json={
            "uri": "viking://resources/m/two.md",
            "content": "# Two\n",
            "mode": "create",
            "wait": True,
        },
    ).json()["result"]
    assert written["semantic_status"] == "complete", written


DECEPTIVE = (
    "\u202e",
    "\u202a",
    "\u2066",
    "\u2069",
    "\u200e",
    "\u061c",
    "\u200b",
    "\ufeff",
    "\u00ad",
    "\u2060",
    "\u0085",
    "\u2028",
    "\U000e0041",
)


def test_names_with_invisible_or_reordering_characters_are_refused(
    http: httpx.Client, dev_server: SkaldServer
) -> None:
    # "report\u202etxt.exe" lists as "reportexe.txt": no new name may hold such a character.
    http.post(
        "/api/v1/content/write",
        json={"uri": "viking://resources/b/ok.md", "content": "x", "mode": "create"},
    )
    before = settled(http, dev_server)
    for ch in DECEPTIVE:
        name = f"report{ch}txt.exe"
        for route, body in (
            ("/api/v1/fs/mkdir", {"uri": f"viking://resources/b/{name}"}),
            (
                "/api/v1/content/write",
                {"uri": f"viking://resources/b/{name}", "content": "x", "mode": "create"},
            ),
            (
                "/api/v1/content/write",
                {"uri": f"viking://resources/{name}/a.md", "content": "x", "mode": "create"},
            ),
            (
                "/api/v1/fs/mv",
                {
                    "from_uri": "viking://resources/b/ok.md",
                    "to_uri": f"viking://resources/b/{name}",
                },
            ),
        ):
            err = refused(http.post(route, json=body), 400, "INVALID_URI")
            assert f"U+{ord(ch):04X}" in err["message"], err
    assert settled(http, dev_server) == before
    # An uploaded file's name is made addressable instead: the character becomes "_".
    up = http.post(
        "/api/v1/resources/temp_upload", files={"file": ("inv\u202eoice.md", b"# Invoice\n")}
    )
    added = http.post(
        "/api/v1/resources", json={"temp_file_id": up.json()["result"]["temp_file_id"]}
    ).json()["result"]
    assert added["root_uri"].startswith("viking://resources/inv_oice"), added
    # The joiners are kept: scripts and emoji sequences are written with them.
    for name in ("family\U0001f468\u200d\U0001f469.md", "mi\u200cshavad.md"):
        ok = http.post(
            "/api/v1/content/write",
            json={"uri": f"viking://resources/b/{name}", "content": "x", "mode": "create"},
        )
        assert ok.status_code == 200, ok.text
