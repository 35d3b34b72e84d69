"""The official MCP client (the `mcp` SDK) against a live server's /mcp, for tests."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent
from openviking_sdk import SyncHTTPClient

T = TypeVar("T")

TOOLS = {
    "find",
    "search",
    "read",
    "list",
    "tree",
    "grep",
    "glob",
    "stat",
    "write",
    "edit",
    "remember",
    "forget",
    "add_resource",
    "health",
}


@asynccontextmanager
async def mcp_client(
    base_url: str, headers: dict[str, str] | None = None, mode: str = "auto"
) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=120) as http,
        Client(streamable_http_client(base_url + "/mcp", http_client=http), mode=mode) as client,
    ):
        yield client


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """Runs a scenario; a failure inside the client's task groups is raised as itself."""
    try:
        return anyio.run(fn)
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        raise leaf from None


def dev_headers(account: str, user: str = "alice") -> dict[str, str]:
    return {"X-OpenViking-Account": account, "X-OpenViking-User": user}


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    content: dict[str, Any] = result.structured_content
    return content


def error(result: CallToolResult) -> dict[str, Any]:
    """A tool error: isError, the Skald code first in the text, the error in structured form."""
    assert result.is_error, text(result)
    assert result.structured_content is not None
    err: dict[str, Any] = result.structured_content["error"]
    assert text(result) == f"{err['code']}: {err['message']}"
    return err


def wait_task(client: SyncHTTPClient, task_id: str, timeout: float = 60) -> dict[str, Any]:
    """Background work (memory extraction, indexing) observed through the HTTP API."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        task: dict[str, Any] | None = client.get_task(task_id)
        if task and task["status"] in {"completed", "failed", "cancelled"}:
            return task
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} did not finish")


def hit_uris(result: dict[str, Any]) -> list[str]:
    return [
        h["uri"] for group in ("memories", "resources", "skills") for h in result.get(group) or []
    ]


def dumps(value: Any) -> str:
    return json.dumps(value, indent=1)
