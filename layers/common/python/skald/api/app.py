"""Builds the FastAPI app from routers. `skald serve` mounts every router; each Lambda
function mounts its own subset."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from fastapi import APIRouter, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skald import __version__
from skald.api.envelope import error_response, install_error_handlers
from skald.container import Container

CONTENT_ROUTERS = ("system", "fs", "content", "resources", "tasks", "admin")
SEARCH_ROUTERS = ("search",)
SESSION_ROUTERS = ("sessions",)
# --- Console -------------------------------------------------------------------------------
# The static web console at /console (and `/` redirecting to it). It calls the public API
# only and serves no data, so its routes need no identity. `skald serve` mounts it; in the
# cloud it belongs to the function that serves the content routers, on public routes.
CONSOLE_ROUTERS = ("console",)
# -------------------------------------------------------------------------------------------
ALL_ROUTERS = (*SEARCH_ROUTERS, *CONTENT_ROUTERS, *SESSION_ROUTERS, *CONSOLE_ROUTERS)


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
        request_id = (headers.get(b"x-request-id") or uuid.uuid4().hex.encode())
        length = headers.get(b"content-length")

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", request_id)]
            await send(message)

        if length is not None and (not length.isdigit() or int(length) > self.limit):
            response = error_response("PAYLOAD_TOO_LARGE",
                                      f"Request body is larger than {self.limit} bytes",
                                      {"limit": self.limit}, 413)
            await response(scope, receive, send_with_id)
            return
        await self.app(scope, receive, send_with_id)


def create_app(container: Container, routers: Sequence[str] = ALL_ROUTERS) -> FastAPI:
    app = FastAPI(title="Skald", version=__version__, docs_url="/docs", redoc_url=None)
    app.state.container = container
    install_error_handlers(app)
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"],
                       allow_headers=["*"], expose_headers=["X-Request-ID"])
    app.add_middleware(RequestLimits, limit=container.settings.max_request_bytes)

    for name in routers:
        router = _router(name)
        if router is not None:
            app.include_router(router)
    return app
