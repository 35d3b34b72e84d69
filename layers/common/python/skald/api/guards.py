"""ASGI guards on every request's path, below the routers: what no route should have to think
about.

* `JsonText` refuses a JSON body that is not text: a lone UTF-16 surrogate escape (`"\\ud800"`)
  parses into a Python string that cannot be encoded, so it would fail deep inside (storage,
  tokenizer, SQLite) instead of at the edge. It also bounds a body sent without a length.
* `UnexpectedErrors` answers an unexpected exception with the 500 envelope and swallows it.
  Starlette's outermost error middleware re-raises after answering, and uvicorn then closes a
  connection whose response was already sent, without `Connection: close`: the client's next
  request on that keep-alive connection fails with a reset. Handled here, the server sees a
  normal response and keeps the connection.
"""

from __future__ import annotations

import logging
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skald.api.envelope import error_response

log = logging.getLogger("skald.api")

# One JSON escape: `\uXXXX` (its code unit captured) or a backslash and any other character, so
# that an escaped backslash (`\\`) is consumed whole and never starts a false `\u`.
_ESCAPE = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)
_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")


def lone_surrogate_at(body: bytes) -> int | None:
    """Byte offset of the first unpaired surrogate escape of a JSON text, None if every one is
    a high surrogate directly followed by a low one. Backslashes occur only inside strings in
    valid JSON; invalid JSON is refused by the parser anyway."""
    if not _SURROGATE_HINT.search(body):
        return None
    high_end = -1  # end offset of a high surrogate waiting for its low half
    high_start = -1
    for m in _ESCAPE.finditer(body):
        unit = int(m.group(1), 16) if m.group(1) is not None else -1
        is_low = 0xDC00 <= unit <= 0xDFFF
        if high_end >= 0:
            if is_low and m.start() == high_end:
                high_end = -1
                continue
            return high_start
        if 0xD800 <= unit <= 0xDBFF:
            high_start, high_end = m.start(), m.end()
        elif is_low:
            return m.start()
    return high_start if high_end >= 0 else None


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers") or ():
        if name == b"content-type":
            kind: bytes = value.split(b";", 1)[0].strip().lower()
            return kind == b"application/json" or kind.endswith(b"+json")
    return True  # no content type: FastAPI reads such a body as JSON


class JsonText:
    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] in ("GET", "HEAD", "OPTIONS")
            or not _is_json(scope)
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await error_response(
                    "PAYLOAD_TOO_LARGE",
                    f"Request body is larger than {self.limit} bytes",
                    {"limit": self.limit},
                    413,
                )(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        at = lone_surrogate_at(body)
        if at is not None:
            await error_response(
                "INVALID_ARGUMENT",
                f"The JSON body holds an unpaired UTF-16 surrogate escape at byte {at}: "
                "strings must be valid Unicode text",
                {"offset": at},
            )(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class UnexpectedErrors:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "done": False}

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                state["done"] = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if state["done"]:
                return  # the client has its whole response; nothing left to tell it
            if state["started"]:
                raise  # a cut response: only closing the connection can signal it
            await error_response("INTERNAL", "Internal error", None, 500)(scope, receive, send)
