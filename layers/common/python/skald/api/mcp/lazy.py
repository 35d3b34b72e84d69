"""The `/mcp` endpoint built on its first request.

The MCP SDK and its protocol models take noticeable memory and import time. `skald serve`
mounts MCP beside the whole HTTP API, and most servers never see an MCP client: they would
carry that for nothing (bench/ measures the memory while ingesting). The Lambda function that
serves only MCP builds the endpoint at init instead, where the import is part of the cold
start it measures.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import anyio.to_thread
from starlette.types import Receive, Scope, Send

if TYPE_CHECKING:
    from skald.api.mcp.endpoint import McpEndpoint
    from skald.compose.composition import Composition


class LazyMcpEndpoint:
    def __init__(self, container: Composition) -> None:
        self._container = container
        self._endpoint: McpEndpoint | None = None
        self._lock = threading.Lock()

    def _build(self) -> McpEndpoint:
        with self._lock:  # two first requests at once build it once
            if self._endpoint is None:
                from skald.api.mcp.endpoint import McpEndpoint

                self._endpoint = McpEndpoint(self._container)
            return self._endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint
        if endpoint is None:  # the import off the event loop: other requests go on
            endpoint = await anyio.to_thread.run_sync(self._build)
        await endpoint(scope, receive, send)
