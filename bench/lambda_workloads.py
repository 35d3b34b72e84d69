"""The workloads of the Lambda sizing benchmark: what users and agents do, through
openviking-sdk (and the MCP client) against the local gateway, one phase per route family or
job kind. Corpora are made from LoCoMo conversations (read from /work/shared/data at run time):
a large Markdown document, a folder of files, chat sessions, and web pages for the fetch
worker served from loopback.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from openviking_sdk import SyncHTTPClient

LOCOMO = Path("/work/shared/data/locomo/locomo10-dev.json")


@dataclass(frozen=True)
class Scale:
    large_doc_kb: int = 2048  # one Markdown document
    # the folder: files x size (issue 16's memory case is 50 x 200 KB: --folder-kb 200)
    folder_files: int = 50
    folder_file_kb: int = 40
    sessions: int = 4  # LoCoMo sessions added as chat sessions, then committed
    queries: int = 20
    web_pages: int = 3
    web_page_kb: int = 300


SMALL = Scale(
    large_doc_kb=256,
    folder_files=5,
    folder_file_kb=50,
    sessions=2,
    queries=5,
    web_pages=1,
    web_page_kb=50,
)


def turns() -> Iterator[tuple[str, str, str]]:
    """(conversation, session heading, 'speaker: text') over every LoCoMo session, forever."""
    data = json.loads(LOCOMO.read_text())
    while True:
        for sample in data:
            conv = sample["conversation"]
            for key, value in conv.items():
                if key.startswith("session_") and isinstance(value, list):
                    when = conv.get(f"{key}_date_time", "")
                    for turn in value:
                        yield (
                            sample["sample_id"],
                            f"{key} ({when})",
                            f"{turn['speaker']}: {turn['text']}",
                        )


def markdown(kb: int, seed: int = 0) -> str:
    """About `kb` KB of Markdown: a heading per LoCoMo session, its turns as paragraphs."""
    out: list[str] = [f"# Conversation log {seed}\n"]
    size, heading = 0, ""
    source = turns()
    for _ in range(seed * 37):
        next(source)
    for conv, session, line in source:
        if session != heading:
            heading = session
            out.append(f"\n## {conv} {session}\n")
        out.append(line + "\n")
        size += len(line) + 1
        if size >= kb * 1024:
            break
    return "\n".join(out)


def wait_tasks(client: SyncHTTPClient, task_ids: list[str], timeout_s: float = 1800) -> list[str]:
    """Polls each task to an end state; returns their statuses."""
    deadline, statuses = time.monotonic() + timeout_s, []
    for task_id in task_ids:
        while True:
            task = client.get_task(task_id) or {}
            if task.get("status") in ("completed", "failed", "cancelled"):
                statuses.append(str(task["status"]))
                break
            if time.monotonic() > deadline:
                statuses.append("timeout")
                break
            time.sleep(1.0)
    return statuses


def admin(root: SyncHTTPClient, account: str) -> str:
    """Creates `account` (admin "ops") and two users; returns the admin's key."""
    created = root.admin_create_account(account, "ops")
    for user in ("bob", "carol"):
        root.admin_register_user(account, user, "user")
    root.admin_list_users(account)
    root.admin_list_accounts()
    return str(created["user_key"])


def content_fs(c: SyncHTTPClient, notes: list[str]) -> None:
    base = "viking://resources/notes"
    c.mkdir(base, description="Meeting notes.")
    for i, text in enumerate(notes):
        c.write(f"{base}/n{i:02d}.md", text)
    for i in range(len(notes)):
        c.read(f"{base}/n{i:02d}.md")
        c.stat(f"{base}/n{i:02d}.md")
    c.ls(base)
    c.tree("viking://resources")
    c.write(f"{base}/n00.md", "\nAppended line.\n", mode="append")
    c.set_tags(f"{base}/n00.md", ["kind=note"])
    c.mv(f"{base}/n01.md", f"{base}/moved.md")
    c.rm(f"{base}/n02.md")
    c.add_skill(
        {
            "name": "tea-brewing",
            "description": "How to brew oolong tea well.",
            "content": "# Tea brewing\n\nUse water at 90 C, steep three minutes.\n",
        }
    )
    c.get_status()
    c.queue_status()
    c.list_tasks()


def add_path(c: SyncHTTPClient, path: Path) -> str:
    res = c.add_resource(str(path))
    statuses = wait_tasks(c, [res["task_id"]])
    return f"{res.get('root_uri')}: {statuses[0]}"


