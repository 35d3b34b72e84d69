"""What a local server loads only when it is used: the MCP SDK on the first /mcp request,
faiss once the index holds more vectors than an exact scan serves, and the client commands'
modules never for a server command. Each case runs in a fresh interpreter, since this test
process has imported everything already."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def _run(code: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_the_mcp_sdk_is_loaded_by_the_first_mcp_request(tmp_path: Path) -> None:
    out = _run(
        """
        import sys
        from pathlib import Path
        from starlette.testclient import TestClient
        from skald.api.app import create_app
        from skald.compose.serve import ServeRuntime
        from skald.config import Settings

        runtime = ServeRuntime(Settings(backend="local", data_dir=Path(sys.argv[1])))
        app = create_app(runtime.services, mcp_on_first_use=True)
        before = "mcp.server" in sys.modules
        with TestClient(app, base_url="http://127.0.0.1") as client:
            client.get("/health")
            idle = "mcp.server" in sys.modules
            answer = client.post("/mcp", json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}}},
                headers={"Accept": "application/json, text/event-stream",
                         "X-OpenViking-Account": "acme", "X-OpenViking-User": "ann"})
        print(before, idle, answer.status_code, answer.json()["result"]["serverInfo"]["name"],
              "mcp.server" in sys.modules)
        runtime.stop()
    """,
        tmp_path,
    )
    assert out.splitlines()[-1] == "False False 200 skald True"


def test_a_small_index_opens_without_faiss(tmp_path: Path) -> None:
    out = _run(
        """
        import sys
        from pathlib import Path
        from skald.adapters.local.index.searchindex import LocalSearchIndex

        for _ in range(2):  # created, then reopened
            index = LocalSearchIndex(Path(sys.argv[1]) / "index.db", dimension=4)
            index.close()
        print("faiss" in sys.modules)
    """,
        tmp_path,
    )
    assert out.splitlines()[-1] == "False"


def test_a_server_command_skips_the_client_commands(tmp_path: Path) -> None:
    out = _run(
        """
        import sys
        from skald.cli import main

        code = main(["admin", "--data-dir", sys.argv[1], "list-accounts"])
        print(code, "httpx" in sys.modules, "rich" in sys.modules)
    """,
        tmp_path,
    )
    assert out.splitlines()[-1] == "0 False False"
