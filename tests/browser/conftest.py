"""Browser tests of the console: Playwright drives Debian's headless chromium against live
servers (one api_key server with seeded data, one dev-mode server), one browser for them all.

`make browsers` (a prerequisite of `make test`) installs chromium with apt; where it is
missing these tests skip and say so. SKALD_UPDATE_SCREENSHOTS=1 writes each page's screenshot
to docs/console/ (the README links them); otherwise screenshots go to a temporary folder.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import threading
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient

from tests.support.server import SkaldServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT_KEY = "console-root-" + uuid.uuid4().hex
ACCOUNT = "console"
REPO = Path(__file__).resolve().parents[2]
STORAGE_KEY = "skald.console.auth"

XSS_NAME = '<img src=x onerror="window.__xss=1;alert(1)">.md'
XSS_CONTENT = (
    "# Payloads <script>window.__xss=2;alert(2)</script>\n\n"
    'Inline <img src=x onerror="window.__xss=3;alert(3)"> and '
    '"><svg onload="window.__xss=4;alert(4)"> stay text.\n\n'
    "[click me](javascript:window.__xss=5;alert(5)) and "
    '<a href="javascript:alert(6)">raw link</a>\n\n'
    "```html\n<script>window.__xss=7;alert(7)</script>\n```\n"
)
XSS_MEMORY = "I prefer <img src=x onerror=window.__xss=8;alert(8)> tabs over spaces."

LONG_SECTIONS = [
    ("Installation", "Install the package with pip and create a virtual environment. "),
    ("Configuration", "Settings come from environment variables with the SKALD prefix. "),
    (
        "Key rotation",
        "Signing keys rotate every ninety days; the rotation schedule is "
        "published to every replica before the old key expires. ",
    ),
    ("Troubleshooting", "Logs go to standard error; raise the verbosity to see requests. "),
]


def _png(width: int, height: int) -> bytes:
    raw = b"".join(b"\x00" + bytes([40, 120, 200]) * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def long_markdown() -> str:
    parts = ["# Operations handbook\n"]
    for title, sentence in LONG_SECTIONS:
        parts.append(f"\n## {title}\n\n" + "\n".join(sentence for _ in range(7)) + "\n")
    return "".join(parts)


def write_guide(root: Path) -> Path:
    guide = root / "guide"
    (guide / "api").mkdir(parents=True)
    (guide / "README.md").write_text(
        "# Guide\n\nHow to use the **service**.\n\n| key | value |\n|---|---|\n| a | 1 |\n"
    )
    (guide / "api" / "auth.md").write_text(
        "# Authentication\n\nSend the X-API-Key header or an Authorization Bearer token.\n"
    )
    (guide / "api" / "client.py").write_text(
        '"""HTTP client."""\n\n\nclass Client:\n    """A small client.\n\n    It spans '
        'lines.\n    """\n\n    def get(self, path: str) -> bytes:\n        return b""\n'
    )
    (guide / "handbook.md").write_text(long_markdown())
    return guide


@dataclass
class Seeded:
    url: str
    dev_url: str
    admin_key: str  # ada, admin of ACCOUNT
    user_key: str  # bob, a plain user of ACCOUNT
    session_id: str
    xss_uri: str
    big_dir: str
    extra: dict[str, Any] = field(default_factory=dict)


def _client(url: str, key: str) -> SyncHTTPClient:
    c = SyncHTTPClient(url=url, api_key=key, timeout=120)
    c.initialize()
    return c