def search(c: SyncHTTPClient, queries: list[str]) -> dict[str, int]:
    outcomes: dict[str, int] = {}

    def tally(name: str, call: Callable[[], Any]) -> None:
        try:
            call()
            outcomes[f"{name} ok"] = outcomes.get(f"{name} ok", 0) + 1
        except Exception as exc:  # find answers 400 on aws-local (no k-NN engine)
            key = f"{name} {type(exc).__name__}"
            outcomes[key] = outcomes.get(key, 0) + 1

    for q in queries:
        tally("search keywords", partial(c.search, q, options={"search_type": "keywords"}))
        tally("search", partial(c.search, q))
        tally("find", partial(c.find, q))
        tally("grep", partial(c.grep, "viking://resources", q.split()[0]))
    tally("glob", lambda: c.glob("**/*.md", uri="viking://resources"))
    tally("find_skills", lambda: c.find_skills("brew tea"))
    return outcomes


def sessions(c: SyncHTTPClient, count: int, idle: bool = False) -> list[tuple[str, str]]:
    """LoCoMo sessions as chat sessions; committed (memory extraction) unless `idle`, in which
    case they are left for the idle auto-commit. Returns (session id, task or '')."""
    out: list[tuple[str, str]] = []
    data = json.loads(LOCOMO.read_text())
    picked = [
        (s["sample_id"], k, v)
        for s in data
        for k, v in s["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
    ][:count]
    speakers: dict[str, str] = {}
    for conv, key, session_turns in picked:
        sid = f"{conv}-{key}-{uuid.uuid4().hex[:6]}"
        options = {"auto_commit_policy": {"idle_seconds": 1}} if idle else None
        c.create_session(sid, options=options)
        for turn in session_turns:
            role = speakers.setdefault(turn["speaker"], "user" if not speakers else "assistant")
            c.add_message(sid, role, f"{turn['speaker']}: {turn['text']}")
        c.get_session(sid)
        c.get_session_context(sid)
        task = ""
        if not idle:
            task = str(c.commit_session(sid).get("task_id") or "")
        out.append((sid, task))
    c.list_sessions()
    return out


def mcp(url: str, key: str, queries: list[str]) -> dict[str, int]:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.mcp_client import mcp_client, run

    outcomes: dict[str, int] = {}

    async def scenario() -> None:
        async with mcp_client(url, headers={"X-API-Key": key}) as client:
            calls: list[tuple[str, dict[str, Any]]] = [
                ("health", {}),
                ("list", {"uri": "viking://resources"}),
                ("tree", {"uri": "viking://resources"}),
                ("stat", {"uri": "viking://resources/notes/n00.md"}),
                ("read", {"uris": "viking://resources/notes/n00.md"}),
                ("glob", {"pattern": "**/*.md", "uri": "viking://resources"}),
                (
                    "write",
                    {
                        "uri": "viking://resources/mcp/agent.md",
                        "content": "# Agent notes\n\nThe user likes oolong.\n",
                    },
                ),
                (
                    "remember",
                    {
                        "messages": [
                            {"role": "user", "content": "I prefer oolong tea in the morning."}
                        ]
                    },
                ),
            ]
            for q in queries:
                calls += [
                    ("search", {"query": q}),
                    ("find", {"query": q}),
                    ("grep", {"uri": "viking://resources", "pattern": q.split()[0]}),
                ]
            for name, args in calls:
                try:
                    result = await client.call_tool(name, args)
                    key_ = f"{name} {'error' if result.is_error else 'ok'}"
                except Exception as exc:
                    key_ = f"{name} {type(exc).__name__}"
                outcomes[key_] = outcomes.get(key_, 0) + 1

    run(scenario)
    return outcomes


class WebSite:
    """Static pages on loopback for the fetch worker."""

    def __init__(self, root: Path, pages: int, kb: int) -> None:
        root.mkdir(parents=True, exist_ok=True)
        for i in range(pages):
            body = "".join(f"<p>{p}</p>\n" for p in markdown(kb, seed=i + 7).split("\n") if p)
            (root / f"page{i}.html").write_text(
                f"<!doctype html><html><head><title>Log {i}</title></head><body>"
                f"<h1>Log {i}</h1>{body}</body></html>"
            )
        handler = partial(_Quiet, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.pages = [f"{self.url}/page{i}.html" for i in range(pages)]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def fetch(c: SyncHTTPClient, site: WebSite) -> list[str]:
    tasks = [str(c.add_resource(url)["task_id"]) for url in site.pages]
    return wait_tasks(c, tasks)
