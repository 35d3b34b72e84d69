"""Archive imports on `skald serve`: a zipped directory above the inline limits is written by
the fetch worker (the add answers with a task at once), a small one is still written inside
the request, bad archives still get their 4xx, and a server killed in the middle of an import
resumes it from its checkpoint on restart. The 10,000-file import on aws-local is in
test_aws_local_imports_api.py."""

from __future__ import annotations

import io
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import OpenVikingError

from skald.services.faults import EXIT_CODE
from tests.api.conftest import ROOT_KEY, make_client
from tests.api.test_sessions_api import wait_task
from tests.support.server import SkaldServer

LIMITS = {
    "SKALD_IMPORT_INLINE_MAX_ENTRIES": "40",
    "SKALD_MAX_ZIP_BYTES": str(2 * 1024 * 1024),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    s = SkaldServer(tmp_path_factory.mktemp("imports") / "data", env=LIMITS)
    s.start()
    yield s
    s.stop()


@pytest.fixture
def c(server: SkaldServer, account: str) -> Iterator[SyncHTTPClient]:
    client = make_client(server.url, account=account, user="alice")
    yield client
    client.close()


def make_tree(root: Path, n: int) -> Path:
    for i in range(n):
        path = root / f"part{i % 4}" / f"note{i:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {i}\n\nmarker{i:04d}x appears once.\n")
    return root


def files_below(c: SyncHTTPClient, uri: str) -> list[str]:
    return sorted(e["uri"] for e in c.tree(uri) if not e["isDir"])


def test_a_large_archive_is_imported_by_the_worker(c: SyncHTTPClient, tmp_path: Path) -> None:
    res = c.add_resource(str(make_tree(tmp_path / "big", 120)))
    assert res["status"] == "success" and res["root_uri"] == "viking://resources/big"
    task = c.get_task(res["task_id"])
    assert task is not None and task["meta"]["import"]["entries"] == 120
    done = wait_task(c, res["task_id"], timeout=120)
    assert done["status"] == "completed", done
    assert done["meta"]["import"]["done"] == 120 and done["meta"]["import"]["queued"]
    uris = files_below(c, "viking://resources/big")
    assert len(uris) == len(set(uris)) == 120
    assert c.read("viking://resources/big/part3/note0007.md") == (
        "# Note 7\n\nmarker0007x appears once.\n"
    )
    hits = c.grep("viking://resources/big", "marker0042x")
    assert [m["uri"] for m in hits["matches"]] == ["viking://resources/big/part2/note0042.md"]


def test_wait_true_waits_for_the_import_and_its_processing(
    c: SyncHTTPClient, tmp_path: Path
) -> None:
    res = c.add_resource(str(make_tree(tmp_path / "waited", 60)), wait=True)
    assert res["status"] == "success", res
    assert res["context_count"] == 60
    assert c.get_task(res["task_id"])["status"] == "completed"
    found = c.search("marker0013x", options={"search_type": "keywords"})
    files = [h["uri"] for h in found["resources"] if h["level"] == 2]
    assert files == ["viking://resources/waited/part1/note0013.md"]


def test_a_small_archive_is_still_written_in_the_request(c: SyncHTTPClient, tmp_path: Path) -> None:
    res = c.add_resource(str(make_tree(tmp_path / "small", 12)))
    # No worker involved: the files are there when the add answers.
    assert len(files_below(c, "viking://resources/small")) == 12
    task = c.get_task(res["task_id"])
    assert task is not None and "import" not in task["meta"]


def test_a_second_import_of_the_same_source_gets_a_numbered_root(
    c: SyncHTTPClient, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path / "twice", 50)
    first, second = c.add_resource(str(tree)), c.add_resource(str(tree))
    assert [first["root_uri"], second["root_uri"]] == [
        "viking://resources/twice",
        "viking://resources/twice_1",
    ]
    for res in (first, second):
        assert wait_task(c, res["task_id"], timeout=120)["status"] == "completed"
    assert len(files_below(c, "viking://resources/twice_1")) == 50


