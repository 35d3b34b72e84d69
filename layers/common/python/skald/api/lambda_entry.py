"""The HTTP functions behind API Gateway: the FastAPI app of a router set, wrapped by Mangum.

Fail closed: the caller's identity comes only from the API Gateway authorizer's context
(`requestContext.authorizer`, which the gateway fills after checking the API key). A request
without it gets 401 UNAUTHENTICATED before it reaches a route; only the function's public
paths (`/health`, `/ready`, the console's static files) are served without one, GET only.
No key is checked here and there is no dev mode, whatever the settings say.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from fastapi import FastAPI
from mangum import Mangum
from starlette.types import ASGIApp, Receive, Scope, Send

from skald import catalog
from skald.api.app import create_app
from skald.api.envelope import error_response
from skald.compose.composition import Composition
from skald.domain.access.identity import Identity


def authorizer_identity(event: dict[str, Any]) -> Identity | None:
    ctx = (event.get("requestContext") or {}).get("authorizer") or {}
    if "lambda" in ctx and isinstance(ctx["lambda"], dict):  # HTTP API (v2) simple responses
        ctx = ctx["lambda"]
    account, user, role = ctx.get("account_id"), ctx.get("user_id"), ctx.get("role")
    if not (account and user and role):
        return None
    return Identity(
        str(account),
        str(user),
        str(role),
        key_id=str(ctx.get("key_id") or "") or None,
        generation=str(ctx.get("generation") or "") or None,
    )


class AuthorizerIdentity:
    """Puts the authorizer's identity on the request (`request.state.identity`), or answers
    401 in the error envelope when there is none and the path is not public."""

    def __init__(self, app: ASGIApp, public_paths: Collection[str] = ()) -> None:
        self.app = app
        self.public_paths = frozenset(public_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        event = scope.get("aws.event")
        identity = authorizer_identity(event) if isinstance(event, dict) else None
        if identity is not None:
            scope.setdefault("state", {})["identity"] = identity
        elif not (
            scope.get("method") in ("GET", "HEAD")
            and catalog.matches(scope.get("path", ""), self.public_paths)
        ):
            response = error_response("UNAUTHENTICATED", "Missing or invalid API key", None, 401)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def build_app(
    services: Composition, routers: Sequence[str], public_paths: Collection[str] = ()
) -> FastAPI:
    if not services.authorizer_only:
        raise ValueError(
            "an HTTP function takes identities from the authorizer only: "
            "compose it with authorizer_only=True"
        )
    app = create_app(services, routers)
    app.add_middleware(AuthorizerIdentity, public_paths=public_paths)
    return app


def build_handler(
    services: Composition, routers: Sequence[str], public_paths: Collection[str] = ()
) -> Mangum:
    return Mangum(build_app(services, routers, public_paths), lifespan="off")
