"""Everything survives a restart of `skald serve` on the same data dir."""

from __future__ import annotations

from pathlib import Path

from tests.api.conftest import make_client
from tests.support.server import SkaldServer


def test_restart_keeps_files_tasks_accounts_and_index(tmp_path: Path) -> None:
    server = SkaldServer(tmp_path / "data", root_api_key="restart-root")
    server.start()
    try:
        root = make_client(server.url, api_key="restart-root")
        key = root.admin_create_account("persist", "boss")["user_key"]
        c = make_client(server.url, api_key=key)
        res = c.write("viking://resources/keep/me.md", "# Keep\n\nStill here.", wait=True)
        c.set_tags("viking://resources/keep/me.md", ["k=v"])
        server.restart()
        c = make_client(server.url, api_key=key)
        assert c.read("viking://resources/keep/me.md") == "# Keep\n\nStill here."
        assert c.attrs("viking://resources/keep/me.md")["attrs"]["tags"] == ["k=v"]
        assert c.get_task(res["task_id"])["status"] == "completed"
        assert "me.md" in c.overview("viking://resources/keep")
        assert [u["user_id"] for u in c.admin_list_users("persist")] == ["boss"]
    finally:
        server.stop()


def test_jobs_queued_before_a_stop_finish_after_restart(tmp_path: Path) -> None:
    server = SkaldServer(tmp_path / "data", env={"SKALD_WORKER_THREADS": "1"})
    server.start()
    try:
        c = make_client(server.url, account="q", user="u")
        tasks = [
            c.write(f"viking://resources/many/f{i}.md", f"# File {i}\n\nBody {i}.")["task_id"]
            for i in range(20)
        ]
        server.restart()  # some jobs are still queued or in flight
        c = make_client(server.url, account="q", user="u")
        c.wait_processed()
        statuses = {c.get_task(t)["status"] for t in tasks}
        assert statuses == {"completed"}
    finally:
        server.stop()