def _zip(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return out.getvalue()


def _add_zip(http: httpx.Client, data: bytes, **body: Any) -> httpx.Response:
    up = http.post("/api/v1/resources/temp_upload", files={"file": ("bad.zip", data)})
    assert up.status_code == 200, up.text
    return http.post(
        "/api/v1/resources", json={"temp_file_id": up.json()["result"]["temp_file_id"], **body}
    )


def test_bad_large_archives_still_get_their_4xx(server: SkaldServer, account: str) -> None:
    files = {f"bad/n{i}.md": f"# {i}\n".encode() * 40 for i in range(50)}
    corrupt = bytearray(_zip(files))
    at = corrupt.index(b"bad/n0.md") + len("bad/n0.md") + 4
    corrupt[at] ^= 0xFF
    cases = [
        (_zip({**files, "bad/../../escape.md": b"x"}), 400),
        (_zip({**files, "bad/a_.md": b"1", "bad/a\x07.md": b"2"}), 400),  # same stored name
        (_zip({**files, "bad/zeros.bin": b"\0" * (3 * 1024 * 1024)}), 413),  # over the limit
        (bytes(corrupt), 400),  # a member that does not inflate to what it says
        (_zip({**files, "bad/sub/x.md": b"1", "bad/sub": b"2"}), 409),  # a file and a folder
    ]
    headers = {"X-OpenViking-Account": account, "X-OpenViking-User": "alice"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        http.get("/api/v1/fs/ls", params={"uri": "viking://"})
        for data, status in cases:
            got = _add_zip(http, data)
            assert got.status_code == status, got.text
            assert got.json()["status"] == "error"
        # Nothing was reserved, nothing queued: no root, no task.
        listed = http.get("/api/v1/fs/ls", params={"uri": "viking://resources"}).json()
        assert listed["result"] == []
        tasks = http.get("/api/v1/tasks", params={"task_type": "add_resource"}).json()
        assert tasks["result"] == []
        # A `to` that names a file is refused as an inline add refuses it.
        http.post(
            "/api/v1/content/write",
            json={"uri": "viking://resources/taken.md", "content": "x", "mode": "create"},
        )
        got = _add_zip(http, _zip(files), to="viking://resources/taken.md")
        assert got.status_code == 400, got.text


def test_tags_go_with_every_imported_file(c: SyncHTTPClient, tmp_path: Path) -> None:
    res = c.add_resource(str(make_tree(tmp_path / "tagged", 45)), options={"tags": ["src=zip"]})
    assert wait_task(c, res["task_id"], timeout=120)["status"] == "completed"
    attrs = c.attrs("viking://resources/tagged/part0/note0044.md")["attrs"]
    assert attrs["tags"] == ["src=zip"]


def test_an_import_killed_mid_way_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    """The server dies (os._exit, as kill -9) right after the first chunk of 250 files is
    written and checkpointed; restarted, the import goes on from the checkpoint (a crash
    before it rewrites that chunk only: tests/unit/services/ingest/test_archive_imports.py):
    every file once, and their processing queued once."""
    server = SkaldServer(
        tmp_path / "data",
        env={**LIMITS, "SKALD_FAULT_POINTS": "import.after_checkpoint=exit"},
    )
    server.start()
    c = make_client(server.url, account="crash", user="alice")
    try:
        tree = make_tree(tmp_path / "crashy", 600)
        try:
            res = c.add_resource(str(tree))
            task_id = res["task_id"]
        except Exception:  # the worker may kill the server before the answer leaves
            task_id = None
        assert server.proc is not None and server.proc.wait(timeout=60) == EXIT_CODE
        c.close()
        server.extra_env = LIMITS
        server.start()
        c = make_client(server.url, account="crash", user="alice")
        if task_id is None:  # the retry of the same upload is answered with the same task
            [task] = c.list_tasks(task_type="add_resource")
            task_id = task["task_id"]
        done = wait_task(c, task_id, timeout=180)
        assert done["status"] == "completed", done
        progress = done["meta"]["import"]
        # The first run checkpointed its first chunk; the second went on from there.
        assert progress["done"] == 600 and progress["runs"] == 2
        assert progress["resumed_from"] == 250
        uris = files_below(c, "viking://resources/crashy")
        assert len(uris) == len(set(uris)) == 600
        assert "marker0599x" in c.read("viking://resources/crashy/part3/note0599.md")
        for i in (0, 250, 599):
            found = c.search(f"marker{i:04d}x", options={"search_type": "keywords"})
            files = [h["uri"] for h in found["resources"] if h["level"] == 2]
            assert files == [f"viking://resources/crashy/part{i % 4}/note{i:04d}.md"], files
        checked = httpx.post(
            f"{server.url}/api/v1/system/consistency",
            headers={"X-OpenViking-Account": "crash", "X-OpenViking-User": "alice"},
            json={"uri": "viking://resources"},
            timeout=60,
        ).json()["result"]
        assert checked["ok"], checked
    finally:
        c.close()
        server.stop()


def test_an_import_over_the_plans_index_records_is_refused_before_its_root(
    tmp_path: Path,
) -> None:
    """The plan's index records (one per file) are checked by the request that queues an
    import, as by an inline add: over the limit, QUOTA_EXCEEDED and nothing reserved."""
    server = SkaldServer(tmp_path / "data", root_api_key=ROOT_KEY, env=LIMITS)
    server.start()
    root = make_client(server.url, api_key=ROOT_KEY)
    try:
        account = "imp-" + uuid.uuid4().hex[:8]
        key = root.admin_create_account(account, "boss")["user_key"]
        patched = httpx.patch(
            f"{server.url}/api/v1/admin/accounts/{account}/settings",
            json={"limits": {"index_records": 100}},
            headers={"X-API-Key": ROOT_KEY},
            timeout=30,
        )
        assert patched.status_code == 200, patched.text
        c = make_client(server.url, api_key=key)
        with pytest.raises(OpenVikingError) as err:
            c.add_resource(str(make_tree(tmp_path / "many", 120)))
        assert err.value.code == "QUOTA_EXCEEDED"
        assert dict(err.value.details or {})["requested"] == 120
        assert c.ls("viking://resources") == []
        res = c.add_resource(str(make_tree(tmp_path / "fits", 60)))  # still a worker import
        assert wait_task(c, res["task_id"], timeout=120)["status"] == "completed"
        c.close()
    finally:
        root.close()
        server.stop()
