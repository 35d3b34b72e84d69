"""The real `ov` CLI of OpenViking 0.5.2 against a live `skald serve`: every command whose
route Skald implements exits 0 and prints the right data; a command whose route is missing
fails with a message naming that route."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from openviking_sdk import SyncHTTPClient

from skald import __version__
from tests.api.conftest import ROOT_KEY, make_client
from tests.support.ov_cli import Ov, Unavailable, flat, install
from tests.support.server import SkaldServer

# Commands whose routes Skald does not serve yet. Each must fail naming the missing route;
# remove a command from this list when its route lands, and its test checks real output.
NOT_IMPLEMENTED = [
    "acl get",
]


@pytest.fixture(scope="session")
def ov_root() -> Path:
    try:
        return install()
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def ov(ov_root: Path, dev_server: SkaldServer, account: str, tmp_path: Path) -> Ov:
    """`ov` configured for the dev server, as user alice of a fresh account."""
    return Ov(ov_root, tmp_path / "home").configure(
        dev_server.url, "--account", account, "--user", "alice"
    )


@pytest.fixture
def guide(tmp_path: Path) -> Path:
    root = tmp_path / "guide"
    (root / "api").mkdir(parents=True)
    (root / "README.md").write_text("# Guide\n\nHow to deploy the widget to production.\n")
    (root / "api" / "auth.md").write_text("# Auth\n\nSend the X-API-Key header.\n")
    return root


def test_version_health_and_status(ov: Ov, dev_server: SkaldServer, account: str) -> None:
    version = ov.out("version")
    assert "CLI:     0.5.2" in version and f"Server:  {__version__}" in version
    health = ov.out("health")
    assert "Connected (Healthy)" in health and f"Version       {__version__}" in health
    assert f"Account       {account}" in health and "User          alice" in health
    assert ov.json("health")["healthy"] is True
    assert flat(ov.out("system", "health")) == flat(health)
    status = ov.out("status")
    assert "Connected (Healthy)" in status and dev_server.url in status
    components = ("queue", "vikingdb", "models", "retrieval", "filesystem")
    if "status components" in NOT_IMPLEMENTED:
        assert "Errors        unknown" in status
    else:
        rows = [
            line.split()
            for line in status.splitlines()
            if line.split()[:1] and line.split()[0] in components
        ]
        assert len(rows) == len(components) and all(r[1] != "unknown" for r in rows), status
    system = ov.out("system", "status")
    assert "initialized  true" in system and "user         alice" in system


def test_add_resource_browse_and_retrieve(ov: Ov, guide: Path, tmp_path: Path) -> None:
    added = ov.out("add-resource", str(guide), "--wait")
    assert "root_uri         viking://resources/guide" in added
    assert "semantic_status  complete" in added and "context_count    2" in added
    listing = ov.out("ls", "viking://resources")
    assert "viking://resources/guide" in listing and "guide: " in listing
    entries = ov.json("ls", "viking://resources/guide")
    assert [(e["uri"], e["isDir"]) for e in entries] == [
        ("viking://resources/guide/README.md", False),
        ("viking://resources/guide/api", True),
    ]
    tree = ov.out("tree", "viking://resources/guide")
    assert "README.md" in tree and "auth.md" in tree
    assert (
        ov.out("read", "viking://resources/guide/api/auth.md")
        == "# Auth\n\nSend the X-API-Key header.\n\n"
    )  # ov ends the text with a newline
    assert ov.out("abstract", "viking://resources/guide").startswith("guide: ")
    overview = ov.out("overview", "viking://resources/guide")
    assert "README.md" in overview and "api" in overview
    stat = ov.out("stat", "viking://resources/guide/README.md")
    assert "isDir     false" in stat
    assert f"size      {len((guide / 'README.md').read_bytes())}" in stat
    found = ov.out("find", "how do I deploy the widget")
    assert "viking://resources/guide/README.md" in found
    hits = ov.json("search", "deploy the widget", "--uri", "viking://resources/guide")
    assert "viking://resources/guide/README.md" in [h["uri"] for h in hits["resources"]]
    grep = ov.out("grep", "X-API-Key", "-u", "viking://resources/guide")
    assert "1 match" in grep and "viking://resources/guide/api/auth.md" in grep
    assert "Send the X-API-Key header." in grep
    globbed = ov.json("glob", "**/*.md", "-u", "viking://resources/guide")
    assert sorted(globbed["matches"]) == [
        "viking://resources/guide/README.md",
        "viking://resources/guide/api/auth.md",
    ]
    target = tmp_path / "readme.md"
    assert "Downloaded" in ov.out("get", "viking://resources/guide/README.md", str(target))
    assert target.read_text() == (guide / "README.md").read_text()


def test_write_move_copy_remove_and_tags(ov: Ov, tmp_path: Path) -> None:
    assert (
        ov.out("mkdir", "viking://resources/notes").strip()
        == "Directory created: viking://resources/notes"
    )
    written = ov.out("write", "viking://resources/notes/a.md", "--content", "hello", "--wait")
    assert "created          true" in written and "vector_status    complete" in written
    ov("write", "viking://resources/notes/a.md", "--content", " world", "--append")
    assert ov.out("read", "viking://resources/notes/a.md").rstrip("\n") == "hello world"
    source = tmp_path / "b.md"
    source.write_text("from a file\n")
    ov("write", "viking://resources/notes/b.md", "--from-file", str(source))
    assert ov.out("read", "viking://resources/notes/b.md") == "from a file\n\n"
    exists = ov.fails(
        "write", "viking://resources/notes/a.md", "--mode", "create", "--content", "x"
    )
    assert "[ALREADY_EXISTS] File already exists: viking://resources/notes/a.md" in exists
    assert "Copied: viking://resources/notes/a.md -> viking://resources/notes/c.md" in ov.out(
        "cp", "viking://resources/notes/a.md", "viking://resources/notes/c.md"
    )
    assert "Moved: viking://resources/notes/c.md -> viking://resources/notes/d.md" in ov.out(
        "mv", "viking://resources/notes/c.md", "viking://resources/notes/d.md"
    )
    assert ov.out("read", "viking://resources/notes/d.md").rstrip("\n") == "hello world"
    assert "[NOT_FOUND] File not found: viking://resources/notes/c.md" in ov.fails(
        "stat", "viking://resources/notes/c.md"
    )
    assert "Removed: viking://resources/notes/d.md" in ov.out("rm", "viking://resources/notes/d.md")
    assert "[NOT_FOUND]" in ov.fails("read", "viking://resources/notes/d.md")
    tagged = ov.out("set-tags", "viking://resources/notes/a.md", "--tags", "team=search")
    assert "tags           team=search" in tagged
    attrs = ov.json("attrs", "get", "viking://resources/notes/a.md")
    assert attrs["attrs"]["tags"] == ["team=search"] and attrs["context_type"] == "resource"
    reindexed = ov.json("reindex", "viking://resources/notes")
    assert (reindexed["files"], reindexed["status"]) == (2, "complete")
    removed = ov.out("rm", "viking://resources/notes", "-r", "--wait")
    assert "Removed: viking://resources/notes" in removed
    assert "[NOT_FOUND]" in ov.fails("ls", "viking://resources/notes")


def test_sessions_memories_and_tasks(ov: Ov) -> None:
    sid = ov.json("session", "new")["session_id"]
    added = ov.out(
        "session",
        "add-message",
        sid,
        "--role",
        "user",
        "--content",
        "I prefer tabs over spaces in Python code.",
    )
    assert "message_count   1" in added
    batch = ov.json(
        "session",
        "add-messages",
        sid,
        json.dumps([{"role": "assistant", "content": "Noted: tabs."}]),
    )
    assert batch["message_count"] == 2
    assert "messages            2" in ov.out("session", "get", sid)
    assert "I prefer tabs over spaces" in ov.out("session", "get-session-context", sid)
    assert sid in ov.out("session", "list")
    commit = ov.json("session", "commit", sid)
    assert commit["status"] == "accepted" and commit["archive_uri"].endswith("archive_001")
    assert "SessionCommit" in ov.out("wait")
    task = ov.out("task", "status", commit["task_id"])
    assert "task_type           session_commit" in task and "status              completed" in task
    assert commit["task_id"] in ov.out("task", "list")
    archive = ov.out("session", "get-session-archive", sid, "archive_001")
    assert "I prefer tabs over spaces" in archive
    memories = ov.json("find", "tabs or spaces", "--uri", "viking://user/alice/memories")
    assert any("/memories/preferences/" in h["uri"] for h in memories["memories"]), memories
    assert ov.out("add-memory", "My name is Bob Stone and I work at Initech.").strip() == "OK"
    ov("wait")
    people = ov.json("find", "Initech", "--uri", "viking://user/alice/memories")
    assert any(h["uri"].startswith("viking://user/alice/memories/") for h in people["memories"]), (
        people
    )
    queue = ov.out("observer", "queue")
    assert "Semantic" in queue and "SessionCommit" in queue
    system = ov.out("observer", "system")
    assert "[queue] (healthy)" in system and "[system] (healthy)" in system
    ov("session", "delete", sid)
    assert "[NOT_FOUND]" in ov.fails("session", "get", sid)


def test_api_key_mode(ov_root: Path, key_server: SkaldServer, tmp_path: Path) -> None:
    account = "ov-" + uuid.uuid4().hex[:8]
    keys = {"OV_ROOT": ROOT_KEY}
    admin = Ov(ov_root, tmp_path / "admin", env=keys).configure(
        key_server.url,
        "--api-key-env",
        "OV_ROOT",
        "--root-api-key-env",
        "OV_ROOT",
        "--account",
        account,
        "--user",
        "boss",
    )
    created = admin.json("--sudo", "admin", "create-account", account, "--admin", "boss")
    keys["OV_KEY"] = created["user_key"]
    assert account in admin.out("--sudo", "admin", "list-accounts")
    boss = Ov(ov_root, tmp_path / "boss", env=keys).configure(
        key_server.url, "--api-key-env", "OV_KEY", "--root-api-key-env", "OV_ROOT"
    )
    health = boss.out("health")
    assert f"Account       {account}" in health and "User          boss" in health
    assert "Role          admin" in health
    bob = boss.json("admin", "register-user", account, "bob", "--role", "user")
    assert bob["user_key"] and "bob" in boss.out("admin", "list-users", account)
    boss("write", "viking://resources/k.md", "--content", "keyed")
    assert boss.out("read", "viking://resources/k.md").rstrip("\n") == "keyed"
    # the root key reaches admin routes only, never tenant data
    assert "[PERMISSION_DENIED] ROOT API keys cannot access tenant-scoped data" in admin.fails(
        "ls", "viking://resources"
    )
    # `ov config add` refuses a key the server refuses: write the config file as one would
    stranger = Ov(ov_root, tmp_path / "stranger")
    (stranger.home / ".openviking").mkdir(parents=True)
    stranger("language", "en")
    (stranger.home / ".openviking" / "ovcli.conf").write_text(
        json.dumps({"url": key_server.url, "api_key": "wrong"})
    )
    assert "[UNAUTHENTICATED] Invalid API key" in stranger.fails("ls", "viking://resources")


def test_skills_add_list_find_show_and_remove(ov: Ov, tmp_path: Path) -> None:
    collection = tmp_path / "collection"
    for name, text in (
        ("brew-tea", "Brew green tea at 80 degrees."),
        ("code-review", "Review a pull request for security bugs."),
    ):
        (collection / name).mkdir(parents=True)
        (collection / name / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: {text}\n---\n\nSteps for {name}.\n"
        )
    (collection / "brew-tea" / "notes.md").write_text("Warm the pot first.\n")
    added = ov.out("add-skill", str(collection / "code-review" / "SKILL.md"), "--wait")
    assert "root_uri         viking://user/alice/skills/code-review" in added
    assert "semantic_status  complete" in added
    # a folder of packages, one chosen, published to the account's shared skills
    shared = ov.out(
        "skills",
        "add",
        str(collection),
        "-s",
        "brew-tea",
        "-y",
        "--wait",
        "-p",
        "viking://agent/skills",
    )
    assert "uri              viking://agent/skills/brew-tea" in shared
    assert "auxiliary_files  1" in shared
    listing = ov.out("skills", "list")
    assert listing.startswith("2 skills")
    assert "viking://user/alice/skills/code-review" in listing
    assert "description: Brew green tea at 80 degrees." in listing
    assert [
        s["name"] for s in ov.json("skills", "list", "-p", "viking://agent/skills")["skills"]
    ] == ["brew-tea"]
    found = ov.out("skills", "find", "green tea")
    assert found.startswith("1 skill") or "1. skill\n   viking://agent/skills/brew-tea" in found
    assert found.count("viking://agent/skills/brew-tea") == 1
    shown = ov.out("skills", "show", "brew-tea", "-f", "--source")
    assert "[L0 abstract]\nBrew green tea at 80 degrees." in shown
    assert "[L2 SKILL.md]\n---\nname: brew-tea" in shown
    assert "- notes.md [auxiliary]" in shown and "type: local" in shown
    assert "Skill validation succeeded." in ov.out(
        "skills", "validate", str(collection / "brew-tea")
    )
    assert "Removed 1 skill(s): code-review." in ov.out("skills", "remove", "code-review", "-y")
    assert [s["name"] for s in ov.json("skills", "list")["skills"]] == ["brew-tea"]


def test_observer_components_and_consistency(ov: Ov, account: str) -> None:
    ov("write", "viking://resources/seen.md", "--content", "observed text")
    ov("wait")
    ov("find", "observed")
    status = ov.out("status")
    assert "Embedding     all-MiniLM-L6-v2-int8" in status
    assert re.search(r"vikingdb +healthy +1 collection, [1-9]\d* vectors", status), status
    assert re.search(r"retrieval +healthy +[1-9]\d* queries, \d+\.\d% zero-result rate", status), (
        status
    )
    assert "lock           healthy    0 active locks" in status
    assert re.search(r"filesystem +healthy +4 mounts, [1-9]", status), status
    assert f"Account: {account}" in ov.out("observer", "vikingdb")
    assert "all-MiniLM-L6-v2-int8" in ov.out("observer", "models")
    assert "Total Queries" in ov.out("observer", "retrieval")
    assert "Mount: viking://resources" in ov.out("observer", "filesystem")
    consistency = ov.out("system", "consistency", "viking://resources")
    assert re.search(r"ok +true", consistency) and re.search(
        r"expected_count +[1-9]", consistency
    ), consistency
    assert re.search(r"missing_record_count +0", consistency)


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    import zipfile

    path = tmp_path / "notes.ovpack"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("notes/a.md", "# A\n")
    return path


FUTURE: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "skills list": (lambda _: ["skills", "list"], "GET /api/v1/skills"),
    "observer vikingdb": (lambda _: ["observer", "vikingdb"], "GET /api/v1/observer/vikingdb"),
    "observer models": (lambda _: ["observer", "models"], "GET /api/v1/observer/models"),
    "observer retrieval": (lambda _: ["observer", "retrieval"], "GET /api/v1/observer/retrieval"),
    "observer filesystem": (
        lambda _: ["observer", "filesystem"],
        "GET /api/v1/observer/filesystem",
    ),
    "system consistency": (
        lambda _: ["system", "consistency", "viking://resources"],
        "POST /api/v1/system/consistency",
    ),
    "task watch ls": (lambda _: ["task", "watch", "ls"], "GET /api/v1/watches"),
    "acl get": (lambda _: ["acl", "get", "viking://resources"], "GET /api/v1/acl"),
}


def test_every_pending_command_is_listed() -> None:
    assert set(FUTURE) | {"status components"} >= set(NOT_IMPLEMENTED)


@pytest.mark.parametrize("name", sorted(FUTURE))
def test_commands_without_a_route_yet(name: str, ov: Ov, pack: Path) -> None:
    argv, route = FUTURE[name]
    args = argv(pack.parent)
    if name in NOT_IMPLEMENTED:
        message = ov.fails(*args)
        assert f"[NOT_FOUND] Not Found: {route} is not implemented by this server" in message
    else:  # the route landed: the command works
        proc = ov(*args)
        assert proc.stdout.strip() and "not implemented" not in proc.stdout


def test_export_import_backup_restore(ov: Ov, guide: Path, tmp_path: Path) -> None:
    ov("add-resource", str(guide), "--wait")
    pack = tmp_path / "guide.ovpack"
    exported = ov.out("export", "viking://resources/guide", str(pack))
    assert f"message  Successfully exported to {pack}" in exported and pack.is_file()
    assert (
        ov.out("import", str(pack), "viking://resources/copy")
        == "uri  viking://resources/copy/guide\n\n"
    )
    assert (
        ov.out("read", "viking://resources/copy/guide/api/auth.md")
        == "# Auth\n\nSend the X-API-Key header.\n\n"
    )
    assert "viking://resources/copy/guide/api" in ov.out("ls", "viking://resources/copy/guide")
    # OpenViking's conflict rule: an existing root fails unless told to skip or overwrite
    assert "[CONFLICT] Resource already exists at viking://resources/copy/guide" in ov.fails(
        "import", str(pack), "viking://resources/copy"
    )
    ov("write", "viking://resources/copy/guide/README.md", "--content", "edited", "--wait")
    assert "uri  viking://resources/copy/guide" in ov.out(
        "import", str(pack), "viking://resources/copy", "--on-conflict", "skip"
    )
    assert ov.out("read", "viking://resources/copy/guide/README.md").rstrip("\n") == "edited"
    ov("import", str(pack), "viking://resources/copy", "--on-conflict", "overwrite")
    assert ov.out("read", "viking://resources/copy/guide/README.md").startswith("# Guide")
    backup = tmp_path / "all.ovpack"
    assert f"Successfully backed up to {backup}" in ov.out("backup", str(backup))
    ov("rm", "viking://resources/copy", "--recursive")
    assert ov.out("restore", str(backup), "--on-conflict", "overwrite") == "uri  viking://\n\n"
    assert ov.out("read", "viking://resources/copy/guide/api/auth.md").startswith("# Auth")


@pytest.fixture
def sdk(dev_server: SkaldServer, account: str) -> Iterator[SyncHTTPClient]:
    c = make_client(dev_server.url, account=account, user="alice")
    yield c
    c.close()


def test_cli_and_sdk_see_the_same_tree(ov: Ov, sdk: SyncHTTPClient) -> None:
    ov("write", "viking://resources/shared/one.md", "--content", "one", "--wait")
    assert sdk.read("viking://resources/shared/one.md") == "one"
    sdk.write("viking://resources/shared/two.md", "two", wait=True)
    assert [e["uri"] for e in ov.json("ls", "viking://resources/shared")] == [
        "viking://resources/shared/one.md",
        "viking://resources/shared/two.md",
    ]


def test_task_watch_ls_lists_the_watches(ov: Ov, sdk: SyncHTTPClient) -> None:
    added = sdk.add_resource(
        "https://docs.example.invalid/guide.html", options={"watch_interval": 30}
    )
    listing = ov.out("task", "watch", "ls")
    assert added["watch_task_id"] in listing and "viking://resources/guide" in listing
