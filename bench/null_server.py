"""A server that does no work: it answers every HTTP/1.1 request at once with a canned body
(`/health`: Skald's health answer; `POST /api/v1/search/find`: the answer given in a file;
anything else: an empty success). Through it, a client's own cost of a request (building it,
the loopback, reading and parsing the answer) is measured apart from any real server's work:
about what a find takes through that client against a server that only answers (this one's
own small share of reading the request and writing the answer is in it).

    python bench/null_server.py PORT FIND_ANSWER.json

Keep-alive, requests read by Content-Length (no chunked bodies: the clients measured send
none). The C event loop (uvloop) when installed, as `skald serve` uses.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import cast

HEALTH = b'{"status":"ok","healthy":true,"version":"0.5.2"}'
EMPTY = b'{"status":"ok","result":{}}'


def response(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


class Canned(asyncio.Protocol):
    def __init__(self, answers: dict[bytes, bytes]) -> None:
        self.answers = answers
        self.buf = b""
        self.transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio's classes: typed, not checked.
        self.transport = cast(asyncio.WriteTransport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            path = head[0].split(" ")[1].split("?")[0].encode()
            assert self.transport is not None
            self.transport.write(self.answers.get(path, self.answers[b""]))


async def serve(port: int, find_answer: bytes) -> None:
    answers = {
        b"/health": response(HEALTH),
        b"/api/v1/search/find": response(find_answer),
        b"": response(EMPTY),
    }  # b"": any other path
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Canned(answers), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    port, answer = int(sys.argv[1]), Path(sys.argv[2]).read_bytes()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(port, answer))
    else:
        uvloop.run(serve(port, answer))


if __name__ == "__main__":
    main()
