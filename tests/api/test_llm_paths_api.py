"""The LLM paths through a scripted, OpenAI-compatible fake endpoint: file and directory
summaries, memory extraction with structured output (and a retry on a malformed answer),
archive summaries, and intent planning for search with a session."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from openviking_sdk import SyncHTTPClient

from tests.api.conftest import make_client
from tests.support.server import SkaldServer
from tests.support.sessions import commit_and_wait

FILE_SUMMARY = "A guide to rotating API keys safely."
# What the fake endpoint reports for every completion.
USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}


class Script:
    """Answers by prompt kind; records what was asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.bad_extractions_left = 1
        self.extraction_prompts: list[str] = []
        self.directory_prompts: list[str] = []

    def answer(self, body: dict[str, Any]) -> str:
        messages = body["messages"]
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        user = messages[-1]["content"]
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("schema", {})
        if "operations" in json.dumps(schema):
            self.calls.append("extract")
            self.extraction_prompts.append(user)
            evolving = self.evolving(user)
            if evolving is not None:
                return evolving
            if self.bad_extractions_left:
                self.bad_extractions_left -= 1
                return "not json at all"
            return json.dumps(
                {
                    "operations": [
                        {
                            "memory_type": "preferences",
                            "fields": {"user": "alice", "topic": "editor"},
                            "content": "Alice prefers Helix as her editor.",
                            "summary": "Prefers the Helix editor.",
                        }
                    ]
                }
            )
        if "queries" in json.dumps(schema):
            self.calls.append("plan")
            return json.dumps(
                {"queries": [{"query": "key rotation schedule", "context_type": "resource"}]}
            )
        if "Summarise the file" in system:
            self.calls.append("file")
            return FILE_SUMMARY
        if "Describe this directory" in system:
            self.calls.append("dir")
            self.directory_prompts.append(user)
            return "Security documentation."
        if "Summarise this conversation" in system:
            self.calls.append("archive")
            return "- Alice talked about her editor."
        self.calls.append("other")
        return "ok" if user else ""

    @staticmethod
    def evolving(user: str) -> str | None:
        """A model that reads the existing memories it is given: it updates the topic file
        and retracts the line the conversation contradicts."""
        ids = re.findall(r"^\[(\S+)\] user", user, re.MULTILINE)
        if "moved from Poetry to uv" in user:
            return json.dumps(
                {
                    "operations": [
                        {
                            "memory_type": "preferences",
                            "fields": {"user": "alice", "topic": "python packaging"},
                            "content": "Alice always uses uv.",
                            "summary": "Uses uv for Python packaging.",
                            "source_message_ids": ids,
                        }
                    ],
                    "retractions": [
                        {"text": "Alice always uses Poetry.", "source_message_ids": ids}
                    ],
                }
            )
        if "I always use Poetry" in user:
            return json.dumps(
                {
                    "operations": [
                        {
                            "memory_type": "preferences",
                            "fields": {"user": "alice", "topic": "Python packaging"},
                            "content": "Alice always uses Poetry.",
                            "summary": "Uses Poetry.",
                            "source_message_ids": ids,
                        }
                    ]
                }
            )
        return None


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SyncHTTPClient, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = script.answer(body)
            payload = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": text}}], "usage": USAGE}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    data: Path = tmp_path_factory.mktemp("llm") / "data"
    server = SkaldServer(
        data,
        env={
            "SKALD_LLM_BASE_URL": f"http://127.0.0.1:{httpd.server_address[1]}",
            "SKALD_LLM_MODEL": "scripted",
        },
    )
    server.start()
    client = make_client(server.url, account="llm", user="alice")
    try:
        yield client, script
    finally:
        client.close()
        server.stop()
        httpd.shutdown()


def test_summaries_come_from_the_llm(llm: tuple[SyncHTTPClient, Script]) -> None:
    c, script = llm
    c.write(
        "viking://resources/security/keys.md",
        "# Keys\n\nRotate keys every 90 days and revoke old ones.\n",
        wait=True,
    )
    assert c.abstract("viking://resources/security") == "Security documentation."
    hits = c.find("rotate keys", target_uri="viking://resources/security", options={"level": 2})
    assert hits["resources"][0]["abstract"] == FILE_SUMMARY
    assert "file" in script.calls and "dir" in script.calls