def _seed(url: str, tmp: Path) -> tuple[str, str, str, str, str]:
    root = _client(url, ROOT_KEY)
    admin_key = root.admin_create_account(ACCOUNT, "ada")["user_key"]
    user_key = root.admin_register_user(ACCOUNT, "bob", "user")["user_key"]
    root.close()
    ada = _client(url, admin_key)
    ada.add_resource(str(write_guide(tmp)), wait=False)
    xss_uri = f"viking://resources/payloads/{XSS_NAME}"
    ada.mkdir("viking://resources/payloads")
    ada.write(xss_uri, XSS_CONTENT, mode="create", wait=False)
    # a directory larger than one page of the tree (200 entries): written without processing
    big = "viking://resources/many"
    ada.mkdir(big)
    ops = [{"uri": f"{big}/note-{i:03d}.md", "content": f"# Note {i}\n"} for i in range(230)]
    with httpx.Client(base_url=url, headers={"X-API-Key": admin_key}, timeout=120) as http:
        r = http.post(
            "/api/v1/content/batch-write",
            json={"root_uri": big, "operations": ops, "defer_processing": True, "wait": False},
        )
        r.raise_for_status()
    # an image, stored without processing (its bytes are no text to summarise or index)
    ada.mkdir("viking://resources/media")
    with httpx.Client(base_url=url, headers={"X-API-Key": admin_key}, timeout=120) as http:
        r = http.post(
            "/api/v1/content/batch-write",
            json={
                "root_uri": "viking://resources/media",
                "defer_processing": True,
                "operations": [
                    {
                        "uri": "viking://resources/media/logo.png",
                        "content_base64": base64.b64encode(_png(40, 20)).decode(),
                    }
                ],
            },
        )
        r.raise_for_status()
    sid = ada.create_session()["session_id"]
    ada.add_message(sid, "user", "I prefer concise answers and I always use Python.")
    ada.add_message(sid, "assistant", "Noted.")
    ada.commit_session(sid)
    ada.wait_processed()
    # the second commit repeats a preference (skipped as unchanged) and adds the payload
    ada.add_message(sid, "user", f"I prefer concise answers. {XSS_MEMORY}")
    ada.commit_session(sid)
    ada.wait_processed()
    # a live (uncommitted) message with every kind of part
    ada.add_message(
        sid,
        "assistant",
        parts=[
            {"type": "text", "text": "Here is what I used."},
            {
                "type": "context",
                "uri": "viking://resources/guide",
                "context_type": "resource",
                "abstract": "The guide.",
            },
            {
                "type": "tool",
                "tool_id": "t1",
                "tool_name": "grep",
                "tool_status": "completed",
                "tool_input": {"pattern": "rotation"},
                "tool_output": "handbook.md:23",
            },
            {"type": "image_url", "image_url": {"url": "https://example.com/diagram.png"}},
        ],
    )
    ada.close()
    return admin_key, user_key, sid, xss_uri, big


# Package scope: the servers stop, and Playwright's event loop is released, once the browser
# tests are done (later tests run their own asyncio loops on this thread).
@pytest.fixture(scope="package")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    base = tmp_path_factory.mktemp("console")
    # Remote sources from a loopback site (test-only: production never allows loopback).
    server = SkaldServer(
        base / "keys", root_api_key=ROOT_KEY, env={"SKALD_FETCH_ALLOW_LOOPBACK": "true"}
    )
    dev = SkaldServer(base / "dev")
    # the two servers start side by side: most of a start is loading the model
    dev_thread = threading.Thread(target=dev.start)
    dev_thread.start()
    try:
        server.start()
    finally:
        dev_thread.join()
    try:
        admin_key, user_key, sid, xss_uri, big = _seed(server.url, base)
        yield Seeded(server.url, dev.url, admin_key, user_key, sid, xss_uri, big)
    finally:
        server.stop()
        dev.stop()


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip(
            f"{CHROMIUM} is missing (run `make browsers` as root to install it with "
            "apt): the console's browser tests need it"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    pw = sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield b
    b.close()
    pw.stop()


class Page:
    """A fresh browser context (own session storage) with what fired in it recorded."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self.page = context.new_page()
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("dialog", self._dialog)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def sign_in_storage(self, key: str, url: str | None = None) -> None:
        """Signs in by the session storage the sign-in form would fill (tests of the form
        itself go through the form); with `url`, also the identity the form stores."""
        stored: dict[str, Any] = {"key": key}
        if url:
            health = httpx.get(url + "/health", headers={"X-API-Key": key}).json()
            stored["identity"] = {
                k: health[k] for k in ("account_id", "user_id", "role", "auth_mode")
            }
        creds = json.dumps(stored)
        self.context.add_init_script(
            f"sessionStorage.setItem({json.dumps(STORAGE_KEY)}, {json.dumps(creds)})"
        )

    def open(self, url: str, route: str, timeout: float = 30_000) -> Any:
        self.page.goto(f"{url}/console/#/{route}")
        return self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30_000) -> Any:
        self.page.wait_for_selector("body[data-ready]", timeout=timeout, state="attached")
        return self.page

    def ready_ms(self) -> int:
        return int(self.page.evaluate("document.body.dataset.readyMs"))


@pytest.fixture
def console(browser: Any) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = Page(context)
    yield page
    context.close()


SHOTS = REPO / "docs" / "console"


@pytest.fixture(scope="session")
def shots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("SKALD_UPDATE_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        return SHOTS
    return tmp_path_factory.mktemp("console-shots")


@pytest.fixture
def shot(shots_dir: Path) -> Any:
    def take(page: Any, name: str) -> Path:
        path = shots_dir / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 5000  # a rendered page, not a blank one
        return path

    return take
