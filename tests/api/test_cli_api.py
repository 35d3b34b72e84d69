"""The `skald` data commands, run as the installed executable against a live dev server, each
test in a fresh account (identity from SKALD_URL / SKALD_ACCOUNT / SKALD_USER or a profile)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from skald import __version__
from tests.api.conftest import ROOT_KEY, make_client
from tests.support.server import SkaldServer

SKALD = str(Path(sys.executable).with_name("skald"))


class Cli:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def run(
        self,
        *args: str,
        stdin: str | None = None,
        ok: bool = True,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [SKALD, *args],
            env={**self.env, **(extra_env or {})},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if ok:
            assert proc.returncode == 0, f"skald {' '.join(args)}: {proc.stderr}"
        return proc

    def out(self, *args: str, **kw: Any) -> str:
        return self.run(*args, **kw).stdout

    def json(self, *args: str, **kw: Any) -> Any:
        return json.loads(self.out(*args, "--json", **kw))


def base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKALD_", "OPENVIKING_"))}
    # No profile file or SDK config from the machine running the tests.
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"), COLUMNS="200")
    return env


@pytest.fixture
def cli(dev_server: SkaldServer, account: str, tmp_path: Path) -> Cli:
    return Cli(
        {
            **base_env(tmp_path),
            "SKALD_URL": dev_server.url,
            "SKALD_ACCOUNT": account,
            "SKALD_USER": "alice",
        }
    )


def test_version_and_help() -> None:
    out = subprocess.run([SKALD, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"skald {__version__}"
    helped = subprocess.run([SKALD, "--help"], capture_output=True, text=True, check=True)
    for command in (
        "add",
        "ls",
        "tree",
        "read",
        "write",
        "find",
        "search",
        "grep",
        "glob",
        "rm",
        "mv",
        "session",
        "wait",
        "status",
        "serve",
        "admin",
        "mcp",
    ):
        assert f"  {command} " in helped.stdout
    # serve / admin / mcp keep their own (argparse) help
    served = subprocess.run([SKALD, "serve", "--help"], capture_output=True, text=True, check=True)
    assert "usage: skald serve" in served.stdout and "--root-api-key" in served.stdout


def test_add_a_folder_then_find_it(cli: Cli, sample_dir: Path) -> None:
    added = cli.json("add", str(sample_dir), "--to", "viking://resources/guide")
    assert added[0]["root_uri"] == "viking://resources/guide"
    assert added[0]["task"]["status"] == "completed"
    assert added[0]["task"]["result"]["indexed_files"] == 3
    hits = cli.json("find", "API key authentication header", "-n", "3")
    top = [h["uri"] for h in hits["resources"]]
    assert "viking://resources/guide/api/auth.md" in top
    lines = cli.out("find", "API key authentication header", "-n", "3").splitlines()
    assert [ln.split()[2] for ln in lines] == top
    assert all(ln.split()[1] == "resource" for ln in lines)
    assert [float(ln.split()[0]) for ln in lines] == pytest.approx(
        [h["score"] for h in hits["resources"]], abs=1e-3
    )
    keyword = cli.json("search", "Bearer", "--keywords", "-t", "resource")
    assert "viking://resources/guide/api/auth.md" in [h["uri"] for h in keyword["resources"]]
    block = cli.out("search", "API key authentication header", "--context", "--max-tokens", "400")
    assert '<memory uri="viking://resources/guide' in block
    assert cli.json("search", "API key", "--context")["stats"]["returned"] >= 1
    listed = cli.out("ls", "viking://resources/guide")
    assert "viking://resources/guide/api/" in listed
    assert "viking://resources/guide/README.md" in listed


def test_add_shows_upload_and_processing_progress(cli: Cli, tmp_path: Path) -> None:
    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\n\n" + "Progress bars for uploads.\n" * 2000)
    proc = cli.run("add", str(doc), extra_env={"TTY_INTERACTIVE": "1", "TTY_COMPACT": "0"})
    assert "upload  notes.md" in proc.stderr and "process" in proc.stderr
    assert "1/1" in proc.stderr  # files processed
    assert proc.stdout.startswith("added viking://resources/notes")
    assert "1 file(s) indexed" in proc.stdout


def test_add_no_wait_returns_a_task_and_wait_drains(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Alpha\n\nfirst file\n")
    (tmp_path / "b.md").write_text("# Beta\n\nsecond file\n")
    added = cli.json("add", str(tmp_path / "a.md"), str(tmp_path / "b.md"), "--no-wait")
    assert [a["root_uri"] for a in added] == ["viking://resources/a", "viking://resources/b"]
    assert all(a["task_id"] and "task" not in a for a in added)
    counters = cli.json("wait")
    assert counters["Semantic"]["pending"] == 0 and counters["Semantic"]["in_progress"] == 0
    assert cli.out("read", "viking://resources/b/b.md") == "# Beta\n\nsecond file\n"
    assert "processed=" in cli.out("wait")


def test_ls_tree_read_write_rm_mv(cli: Cli, tmp_path: Path) -> None:
    wrote = cli.json("write", "viking://resources/notes/todo.md", "buy milk\n", "--mode", "create")
    assert wrote["written_bytes"] == 9 and wrote["created"] is True
    assert cli.out(
        "write", "viking://resources/notes/todo.md", "-", "--mode", "append", stdin="buy eggs\n"
    ).startswith("wrote 9 bytes to ")
    src = tmp_path / "plan.md"
    src.write_text("# Plan\n\nship it\n")
    cli.run("write", "viking://resources/notes/plan.md", "--from-file", str(src), "--wait")
    assert cli.out("read", "viking://resources/notes/todo.md") == "buy milk\nbuy eggs\n"
    assert cli.out("read", "viking://resources/notes/todo.md", "--offset", "1") == "buy eggs\n"
    read = cli.json("read", "viking://resources/notes/plan.md")
    assert read == {"uri": "viking://resources/notes/plan.md", "content": "# Plan\n\nship it\n"}

    listing = cli.json("ls", "viking://resources/notes")
    assert {e["uri"] for e in listing} == {
        "viking://resources/notes/todo.md",
        "viking://resources/notes/plan.md",
    }
    lines = cli.out("ls", "viking://resources").splitlines()
    assert any(ln.startswith("d ") and "viking://resources/notes/" in ln for ln in lines)

    cli.run("mv", "viking://resources/notes/plan.md", "viking://resources/notes/deep/plan.md")
    tree = cli.out("tree", "viking://resources/notes")
    assert tree.splitlines()[0] == "viking://resources/notes/"
    assert tree.splitlines()[1:] == ["├── deep/", "│   └── plan.md", "└── todo.md"]
    tree_json = cli.json("tree", "viking://resources/notes")
    assert {e["rel_path"] for e in tree_json} >= {"deep", "deep/plan.md", "todo.md"}

    assert (
        cli.out("rm", "viking://resources/notes/todo.md").strip()
        == "removed viking://resources/notes/todo.md"
    )
    refused = cli.run("rm", "viking://resources/notes", ok=False)
    assert refused.returncode == 1 and refused.stderr.startswith("error: INVALID_ARGUMENT: ")
    cli.run("rm", "-r", "viking://resources/notes")
    gone = cli.run("ls", "viking://resources/notes", ok=False)
    assert gone.returncode == 1 and gone.stderr.startswith("error: NOT_FOUND: ")


def test_grep_and_glob(cli: Cli, sample_dir: Path) -> None:
    cli.run("add", str(sample_dir), "--no-progress")
    grep = cli.out("grep", "bearer", "viking://resources/guide", "-i")
    assert grep.strip() == (
        "viking://resources/guide/api/auth.md:3:Send the X-API-Key header "
        "or an Authorization Bearer token."
    )
    assert (
        cli.json("grep", "class Client")["matches"][0]["uri"]
        == "viking://resources/guide/api/client.py"
    )
    assert "no matches" in cli.out("grep", "nothing-like-this")
    globbed = cli.out("glob", "**/*.md", "viking://resources/guide").split()
    assert sorted(globbed) == [
        "viking://resources/guide/README.md",
        "viking://resources/guide/api/auth.md",
    ]
    assert cli.json("glob", "**/*.py")["matches"] == ["viking://resources/guide/api/client.py"]


def test_session_new_add_commit_show(cli: Cli) -> None:
    sid = cli.out("session", "new").strip()
    assert sid
    assert (
        cli.out("session", "add", sid, "I", "prefer", "green", "tea").strip()
        == f"{sid}: 1 pending message(s)"
    )
    added = cli.json("session", "add", sid, "--role", "assistant", stdin="Noted: green tea.")
    assert added["message_count"] == 2
    shown = cli.json("session", "show", sid, "--messages")
    assert shown["message_count"] == 2
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]
    text = cli.out("session", "show", sid, "-m")
    assert f"session_id: {sid}" in text and "  user: I prefer green tea" in text
    committed = cli.json("session", "commit", sid, "--wait")
    assert committed["archived"] is True and committed["task"]["status"] == "completed"
    after = cli.json("session", "show", sid)
    assert after["commit_count"] == 1 and after["message_count"] == 0
    assert after["last_commit_at"]
    assert "nothing to commit" in cli.out("session", "commit", sid)
    assert sid in cli.out("session", "list")


def test_errors_are_one_line_with_the_code(cli: Cli, tmp_path: Path) -> None:
    missing = cli.run("read", "viking://resources/nope.md", ok=False)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1
    assert missing.stderr.startswith("error: NOT_FOUND: ")
    bad_uri = cli.run("ls", "viking://nowhere/x", ok=False)
    assert bad_uri.returncode == 1 and bad_uri.stderr.startswith("error: INVALID_URI: ")
    no_file = cli.run("add", str(tmp_path / "absent.md"), ok=False)
    assert no_file.stderr.startswith("error: NOT_FOUND: no such file or directory")
    assert cli.run("session", "show", "no-such-session", ok=False).stderr.startswith(
        "error: NOT_FOUND: "
    )
    down = cli.run("status", ok=False, extra_env={"SKALD_URL": "http://127.0.0.1:9"})
    assert down.returncode == 1 and down.stderr.startswith("error: UNAVAILABLE: cannot reach")
    assert down.stderr.count("\n") == 1
    usage = cli.run("ls", "--bogus", ok=False)
    assert usage.returncode == 2 and "No such option" in usage.stderr


def test_status_and_json_everywhere(cli: Cli, dev_server: SkaldServer) -> None:
    status = cli.json("status")
    assert status["auth_mode"] == "dev" and status["backend"] == "local"
    assert status["version"] == __version__ and "Semantic" in status["queues"]
    text = cli.out("status")
    assert f"server: {dev_server.url}" in text and "auth_mode: dev" in text
    assert "checks: " in text and "Semantic" in text
    # --json also works before the command
    assert json.loads(cli.out("--json", "ls", "viking://resources")) == []


def test_profile_file_and_api_keys(key_server: SkaldServer, tmp_path: Path) -> None:
    root = make_client(key_server.url, api_key=ROOT_KEY)
    acct = "cli-" + uuid.uuid4().hex[:8]
    key = root.admin_create_account(acct, "ann")["user_key"]
    root.close()
    config = tmp_path / "config" / "skald"
    config.mkdir(parents=True)
    (config / "profile.toml").write_text(
        f'default = "prod"\n\n[profiles.prod]\nurl = "{key_server.url}"\napi_key = "{key}"\n'
        f'\n[profiles.stale]\nurl = "{key_server.url}"\napi_key = "not-a-key"\n'
    )
    cli = Cli(base_env(tmp_path))
    cli.run("write", "viking://resources/p/x.md", "from a profile\n")
    assert cli.out("read", "viking://resources/p/x.md") == "from a profile\n"
    denied = cli.run("--profile", "stale", "ls", ok=False)
    assert denied.returncode == 1 and denied.stderr.startswith("error: UNAUTHENTICATED: ")
    # SKALD_API_KEY beats the profile; a flag beats both
    assert cli.run("ls", extra_env={"SKALD_API_KEY": "nope"}, ok=False).returncode == 1
    assert cli.run("--api-key", key, "ls", extra_env={"SKALD_API_KEY": "nope"}).returncode == 0
    assert cli.run("ls", "--api-key", key, extra_env={"SKALD_API_KEY": "nope"}).returncode == 0
    assert cli.run("session", "new", "--profile", "stale", ok=False).stderr.startswith(
        "error: UNAUTHENTICATED: "
    )
    # OpenViking's settings are not Skald's: a key there is never sent
    (tmp_path / ".openviking").mkdir()
    (tmp_path / ".openviking" / "ovcli.conf").write_text(json.dumps({"api_key": key}))
    stray = cli.run(
        "ls",
        ok=False,
        extra_env={
            "SKALD_PROFILE_FILE": str(tmp_path / "none"),
            "SKALD_URL": key_server.url,
            "OPENVIKING_API_KEY": key,
        },
    )
    assert stray.stderr.startswith("error: UNAUTHENTICATED: ")
    unknown = cli.run("--profile", "missing", "ls", ok=False)
    assert unknown.stderr.startswith("error: NOT_FOUND: profile 'missing'")
