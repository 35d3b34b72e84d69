"""Limits on request heads for `skald serve`: uvicorn's httptools protocol bounded in size and
header count.

A request head (request line and headers) larger than `max_head_bytes`, or with more than
`max_headers` headers, is answered 431 (Request Header Fields Too Large) in the error envelope
and the connection is closed. It is checked as the bytes arrive, so a client that never ends
its headers holds at most about one limit of memory, not what it sends. The ASGI app cannot do
this: it sees a request only once its head is complete. (Behind API Gateway, the gateway's own
header limits apply.)
"""

from __future__ import annotations

import json
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from skald.api.envelope import error_body


class _HeadTooLarge(Exception):
    pass


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    max_head_bytes = 64 * 1024
    max_headers = 100

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0  # bytes of the current head received so far
        self._head_size = 0  # bytes of its URL and headers parsed so far
        self._header_count = 0
        self._refused = False

    # Parser callbacks: exact sizes of what was parsed.

    def on_message_begin(self) -> None:
        self._in_head = True
        self._head_bytes = self._head_size = self._header_count = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._grow(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.max_headers:
            raise _HeadTooLarge(f"more than {self.max_headers} header fields")
        self._grow(len(name) + len(value))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def _grow(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self.max_head_bytes:
            raise _HeadTooLarge(f"request head larger than {self.max_head_bytes} bytes")

    # Bytes as they arrive: a head that is not complete yet is counted chunk by chunk.

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        was_in_head = self._in_head
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, _HeadTooLarge):
                self._refuse(str(exc.__context__))
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if was_in_head and self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._refuse(f"request head larger than {self.max_head_bytes} bytes")

    def _refuse(self, reason: str) -> None:
        self._refused = True
        body = json.dumps(
            error_body(
                "REQUEST_HEADER_FIELDS_TOO_LARGE",
                f"Request header fields too large: {reason}",
                {"max_head_bytes": self.max_head_bytes, "max_headers": self.max_headers},
            )
        ).encode()
        self.transport.write(
            b"".join(
                [
                    b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
                    b"content-type: application/json\r\n",
                    b"content-length: " + str(len(body)).encode() + b"\r\n",
                    b"connection: close\r\n\r\n",
                    body,
                ]
            )
        )
        self.transport.close()


def bounded_protocol(max_head_bytes: int, max_headers: int) -> type[BoundedHttpToolsProtocol]:
    """The protocol class for `uvicorn.run(http=...)` with these limits."""
    return type(
        "BoundedHttpTools",
        (BoundedHttpToolsProtocol,),
        {"max_head_bytes": max_head_bytes, "max_headers": max_headers},
    )
