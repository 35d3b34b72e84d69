"""Committing a session through openviking-sdk and waiting for its extraction."""

from __future__ import annotations

import json
import time
from typing import Any

from openviking_sdk import SyncHTTPClient


def commit_and_wait(c: SyncHTTPClient, sid: str, *texts: str | tuple[str, str]
                    ) -> dict[str, Any]:
    """Adds the messages (plain strings are the user's), commits, waits for the extraction;
    the archive's memory diff."""
    for text in texts:
        role, body = ("user", text) if isinstance(text, str) else text
        c.add_message(sid, role, body)
    res = c.commit_session(sid)
    deadline = time.time() + 60
    task = None
    while time.time() < deadline:
        task = c.get_task(res["task_id"])
        if task and task["status"] in {"completed", "failed"}:
            break
        time.sleep(0.05)
    assert task and task["status"] == "completed", task
    diff: dict[str, Any] = json.loads(c.read(res["archive_uri"] + "/memory_diff.json"))
    return diff
