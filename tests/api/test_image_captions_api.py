"""Image captions from a vision-capable, OpenAI-compatible model (a scripted fake on loopback):
the image goes to the model as a data URL, the caption becomes the image's abstract and part
of its indexed text; when the model fails the metadata description stands on its own."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from openviking_sdk import SyncHTTPClient

from tests.api.conftest import make_client
from tests.fixtures import documents as d
from tests.support.server import SkaldServer

CAPTION = "A red bicycle leaning against a brick wall in the rain."


class Vision:
    def __init__(self) -> None:
        self.images: list[bytes] = []

    def answer(self, body: dict[str, Any]) -> tuple[int, str]:
        user = body["messages"][-1]["content"]
        if isinstance(user, list):  # text and image parts
            prompt = next(p["text"] for p in user if p["type"] == "text")
            url = next(p["image_url"]["url"] for p in user if p["type"] == "image_url")
            head, _, encoded = url.partition(",")
            assert head == "data:image/jpeg;base64"
            self.images.append(base64.b64decode(encoded))
            if "refused.png" in prompt:
                return 400, "image rejected"
            return 200, CAPTION
        return 200, "An image file." if "Summarise the file" in str(body) else "Pictures."


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SyncHTTPClient, Vision]]:
    script = Vision()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, text = script.answer(body)
            payload = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": text}}]}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    server = SkaldServer(
        tmp_path_factory.mktemp("vision") / "data",
        env={
            "SKALD_LLM_BASE_URL": f"http://127.0.0.1:{httpd.server_address[1]}",
            "SKALD_LLM_MODEL": "scripted-vision",
            "SKALD_LLM_VISION": "true",
        },
    )
    server.start()
    client = make_client(server.url, account="vision", user="alice")
    try:
        yield client, script
    finally:
        client.close()
        server.stop()
        httpd.shutdown()


def test_an_image_is_captioned_and_found_by_its_caption(
    vision: tuple[SyncHTTPClient, Vision], tmp_path: Path
) -> None:
    client, script = vision
    folder = tmp_path / "pictures"
    folder.mkdir()
    (folder / "bike.png").write_bytes(d.png(640, 480, "red"))
    (folder / "refused.png").write_bytes(d.png(20, 20, "blue"))
    client.add_resource(str(folder), wait=True)
    sent = script.images
    assert len(sent) == 2 and all(img.startswith(b"\xff\xd8\xff") for img in sent)
    text = client.read("viking://resources/pictures/bike.png")
    assert f"# bike.png\n\n{CAPTION}" in text and "640 × 480 pixels" in text
    hits = client.find(
        "bicycle against a wall",
        target_uri="viking://resources/pictures",
        limit=2,
        options={"level": 2},
    )["resources"]
    assert hits[0]["uri"] == "viking://resources/pictures/bike.png"
    refused = client.read("viking://resources/pictures/refused.png")
    assert CAPTION not in refused and "20 × 20 pixels" in refused
    assert client.stat("viking://resources/pictures/refused.png")["parsed"]["status"] == "extracted"
