"""Watches through openviking-sdk: add_resource(..., watch_interval=...) on a git repository
served from loopback; list / get / update / trigger / delete by task id and by URI; a
re-fetch re-indexes changed files only and removes removed ones; the schedule fires on its own
and survives a restart."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openviking_sdk import SyncHTTPClient

from tests.api.conftest import make_client
from tests.support.remote_fixtures import Site, commit_files, make_repo, push_bare, serve_site
from tests.support.server import SkaldServer

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git client")


@pytest.fixture(scope="module")
def git_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("watched")


@pytest.fixture(scope="module")
def site(git_root: Path) -> Iterator[Site]:
    make_repo(
        git_root / "team",
        "notes",
        {
            "alpha.md": b"# Alpha\n\nThe alpha note is about glaciers carving fjords.\n",
            "beta.md": b"# Beta\n\nThe beta note is about volcanoes.\n",
            "gamma.md": b"# Gamma\n\nThe gamma note is about coral reefs.\n",
        },
    )
    with serve_site(git_root) as s:
        yield s


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    srv = SkaldServer(
        tmp_path_factory.mktemp("watches") / "data", env={"SKALD_FETCH_ALLOW_LOOPBACK": "true"}
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def ov(server: SkaldServer, account: str) -> Iterator[SyncHTTPClient]:
    c = make_client(server.url, account=account, user="alice")
    yield c
    c.close()


def _result(resp: dict[str, object]) -> dict[str, object]:
    inner = resp.get("result", resp)
    assert isinstance(inner, dict)
    return inner


def _wait_task(ov: SyncHTTPClient, task_id: str) -> dict[str, object]:
    deadline = time.time() + 60
    while time.time() < deadline:
        task = ov.get_task(task_id)
        if task["status"] in {"completed", "failed", "cancelled"}:
            done: dict[str, object] = task
            return done
        time.sleep(0.2)
    raise AssertionError(f"task {task_id} did not finish")


def test_a_watch_refreshes_its_source(
    ov: SyncHTTPClient, site: Site, git_root: Path, server: SkaldServer, account: str
) -> None:
    out = ov.add_resource(
        f"{site.url}/git/team/notes.git",
        wait=True,
        options={"watch_interval": 60, "reason": "team notes"},
    )
    root = "viking://resources/team/notes"
    assert out["root_uri"] == root and out["watch_task_id"]
    watch_id = str(out["watch_task_id"])

    listed = _result(ov.list_watches())
    assert listed["total"] == 1
    tasks = listed["tasks"]
    assert isinstance(tasks, list)
    [watch] = tasks
    assert watch["task_id"] == watch_id and watch["to_uri"] == root
    assert watch["watch_interval"] == 60 and watch["is_active"] is True
    assert watch["reason"] == "team notes" and watch["next_execution_time"]
    assert _result(ov.get_watch(watch_id))["path"] == f"{site.url}/git/team/notes.git"
    assert _result(ov.list_watches(to_uri=root))["task_id"] == watch_id

    # the source changes: beta edited, gamma removed, delta added; alpha untouched
    commit_files(
        git_root / "team" / "notes-work",
        {
            "beta.md": b"# Beta\n\nThe beta note is now about geysers in Iceland.\n",
            "gamma.md": None,
            "delta.md": b"# Delta\n\nThe delta note is about river sediment.\n",
        },
        "change",
    )
    push_bare(git_root / "team", "notes")
    trig = _result(ov.trigger_watch(to_uri=root))
    assert trig == {"task_id": watch_id, "to_uri": root, "scheduled": True}
    refresh = str(_result(ov.get_watch(watch_id))["last_task_id"])
    task = _wait_task(ov, refresh)
    assert task["status"] == "completed", task["error"]
    # only what changed is indexed again; the removed file leaves
    assert task["result"]["indexed_files"] == 2, task["result"]  # type: ignore[index]
    assert task["result"]["removed"] == 1  # type: ignore[index]
    files = sorted(e["uri"] for e in ov.ls(root, recursive=True, simple=False) if not e["isDir"])
    assert files == [f"{root}/alpha.md", f"{root}/beta.md", f"{root}/delta.md"]
    assert "geysers" in ov.read(f"{root}/beta.md")
    hits = ov.find("coral reefs", target_uri=root)["resources"]
    assert all("gamma" not in h["uri"] for h in hits)

    # updates: pause keeps the cadence; a short interval fires on its own
    paused = _result(ov.update_watch(watch_id, is_active=False))
    assert paused["is_active"] is False and paused["next_execution_time"] is None
    assert paused["watch_interval"] == 60
    fast = _result(ov.update_watch(to_uri=root, is_active=True, watch_interval=0.02))
    assert fast["is_active"] is True
    before = fast["last_execution_time"]
    deadline = time.time() + 20
    while _result(ov.get_watch(watch_id))["last_execution_time"] == before:
        assert time.time() < deadline, "the schedule did not fire"
        time.sleep(0.3)
    ov.update_watch(watch_id, watch_interval=60)

    # the watch survives a restart of the server
    server.restart()
    again = make_client(server.url, account=account, user="alice")
    try:
        assert _result(again.get_watch(watch_id))["to_uri"] == root
        deleted = _result(again.delete_watch(watch_id))
        assert deleted == {"task_id": watch_id, "to_uri": root, "deleted": True}
        assert _result(again.list_watches())["total"] == 0
        with pytest.raises(Exception, match="(?i)not found|404"):
            again.get_watch(watch_id)
    finally:
        again.close()


def test_watch_errors(ov: SyncHTTPClient, server: SkaldServer, site: Site, account: str) -> None:
    headers = {"X-OpenViking-Account": account, "X-OpenViking-User": "alice"}
    with httpx.Client(base_url=server.url, headers=headers) as http:
        up = http.post("/api/v1/resources/temp_upload", files={"file": ("a.md", b"# A\n")})
        tid = up.json()["result"]["temp_file_id"]
        resp = http.post("/api/v1/resources", json={"temp_file_id": tid, "watch_interval": 5})
        assert resp.status_code == 400 and "remote sources" in resp.text
        assert http.get("/api/v1/watches/nope").status_code == 404
        assert (
            http.post(
                "/api/v1/watches/trigger", params={"to_uri": "viking://resources/none"}
            ).status_code
            == 404
        )
        out = http.post(
            "/api/v1/resources",
            json={
                "path": f"{site.url}/git/team/notes.git",
                "to": "viking://resources/w1",
                "watch_interval": 30,
            },
        ).json()["result"]
        resp = http.patch(f"/api/v1/watches/{out['watch_task_id']}", json={"watch_interval": 0})
        assert resp.status_code == 400
        resp = http.patch(
            f"/api/v1/watches/{out['watch_task_id']}",
            params={"to_uri": "viking://resources/other"},
            json={},
        )
        assert resp.status_code == 400
        huge = http.post(
            "/api/v1/resources",
            json={
                "path": f"{site.url}/git/team/notes.git",
                "to": "viking://resources/w2",
                "watch_interval": 1e12,
            },
        )
        assert huge.status_code == 400 and "minutes" in huge.text
        assert (
            http.get("/api/v1/fs/stat", params={"uri": "viking://resources/w2"}).status_code == 404
        )
        again = http.post(
            "/api/v1/resources",
            json={
                "path": f"{site.url}/git/team/notes.git",
                "to": "viking://resources/w1",
                "watch_interval": 30,
            },
        )
        assert again.status_code == 409
    other = make_client(server.url, account=account + "-other", user="alice")
    try:
        assert _result(other.list_watches())["total"] == 0
    finally:
        other.close()
