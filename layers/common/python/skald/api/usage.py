"""Metering at the HTTP edge: every request counted by route family, its body's bytes as
uploaded, its response's as downloaded, and OpenViking's console operations (find, search,
context writes) once they succeed; all filed under the caller's account and user.

Plain ASGI beside the request metrics: it counts bytes as they pass, never buffers a body,
and records after the response is sent. A request with no known caller (refused before its
key was resolved) is not billed to anyone."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skald.domain.access.identity import Identity
from skald.domain.metering.units import OPERATIONS, Unit, route_family
from skald.ports import Meter


class UsageMetering:
    def __init__(self, app: ASGIApp, meter: Meter) -> None:
        self.app = app
        self.meter = meter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        uploaded = downloaded = 0
        status = 500

        async def counting_receive() -> Message:
            nonlocal uploaded
            message = await receive()
            if message["type"] == "http.request":
                uploaded += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            nonlocal downloaded, status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                downloaded += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            self._record(scope, status, uploaded, downloaded)

    def _record(self, scope: Scope, status: int, uploaded: int, downloaded: int) -> None:
        identity = (scope.get("state") or {}).get("identity")
        if not isinstance(identity, Identity) or not identity.account_id:
            return
        if identity.account_id.startswith("_"):  # the root key's own: no tenant to bill
            return
        account, user = identity.account_id, identity.user_id or ""
        route = getattr(scope.get("route"), "path", None)
        record = self.meter.record
        record(account, user, Unit.REQUESTS, 1, {"family": route_family(route)})
        record(account, user, Unit.BYTES_UPLOADED, uploaded)
        record(account, user, Unit.BYTES_DOWNLOADED, downloaded)
        op = OPERATIONS.get((scope.get("method", ""), route or ""))
        if op is not None and status < 400:
            record(account, user, Unit.OPERATIONS, 1, {"op": op})


def install_usage(app: FastAPI, meter: Meter) -> None:
    app.add_middleware(UsageMetering, meter=meter)
