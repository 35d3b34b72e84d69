"""Lambda wiring shared by the HTTP functions: one container per cold start, the identity an
API Gateway authorizer resolved, and Mangum around the FastAPI app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request, Response
from mangum import Mangum

from skald.api.app import create_app
from skald.config import Settings
from skald.container import Container, build_container
from skald.domain.identity import Identity


def _authorizer_identity(event: dict[str, Any]) -> Identity | None:
    ctx = (event.get("requestContext") or {}).get("authorizer") or {}
    if "lambda" in ctx and isinstance(ctx["lambda"], dict):  # HTTP API (v2) simple responses
        ctx = ctx["lambda"]
    account, user, role = ctx.get("account_id"), ctx.get("user_id"), ctx.get("role")
    if not (account and user and role):
        return None
    return Identity(str(account), str(user), str(role))


def build_app(routers: Sequence[str], container: Container | None = None) -> FastAPI:
    app = create_app(container or build_container(Settings()), routers)

    @app.middleware("http")
    async def authorizer_identity(request: Request,
                                  call_next: Callable[[Request], Awaitable[Response]]
                                  ) -> Response:
        event = request.scope.get("aws.event")
        if isinstance(event, dict):
            identity = _authorizer_identity(event)
            if identity is not None:
                request.state.identity = identity
        return await call_next(request)

    return app


def build_handler(routers: Sequence[str], container: Container | None = None) -> Mangum:
    return Mangum(build_app(routers, container), lifespan="off")
