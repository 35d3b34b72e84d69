"""Builds the FastAPI app from routers. `skald serve` mounts every router; each Lambda
function mounts its own subset."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.middleware.cors import CORSMiddleware

from skald import __version__
from skald.api.envelope import error_response, install_error_handlers
from skald.container import Container

CONTENT_ROUTERS = ("system", "fs", "content", "resources", "tasks", "admin")
SEARCH_ROUTERS = ("search",)
SESSION_ROUTERS = ("sessions",)
ALL_ROUTERS = (*CONTENT_ROUTERS, *SEARCH_ROUTERS, *SESSION_ROUTERS)


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


def create_app(container: Container, routers: Sequence[str] = ALL_ROUTERS) -> FastAPI:
    app = FastAPI(title="Skald", version=__version__, docs_url="/docs", redoc_url=None)
    app.state.container = container
    install_error_handlers(app)
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"],
                       allow_headers=["*"], expose_headers=["X-Request-ID"])
    limit = container.settings.max_request_bytes

    @app.middleware("http")
    async def envelope_limits(request: Request,
                              call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            response: Response = error_response(
                "PAYLOAD_TOO_LARGE", f"Request body is larger than {limit} bytes",
                {"limit": limit}, 413)
        else:
            response = await call_next(request)
        response.headers["X-Request-ID"] = request_id
        return response

    for name in routers:
        router = _router(name)
        if router is not None:
            app.include_router(router)
    return app
