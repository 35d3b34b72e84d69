"""A real `skald serve` killed in the middle of a commit, then restarted on the same data dir.

SKALD_FAULT_POINTS makes the server end itself with os._exit at a named step of the commit,
which is what kill -9 does at that moment (no handler, no flush, no response); the commit
request fails on the client side. The restarted server recovers the commit before serving,
and everything is checked through openviking-sdk.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skald.services.faults import EXIT_CODE
from tests.api.conftest import make_client
from tests.api.test_sessions_api import wait_task
from tests.support.server import SkaldServer

MESSAGES = [
    ("user", "I prefer dark mode in every editor."),
    ("assistant", "Noted: dark mode everywhere."),
    ("user", "My name is Alice and I work at Acme."),
]


def test_a_server_killed_mid_commit_and_mid_recovery_finishes_it(tmp_path: Path) -> None:
    # The first death leaves the archive reserved with no history directory (one of the
    # shapes reported); the second, during recovery at the next start, leaves the directory
    # without messages.jsonl (the other); the third start finishes the commit.
    server = SkaldServer(tmp_path / "data", env={"SKALD_FAULT_POINTS": "commit.after_reserve=exit"})
    server.start()
    try:
        c = make_client(server.url, account="crash", user="alice")
        for role, text in MESSAGES:
            c.add_message("s1", role, text)
        with pytest.raises(Exception):  # noqa: B017 - the connection dies with the server
            c.commit_session("s1")
        assert server.proc is not None and server.proc.wait(timeout=30) == EXIT_CODE
        c.close()

        server.extra_env = {"SKALD_FAULT_POINTS": "commit.after_archive_dir=exit"}
        with pytest.raises(RuntimeError, match="exited"):
            server.start()  # recovery runs before the server listens, and dies in it
        assert server.proc is not None and server.proc.wait(timeout=30) == EXIT_CODE

        server.extra_env = {}  # the same data dir, no crash point: a plain restart
        server.start()
        c = make_client(server.url, account="crash", user="alice")
        c.wait_processed()  # not idle until the commit and its memory job are done
        meta = c.get_session("s1")
        assert (meta["commit_count"], meta["message_count"], meta["total_message_count"]) == (
            1,
            0,
            3,
        )
        archive = c.get_session_archive("s1", "archive_001")
        assert archive["status"] == "done"
        texts = [m["parts"][0]["text"] for m in archive["messages"]]
        assert texts == [text for _, text in MESSAGES]  # none lost, none twice
        base = "viking://user/alice/sessions/s1/history/archive_001"
        lines = [json.loads(line) for line in c.read(f"{base}/messages.jsonl").splitlines()]
        assert [m["id"] for m in lines] == [m["id"] for m in archive["messages"]]
        done = json.loads(c.read(f"{base}/.done"))
        assert len(done["completed_memory_steps"]["long_term"]) == 3
        tasks = c.list_tasks(task_type="session_commit")
        assert len(tasks) == 1
        assert wait_task(c, tasks[0]["task_id"])["status"] == "completed"
        diff = json.loads(c.read(f"{base}/memory_diff.json"))
        pref = next(op for op in diff["operations"]["adds"] if op["memory_type"] == "preferences")
        assert "dark mode" in c.read(pref["uri"]).lower()
        # nothing is left to commit, and the session commits normally again
        assert c.commit_session("s1")["status"] == "skipped"
        c.add_message("s1", "user", "One more thing.")
        again = c.commit_session("s1")
        assert again["archive_uri"].endswith("archive_002")
        assert wait_task(c, again["task_id"])["status"] == "completed"
        c.close()
    finally:
        server.stop()
