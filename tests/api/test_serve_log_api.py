"""What `skald serve` writes to its log: one line once it listens (where, on which data, how it
authenticates, never a key), then Skald's own records only; libraries' per-request INFO lines
(the MCP SDK's "Terminating session" on every MCP request) stay below the default level."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.api.conftest import ROOT_KEY
from tests.support.mcp_client import dev_headers, mcp_client, run
from tests.support.server import SkaldServer

# "%(asctime)s %(levelname)s %(name)s %(message)s"
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) (?P<name>\S+) ")


def records(server: SkaldServer) -> list[tuple[str, str, str]]:
    out = []
    for line in server.log_path.read_text(errors="replace").splitlines():
        m = RECORD.match(line)
        if m:
            out.append((m["level"], m["name"], line[m.end() :]))
    return out


def ready_lines(server: SkaldServer) -> list[str]:
    return [msg for _, _, msg in records(server) if msg.startswith("Skald is ready")]


def test_one_ready_line_then_no_library_chatter(tmp_path: Path) -> None:
    server = SkaldServer(tmp_path / "data")
    server.start()
    try:
        assert ready_lines(server) == [
            f"Skald is ready at {server.url} (backend local; data "
            f"{(tmp_path / 'data').resolve()}; auth dev: no API key, every caller trusted: "
            "loopback only)"
        ]

        async def scenario() -> None:
            for _ in range(3):
                async with mcp_client(server.url, dev_headers("logs")) as c:
                    assert (await c.list_tools()).tools

        run(scenario)
        headers = dev_headers("logs")
        assert (
            httpx.get(
                f"{server.url}/api/v1/fs/ls",
                params={"uri": "viking://"},
                headers=headers,
                timeout=30,
            ).status_code
            == 200
        )
        assert (
            httpx.post(
                f"{server.url}/api/v1/search/find", json={"query": "x"}, headers=headers, timeout=30
            ).status_code
            == 200
        )
    finally:
        server.stop()
    text = server.log_path.read_text(errors="replace")
    assert "Terminating session" not in text
    chatter = [
        r for r in records(server) if r[0] in {"DEBUG", "INFO"} and not r[1].startswith("skald")
    ]
    assert not chatter, chatter
    assert len(ready_lines(server)) == 1


def test_the_ready_line_of_a_keyed_server_names_the_mode_not_the_key(tmp_path: Path) -> None:
    server = SkaldServer(tmp_path / "data", root_api_key=ROOT_KEY)
    server.start()
    try:
        (line,) = ready_lines(server)
        assert "auth api_key: API keys required" in line
        assert ROOT_KEY not in server.log_path.read_text(errors="replace")
    finally:
        server.stop()
