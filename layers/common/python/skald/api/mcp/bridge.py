"""`skald mcp`: MCP over stdio for hosts that spawn a process, forwarding every call to a
running Skald's `/mcp` with the caller's key. The remote server stays the only place tools are
defined: the bridge lists the remote tools and relays each call and its result unchanged (a
protocol error from the remote, such as an unknown tool, is relayed as the same error)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
)

from skald import __version__

log = logging.getLogger("skald.mcp.bridge")


def remote_headers(api_key: str | None, account: str | None, user: str | None) -> dict[str, str]:
    """The key as the HTTP API takes it; account and user only matter in dev mode."""
    headers: dict[str, str] = {}
    if api_key:
        headers["X-API-Key"] = api_key
    if account:
        headers["X-OpenViking-Account"] = account
    if user:
        headers["X-OpenViking-User"] = user
    return headers


def endpoint_url(url: str) -> str:
    """Accepts the server's base URL or its /mcp endpoint."""
    base = url.rstrip("/")
    return base if base.endswith("/mcp") else base + "/mcp"


class Bridge:
    def __init__(self, remote: Client, endpoint: str) -> None:
        self.remote = remote
        self.endpoint = endpoint
        self.server: Server[Any] = Server(
            "skald",
            version=__version__,
            instructions=remote.instructions,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return await self.remote.list_tools(cursor=params.cursor if params else None)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        try:
            return await self.remote.call_tool(params.name, params.arguments or {})
        except MCPError:
            raise  # the remote's protocol error (unknown tool, bad arguments), as it was
        except httpx2.HTTPError as exc:
            text = f"UNAVAILABLE: cannot reach {self.endpoint}: {exc}"
            return CallToolResult(
                content=[TextContent(type="text", text=text)],
                structured_content={"error": {"code": "UNAVAILABLE", "message": text}},
                is_error=True,
            )


async def serve(url: str, headers: dict[str, str]) -> None:
    endpoint = endpoint_url(url)
    timeout = httpx2.Timeout(30.0, read=600.0)  # a write with wait=true may take minutes
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        Client(streamable_http_client(endpoint, http_client=http)) as remote,
    ):
        bridge = Bridge(remote, endpoint)
        async with stdio_server() as (read, write):
            await bridge.server.run(read, write, bridge.server.create_initialization_options())


def run(url: str, api_key: str | None, account: str | None = None, user: str | None = None) -> int:
    """Serves until the host closes stdin. Exits 1, with the reason on stderr (stdout is the
    protocol), when the remote server cannot be reached or refuses the key."""
    try:
        anyio.run(serve, url, remote_headers(api_key, account, user))
    except Exception as exc:  # startup failures only: a running bridge answers tool errors
        cause: BaseException = exc
        while isinstance(cause, BaseExceptionGroup):  # anyio task groups wrap the cause
            cause = cause.exceptions[0]
        print(f"skald mcp: cannot serve {endpoint_url(url)}: {cause}", file=sys.stderr)
        return 1
    return 0
