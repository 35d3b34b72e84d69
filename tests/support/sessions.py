"""Committing a session through openviking-sdk and waiting for its extraction."""

from __future__ import annotations

import json
from typing import Any

from openviking_sdk import SyncHTTPClient

from tests.support.mcp_client import wait_task


def commit_and_wait(c: SyncHTTPClient, sid: str, *texts: str | tuple[str, str]) -> dict[str, Any]:
    """Adds the messages (plain strings are the user's), commits, waits for the extraction;
    the archive's memory diff."""
    for text in texts:
        role, body = ("user", text) if isinstance(text, str) else text
        c.add_message(sid, role, body)
    res = c.commit_session(sid)
    task = wait_task(c, res["task_id"])
    assert task["status"] == "completed", task
    diff: dict[str, Any] = json.loads(c.read(res["archive_uri"] + "/memory_diff.json"))
    return diff