def test_a_sampled_directory_listing_tells_the_llm_how_many_entries_there_are(
    llm: tuple[SyncHTTPClient, Script],
) -> None:
    c, script = llm
    root = "viking://resources/many"
    c.mkdir(root)
    c.batch_write(
        root,
        [{"uri": f"{root}/n{i:02d}.md", "content": f"Note {i}."} for i in range(34)],
        wait=True,
    )
    prompt = next(
        p for p in reversed(script.directory_prompts) if p.startswith(f"Directory {root}")
    )
    assert prompt.splitlines()[0] == f"Directory {root} (34 entries, 32 of them listed)"
    assert len([ln for ln in prompt.splitlines() if ln.startswith("- ")]) == 32


def test_extraction_with_structured_output_and_retry(llm: tuple[SyncHTTPClient, Script]) -> None:
    c, script = llm
    c.add_message("s1", "user", "Honestly, Helix is the only editor I enjoy.")
    assert c.get_session("s1")["llm_token_usage"] == {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
    }
    before = len(script.calls)
    res = c.commit_session("s1")
    deadline = time.time() + 60
    while time.time() < deadline:
        task = c.get_task(res["task_id"])
        if task and task["status"] in {"completed", "failed"}:
            break
        time.sleep(0.1)
    assert task and task["status"] == "completed", task
    assert script.calls.count("extract") == 2  # one malformed answer, then a valid one
    # the session counts the tokens of its extraction: both answers and the archive summary
    metered = sum(1 for k in script.calls[before:] if k in {"extract", "archive"})
    assert metered >= 3
    assert c.get_session("s1")["llm_token_usage"] == {k: v * metered for k, v in USAGE.items()}
    diff = json.loads(c.read(res["archive_uri"] + "/memory_diff.json"))
    adds = diff["operations"]["adds"]
    assert [a["uri"] for a in adds] == ["viking://user/alice/memories/preferences/alice/editor.md"]
    assert "Helix" in c.read(adds[0]["uri"])
    archive = c.get_session_archive("s1", "archive_001")
    assert "editor" in archive["overview"]


def test_search_with_a_session_plans_queries(llm: tuple[SyncHTTPClient, Script]) -> None:
    c, script = llm
    c.add_message("s2", "user", "We need to talk about credentials.")
    res = c.search("when do I rotate", session_id="s2")
    assert "plan" in script.calls
    plan = res["query_plan"]
    assert plan["queries"][0]["query"] == "key rotation schedule"
    uris = [h["uri"] for h in res["resources"]]
    assert "viking://resources/security/keys.md" in uris


def test_llm_extraction_updates_existing_memories(llm: tuple[SyncHTTPClient, Script]) -> None:
    c, script = llm
    packaging = "viking://user/alice/memories/preferences/alice/python-packaging.md"
    first = commit_and_wait(c, "evolve1", "I always use Poetry.")
    assert [a["uri"] for a in first["operations"]["adds"] if a["memory_type"] == "preferences"] == [
        packaging
    ]
    diff = commit_and_wait(c, "evolve2", "I moved from Poetry to uv last month.")
    # the model was shown the memory it may update, with its path
    prompt = script.extraction_prompts[-1]
    assert "Existing memories:" in prompt and "preferences/alice/python-packaging.md" in prompt
    assert "Alice always uses Poetry." in prompt
    update = next(u for u in diff["operations"]["updates"] if u["uri"] == packaging)
    assert "Alice always uses Poetry." in update["before"]
    assert "Alice always uses uv." in update["after"]
    assert "Poetry" not in update["after"]
    text = c.read(packaging)
    assert "Alice always uses uv." in text and "Alice always uses Poetry." not in text
    assert [r["phrase"] for r in diff["retractions"]] == ["Alice always uses Poetry."]
    assert "evolve2" in text.split("---")[1]  # provenance: the archive that changed it
