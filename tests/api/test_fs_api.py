"""The viking:// filesystem through the real openviking-sdk client against `skald serve`."""

from __future__ import annotations

import base64
import hashlib
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    OpenVikingError,
)


def names(entries: list[dict[str, Any]]) -> list[str]:
    return [e["uri"].rsplit("/", 1)[-1] for e in entries]


def test_health_and_preset_tree(client: SyncHTTPClient) -> None:
    assert client.health() is True
    top = client.ls("viking://")
    assert names(top) == ["agent", "resources", "user"]
    mine = client.ls("viking://user/alice")
    assert {"memories", "resources", "skills", "privacy", "sessions", "peers"} <= set(names(mine))
    assert client.ls("viking://~/") == mine  # ~ expands to the caller's user root
    assert all(e["isDir"] for e in mine)


def test_write_read_stat_and_modes(client: SyncHTTPClient) -> None:
    uri = "viking://resources/notes/today.md"
    res = client.write(uri, "line one\nline two\nline three\n", wait=True)
    assert res["written_bytes"] == len("line one\nline two\nline three\n")
    assert client.read(uri) == "line one\nline two\nline three\n"
    assert client.read(uri, offset=1, limit=1) == "line two\n"
    st = client.stat(uri)
    assert st["isDir"] is False and st["size"] == 29 and len(st["id"]) == 32
    assert client.stat("viking://resources/notes")["isDir"] is True
    client.write(uri, "line four\n", mode="append")
    assert client.read(uri).endswith("line three\nline four\n")
    with pytest.raises(AlreadyExistsError):
        client.write(uri, "clobber", mode="create")
    assert client.read(uri).startswith("line one")  # unchanged by the refused create
    client.write("viking://resources/notes/new.md", "fresh", mode="create")
    assert client.download_bytes("viking://resources/notes/new.md") == b"fresh"


def test_mkdir_abstract_overview_and_sidecars(client: SyncHTTPClient) -> None:
    client.mkdir("viking://resources/proj", description="Project notes about Skald.")
    assert client.abstract("viking://resources/proj") == "Project notes about Skald."
    client.write(
        "viking://resources/proj/design.md", "# Design\n\nPorts and adapters.\n", wait=True
    )
    overview = client.overview("viking://resources/proj")
    assert "design.md" in overview and "Ports and adapters" in overview
    # a file falls back to its directory's sidecars
    assert client.overview("viking://resources/proj/design.md") == overview
    # the user's description survives the refresh of the L0
    assert client.abstract("viking://resources/proj") == "Project notes about Skald."
    visible = names(client.ls("viking://resources/proj"))
    assert visible == ["design.md"]
    hidden = names(client.ls("viking://resources/proj", show_all_hidden=True))
    assert ".abstract.md" in hidden and ".overview.md" in hidden


def test_a_large_directory_lists_a_sample_and_counts_every_child(client: SyncHTTPClient) -> None:
    """Past 32 children the overview lists a sample of them; the abstract still counts all
    (it once counted the sample: "32 files" for 38)."""
    root = "viking://resources/crowded"
    client.mkdir(root)
    ops = [
        {"uri": f"{root}/n{i:02d}.md", "content": f"# Note {i}\n\nAbout item {i}.\n"}
        for i in range(38)
    ]
    ops += [{"uri": f"{root}/sub{k}/inner.md", "content": "inner"} for k in range(2)]
    client.batch_write(root, ops, wait=True)
    assert client.abstract(root).startswith("crowded: 38 files and 2 folders. ")
    overview = client.overview(root)
    listed = [ln for ln in overview.splitlines() if ln.startswith("- ")]
    assert len(listed) == 32
    assert "(8 more entries not shown)" in overview


def test_rm_and_mv(client: SyncHTTPClient) -> None:
    client.write("viking://resources/a/x.md", "x", wait=True)
    client.write("viking://resources/a/sub/y.md", "y", wait=True)
    with pytest.raises(InvalidArgumentError):
        client.rm("viking://resources/a")  # a directory needs recursive
    client.mv("viking://resources/a", "viking://resources/b")
    assert client.read("viking://resources/b/sub/y.md") == "y"
    with pytest.raises(NotFoundError):
        client.stat("viking://resources/a")
    with pytest.raises(InvalidArgumentError):
        client.mv("viking://resources/b", "viking://resources/b/inner")
    client.rm("viking://resources/b/x.md")
    with pytest.raises(NotFoundError):
        client.read("viking://resources/b/x.md")
    with pytest.raises(NotFoundError):
        client.rm("viking://resources/b/x.md")  # a missing path is a 404, not a silent 200
    client.rm("viking://resources/b", recursive=True)
    assert "b" not in names(client.ls("viking://resources"))


