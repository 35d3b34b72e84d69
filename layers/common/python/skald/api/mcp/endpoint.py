"""`/mcp`: MCP over streamable HTTP, stateless, JSON responses (no SSE streams, no session
state between requests), so any process can answer any request: `skald serve` or a Lambda
behind API Gateway.

The caller is admitted exactly as on the HTTP API (`api/deps.py`: X-API-Key or Bearer, dev-mode
headers, or the identity an API Gateway authorizer resolved); a missing or bad key is a 401 in
the error envelope before any MCP message is read.

Each request runs in its own session manager: stateless mode keeps nothing between requests,
and a per-request manager needs no lifespan, which neither a mounted sub-application nor Mangum
(lifespan off) would run."""

from __future__ import annotations

import logging

from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from skald.api.deps import any_identity
from skald.api.envelope import error_response
from skald.compose.composition import Composition
from skald.domain.errors import SkaldError

from .server import build_server

# A manager per request would log its start and stop on every call.
logging.getLogger("mcp.server.streamable_http_manager").setLevel(logging.WARNING)

LOOPBACK_HOSTS = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


class McpEndpoint:
    def __init__(self, container: Composition) -> None:
        self.server: MCPServer = build_server(container)
        # The server's own manager carries the low-level server every request manager needs.
        self.server.streamable_http_app(stateless_http=True, json_response=True)
        self.lowlevel = self.server.session_manager.app
        self.max_body = container.settings.max_request_bytes
        # Dev mode has no keys: only loopback Host/Origin headers are served, so a web page
        # cannot reach the local server through DNS rebinding. With keys, the key decides.
        self.security = TransportSecuritySettings(
            enable_dns_rebinding_protection=container.auth_mode == "dev",
            allowed_hosts=LOOPBACK_HOSTS,
            allowed_origins=LOOPBACK_ORIGINS,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            await any_identity(Request(scope, receive))  # kept on the request state
        except SkaldError as exc:
            await error_response(exc.code, exc.message, exc.details)(scope, receive, send)
            return
        manager = StreamableHTTPSessionManager(
            app=self.lowlevel,
            json_response=True,
            stateless=True,
            security_settings=self.security,
            max_request_body_size=self.max_body,
        )
        async with manager.run():
            await manager.handle_request(scope, receive, send)
