"""Builds the FastAPI app from routers. `skald serve` mounts every router; each Lambda
function mounts its own subset."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from fastapi import APIRouter, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skald import __version__, catalog
from skald.api.envelope import error_response, install_error_handlers
from skald.api.guards import JsonText, UnexpectedErrors
from skald.api.metrics import install_metrics
from skald.api.openapi import install_openapi
from skald.api.usage import install_usage
from skald.compose.composition import Composition
from skald.domain.access import call_context

CONTENT_ROUTERS = catalog.function("content").routers
SEARCH_ROUTERS = catalog.function("search").routers
SESSION_ROUTERS = catalog.function("sessions").routers
MCP_ROUTERS = catalog.function("mcp").routers  # not a router: the MCP endpoint at /mcp
# Search routes first: routes are matched in order, and find/search are the hot path.
ALL_ROUTERS = (*SEARCH_ROUTERS, *CONTENT_ROUTERS, *SESSION_ROUTERS, *MCP_ROUTERS)


def _router(name: str) -> APIRouter | None:
    import importlib

    try:
        module = importlib.import_module(f"skald.api.routers.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"skald.api.routers.{name}":
            return None
        raise
    router: APIRouter = module.router
    return router


class RequestLimits:
    """Refuses oversize bodies up front (413 in the envelope) and echoes X-Request-ID.
    Plain ASGI rather than an http middleware: it sits on every request's path."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        request_id = (
            _gateway_request_id(scope) or headers.get(b"x-request-id") or uuid.uuid4().hex.encode()
        )
        client = scope.get("client")
        call_context.request_meta.set(
            call_context.RequestMeta(
                request_id.decode("latin-1"),
                str(client[0]) if client else None,
                method=scope.get("method"),
                path=scope.get("path"),
                started=time.monotonic(),
                # The router records the matched route in this same scope.
                route_of=lambda: getattr(scope.get("route"), "path", None),
            )
        )
        length = headers.get(b"content-length")

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id)]
            await send(message)

        if length is not None and (not length.isdigit() or int(length) > self.limit):
            response = error_response(
                "PAYLOAD_TOO_LARGE",
                f"Request body is larger than {self.limit} bytes",
                {"limit": self.limit},
                413,
            )
            await response(scope, receive, send_with_id)
            return
        await self.app(scope, receive, send_with_id)


def _gateway_request_id(scope: Scope) -> bytes | None:
    """Behind API Gateway, its own request id (the one its access log shows), not one the
    client sent."""
    event = scope.get("aws.event")
    if isinstance(event, dict):
        value = (event.get("requestContext") or {}).get("requestId")
        if isinstance(value, str) and value:
            return value.encode("latin-1", "replace")
    return None


async def _injected_fault() -> None:
    """SKALD_FAULT_INJECTION=true only (tests): an unexpected error on demand."""
    raise RuntimeError("injected fault")


def create_app(
    container: Composition, routers: Sequence[str] = ALL_ROUTERS, *, mcp_on_first_use: bool = False
) -> FastAPI:
    """`mcp_on_first_use`: the MCP endpoint (and its SDK) is built on its first request
    (skald.api.mcp.lazy), for a server that mounts it beside everything else."""
    app = FastAPI(title="Skald", version=__version__, docs_url="/docs", redoc_url=None)
    app.state.container = container
    install_error_handlers(app)
    # Innermost first: an unexpected error still passes CORS and gets its request id.
    app.add_middleware(UnexpectedErrors)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=["*"],
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=["X-Request-ID"],
    )
    app.add_middleware(JsonText, limit=container.settings.max_request_bytes)
    app.add_middleware(RequestLimits, limit=container.settings.max_request_bytes)
    install_usage(app, container.meter)
    install_metrics(app, container.metrics)  # outermost: refused requests count too
    if container.settings.fault_injection:
        app.add_api_route("/api/v1/debug/fault", _injected_fault, include_in_schema=False)

    for name in routers:
        router = None if name in MCP_ROUTERS else _router(name)
        if router is not None:
            app.include_router(router)
    if "mcp" in routers:
        # MCP (streamable HTTP) at exactly /mcp, same keys and identity as the HTTP API.
        # Imported here: the MCP SDK is only loaded by the entry points that serve it.
        endpoint: ASGIApp
        if mcp_on_first_use:
            from skald.api.mcp.lazy import LazyMcpEndpoint

            endpoint = LazyMcpEndpoint(container)
        else:
            from skald.api.mcp.endpoint import McpEndpoint

            endpoint = McpEndpoint(container)
        # POST only: stateless JSON mode offers no SSE stream (GET) nor session (DELETE).
        app.router.routes.append(Route("/mcp", endpoint, methods=["POST"]))
    install_openapi(app)
    return app