def test_a_file_keeps_its_creation_time_through_rewrites_moves_and_copies(
    client: SyncHTTPClient, http: httpx.Client
) -> None:
    """A new file has no attributes file (its first version's mtime is its creation time);
    its first rewrite writes that time down; a move or a copy, whose mtime is new, keeps it."""
    d = "viking://resources/dated"
    client.write(f"{d}/a.md", "first version of a note about herons", wait=True)
    client.write(f"{d}/sub/b.md", "a folder's note about herons", wait=True)
    client.write(f"{d}/c.md", "a note about herons never rewritten", wait=True)
    assert ".a.md.attrs.json" not in names(client.ls(d, show_all_hidden=True))
    between = datetime.fromtimestamp(time.time(), UTC).isoformat()
    time.sleep(0.05)
    client.write(f"{d}/a.md", "second version of a note about herons", wait=True)
    assert ".a.md.attrs.json" in names(client.ls(d, show_all_hidden=True))
    client.mv(f"{d}/a.md", f"{d}/moved.md")
    client.mv(f"{d}/sub", f"{d}/sub2")
    client.mv(f"{d}/c.md", f"{d}/c2.md")
    for src, dst in [("moved.md", "copy.md"), ("sub2", "sub3"), ("c2.md", "c3.md")]:
        res = http.post(
            "/api/v1/fs/cp",
            json={"from_uri": f"{d}/{src}", "to_uri": f"{d}/{dst}", "recursive": True},
        )
        assert res.status_code == 200, res.text
    client.wait_processed()

    def files(field: str, bound: str) -> set[str]:
        flt = {
            "op": "and",
            "conds": [
                {"op": "time_range", "field": field, bound: between},
                {"op": "must", "field": "level", "conds": [2]},
            ],
        }
        res = client.find("herons", target_uri=d, limit=20, options={"filter": flt})
        return {h["uri"].removeprefix(d + "/") for h in res["resources"]}

    every = {"moved.md", "copy.md", "sub2/b.md", "sub3/b.md", "c2.md", "c3.md"}
    assert files("created_at", "lt") == every
    assert files("created_at", "gte") == set()
    assert files("updated_at", "gte") == every  # a copy or a move is a new version


def test_tree_recursive_and_paging(client: SyncHTTPClient) -> None:
    for i in range(5):
        client.write(f"viking://resources/t/d{i}/f.md", f"file {i}")
    tree = client.tree("viking://resources/t")
    rel = sorted(e["rel_path"] for e in tree)
    assert rel == sorted([f"d{i}" for i in range(5)] + [f"d{i}/f.md" for i in range(5)])
    page = client.ls_page("viking://resources/t", limit=2)
    assert len(page["result"]) == 2 and page["has_more"] is True
    simple = client.ls("viking://resources/t", simple=True)
    assert simple[0] == "viking://resources/t/d0"
    rec = client.ls("viking://resources/t", recursive=True)
    assert len(rec) == 10


def test_batch_write_and_conflicts(client: SyncHTTPClient) -> None:
    client.mkdir("viking://resources/batch")
    res = client.batch_write(
        "viking://resources/batch",
        [
            {"uri": "viking://resources/batch/a.md", "content": "A"},
            {
                "uri": "viking://resources/batch/b.bin",
                "content_base64": base64.b64encode(b"\x00\x01").decode(),
            },
        ],
    )
    assert res["written"] == 2
    assert client.download_bytes("viking://resources/batch/b.bin") == b"\x00\x01"
    stale = hashlib.sha256(b"not A").hexdigest()
    with pytest.raises(ConflictError):
        client.batch_write(
            "viking://resources/batch",
            [
                {"uri": "viking://resources/batch/c.md", "content": "C"},
                {"uri": "viking://resources/batch/a.md", "content": "A2", "expected_sha256": stale},
            ],
        )
    # nothing was written by the refused batch
    with pytest.raises(NotFoundError):
        client.read("viking://resources/batch/c.md")
    good = hashlib.sha256(b"A").hexdigest()
    client.batch_write(
        "viking://resources/batch",
        [{"uri": "viking://resources/batch/a.md", "content": "A2", "expected_sha256": good}],
    )
    assert client.read("viking://resources/batch/a.md") == "A2"
    with pytest.raises(NotFoundError):
        client.batch_write(
            "viking://resources/missing",
            [{"uri": "viking://resources/missing/a.md", "content": "x"}],
        )
    with pytest.raises(InvalidArgumentError):
        client.batch_write(
            "viking://resources/batch", [{"uri": "viking://resources/elsewhere.md", "content": "x"}]
        )


