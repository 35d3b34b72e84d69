"""`skald mcp`, the stdio bridge, spawned as a subprocess and driven by the official MCP
client's stdio transport, relaying to a live server's /mcp."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from tests.api.conftest import ROOT_KEY, make_client
from tests.support.mcp_client import TOOLS, dev_headers, error, mcp_client, ok, run, text
from tests.support.server import SkaldServer


def bridge(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "skald.cli", "mcp", *args])


def test_bridge_relays_tools_results_and_errors(dev_server: SkaldServer, account: str) -> None:
    params = bridge("--url", dev_server.url, "--account", account, "--user", "alice")

    async def scenario() -> None:
        async with mcp_client(dev_server.url, dev_headers(account)) as direct:
            remote_tools = {t.name: t for t in (await direct.list_tools()).tools}
        async with Client(params) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == TOOLS
            for name, tool in tools.items():  # relayed unchanged
                assert tool.description == remote_tools[name].description
                assert tool.input_schema == remote_tools[name].input_schema
            assert "remember" in (c.instructions or "")
            written = ok(
                await c.call_tool(
                    "write", {"uri": "viking://resources/b/x.md", "content": "bridged\n"}
                )
            )
            assert written["created"] is True
            assert (
                text(await c.call_tool("read", {"uris": "viking://resources/b/x.md"}))
                == "bridged\n"
            )
            health = ok(await c.call_tool("health", {}))
            assert (health["account_id"], health["user_id"]) == (account, "alice")
            assert (
                error(await c.call_tool("stat", {"uri": "viking://resources/b/y.md"}))["code"]
                == "NOT_FOUND"
            )
            with pytest.raises(MCPError) as info:
                await c.call_tool("nope", {})
            assert info.value.code == INVALID_PARAMS and "Unknown tool" in info.value.message

    run(scenario)


def test_bridge_with_keys(key_server: SkaldServer) -> None:
    root = make_client(key_server.url, api_key=ROOT_KEY)
    key = root.admin_create_account("br-" + uuid.uuid4().hex[:8], "bea")["user_key"]
    root.close()

    async def scenario() -> None:
        async with Client(bridge("--url", key_server.url + "/mcp", "--api-key", key)) as c:
            health = ok(await c.call_tool("health", {}))
            assert health["user_id"] == "bea" and health["auth_mode"] == "api_key"

    run(scenario)
    # a refused key ends the bridge at once, with the reason on stderr
    proc = subprocess.run(
        [sys.executable, "-m", "skald.cli", "mcp", "--url", key_server.url, "--api-key", "wrong"],
        input=b"",
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == b""
    assert b"skald mcp: cannot serve " + key_server.url.encode() + b"/mcp" in proc.stderr
