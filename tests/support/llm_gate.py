"""An OpenAI-compatible chat endpoint standing in for the LLM, that can hold the semantic worker.

Its summaries repeat what they summarise (a file's first line of text, a directory's first
listed entry, a conversation's messages), so every summary above a file quotes it, as the
deterministic outlines do. Extraction finds no memory. While `held()`, a directory whose
name starts with HOLD gets no summary: the job refreshing it waits inside the model call,
and with it every later semantic job of the account (`skald serve` runs one account's jobs
one at a time; aws-local drains each queue with one poller). A test then sees what a
request alone did, with no job done behind it.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD = "holdgate"
HOLD_LIMIT_S = 120.0  # a test that never releases does not hang the server for longer


class LlmGate:
    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self._holding = threading.Event()
        self._names = itertools.count()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                payload = json.dumps(
                    {
                        "choices": [
                            {"message": {"role": "assistant", "content": gate.answer(body)}}
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    @property
    def env(self) -> dict[str, str]:
        """The server's settings that make this its LLM."""
        return {
            "SKALD_LLM_BASE_URL": f"http://127.0.0.1:{self._httpd.server_address[1]}",
            "SKALD_LLM_MODEL": "gate",
        }

    def close(self) -> None:
        self._open.set()
        self._httpd.shutdown()

    def answer(self, body: dict[str, Any]) -> str:
        messages = body["messages"]
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        user: str = messages[-1]["content"]
        schema = json.dumps((body.get("response_format") or {}).get("json_schema", {}))
        if "operations" in schema:
            return json.dumps({"operations": []})
        if "queries" in schema:
            return json.dumps({"queries": []})
        if "Describe this directory" in system:
            first, _, listing = user.partition("\n")
            if first.rsplit("/", 1)[-1].split(" ")[0].startswith(HOLD):
                self._holding.set()
                self._open.wait(HOLD_LIMIT_S)
            return next((ln[2:] for ln in listing.splitlines() if ln.startswith("- ")), "empty")
        if "Summarise this conversation" in system:
            return " ".join(user.split())[:500]
        # A file's first line of text (after its name line).
        lines = [ln.strip() for ln in user.splitlines()[1:] if ln.strip()]
        text = next((ln for ln in lines if not ln.startswith("#")), "")
        return text[:200] or "nothing"

    @contextmanager
    def held(self, write: Any, below: str) -> Iterator[None]:
        """Holds the semantic worker for the block: `write(uri, text)` (no wait) starts the
        job that waits in the model, on a folder below `below` (best another namespace than
        the test's: its refresh, once released, reads the summaries of its own only); the
        block begins once the job waits there."""
        self._holding.clear()
        self._open.clear()
        try:
            write(
                f"{below}/{HOLD}{next(self._names)}/held.md",
                "# Held\n\nA file whose folder's summary waits.\n",
            )
            if not self._holding.wait(HOLD_LIMIT_S):
                raise AssertionError("the semantic worker never reached the held summary")
            yield
        finally:
            self._open.set()