def test_a_large_batch_write_is_written_whole_in_groups(client: SyncHTTPClient) -> None:
    """300 files in three folders (beyond one group of held writes): every file, its tags
    and a replaced file's new content are there when the call returns."""
    root = "viking://resources/bulk"
    client.mkdir(root)
    client.write(f"{root}/f0/0.md", "before")
    ops = [
        {"uri": f"{root}/f{i % 3}/{i}.md", "content": f"note {i}", "tags": ["kind=bulk"]}
        for i in range(300)
    ]
    res = client.batch_write(root, ops, wait=False, options={"defer_processing": True})
    assert res["written"] == 300 and res["skipped"] == 0
    for i in (0, 1, 150, 299):
        assert client.read(f"{root}/f{i % 3}/{i}.md") == f"note {i}"
    assert sorted(len(client.ls(f"{root}/f{k}")) for k in range(3)) == [100, 100, 100]
    assert client.attrs(f"{root}/f2/299.md")["attrs"]["tags"] == ["kind=bulk"]
    # A file, then a path below it: the second is refused as before (the first is kept).
    res = client.batch_write(
        root,
        [
            {"uri": f"{root}/x.md", "content": "file"},
            {"uri": f"{root}/x.md/y.md", "content": "below a file"},
        ],
        options={"skip_conflicts": True, "defer_processing": True},
    )
    assert [r["status"] for r in res["results"]] == ["written", "skipped"]
    assert "directory is needed" in res["results"][1]["reason"]
    assert client.read(f"{root}/x.md") == "file"


def test_tags_and_attrs(client: SyncHTTPClient) -> None:
    uri = "viking://resources/tagged/doc.md"
    client.write(uri, "tagged doc", wait=True)
    client.set_tags(uri, ["team=core", "lang=en"])
    assert client.attrs(uri)["attrs"]["tags"] == ["team=core", "lang=en"]
    client.set_tags(uri, ["stage=draft"], mode="append")
    assert client.attrs(uri)["attrs"]["tags"] == ["team=core", "lang=en", "stage=draft"]
    with pytest.raises(InvalidArgumentError):
        client.set_tags(uri, ["no-equals-sign"])
    listed = client.ls("viking://resources/tagged", tags=["team=core"], include_tags=True)
    assert [e["uri"] for e in listed] == [uri]
    assert listed[0]["tags"] == ["team=core", "lang=en", "stage=draft"]
    assert client.ls("viking://resources/tagged", tags=["team=other"]) == []


def test_add_resource_file_and_directory(
    client: SyncHTTPClient, sample_dir: Path, tmp_path: Path
) -> None:
    single = tmp_path / "auth_guide.md"
    single.write_text("# Auth guide\n\nUse API keys.\n")
    res = client.add_resource(str(single), wait=True)
    assert res["root_uri"] == "viking://resources/auth_guide"
    assert client.read("viking://resources/auth_guide/auth_guide.md").startswith("# Auth guide")
    assert "auth_guide.md" in client.overview("viking://resources/auth_guide")

    res = client.add_resource(str(sample_dir), wait=False)
    task = client.get_task(res["task_id"])
    assert task is not None and task["task_type"] == "add_resource"
    client.wait_processed()
    task = client.get_task(res["task_id"])
    assert task["status"] == "completed", task
    root = res["root_uri"]
    assert root == "viking://resources/guide"
    tree = {e["rel_path"] for e in client.tree(root)}
    assert tree == {"README.md", "api", "api/auth.md", "api/client.py"}
    assert "class Client" in client.read(f"{root}/api/client.py")
    tasks = client.list_tasks(task_type="add_resource")
    assert res["task_id"] in [t["task_id"] for t in tasks]

    res = client.add_resource(str(single), parent="viking://resources/guide")
    assert res["root_uri"] == "viking://resources/guide/auth_guide"
    with pytest.raises(OpenVikingError):
        client.add_resource(str(single), to="viking://agent/skills/x")


def test_get_task_unknown_is_none(client: SyncHTTPClient) -> None:
    assert client.get_task("00000000-0000-0000-0000-000000000000") is None


def test_user_resources_target(client: SyncHTTPClient, tmp_path: Path) -> None:
    f = tmp_path / "mine.txt"
    f.write_text("private notes")
    res = client.add_resource(str(f), to="viking://user/alice/resources/mine", wait=True)
    assert res["root_uri"] == "viking://user/alice/resources/mine"
    assert client.read("viking://~/resources/mine/mine.txt") == "private notes"


def test_a_burst_of_writes_completes_every_task_and_summarises_once(client: SyncHTTPClient) -> None:
    """Writes queued together are processed together; each keeps its task and outcome, and
    the shared parent's overview lists every directory of the burst."""
    root = "viking://resources/burst"
    client.mkdir(root)
    tasks = []
    for shelf in ("north", "south", "east", "west", "centre"):
        res = client.batch_write(
            root,
            [
                {"uri": f"{root}/{shelf}/note{i}.md", "content": f"# {shelf} {i}\n\nShelf {shelf}."}
                for i in range(3)
            ],
            wait=False,
        )
        tasks.append(res["task_id"])
    client.wait_processed()
    for task_id in tasks:
        task = client.get_task(task_id)
        assert task is not None and task["status"] == "completed", task
        assert task["result"]["indexed_files"] == 3, task
    overview = client.overview(root)
    assert all(f"{shelf}/" in overview for shelf in ("north", "south", "east", "west", "centre"))
    hits = client.find("shelf west", target_uri=root, limit=3)["resources"]
    assert any(h["uri"].startswith(f"{root}/west/") for h in hits)
