from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openviking_sdk import SyncHTTPClient

from tests.support.server import SkaldServer

ROOT_KEY = "test-root-key-" + uuid.uuid4().hex
# Small limits so oversize inputs are cheap to produce.
SMALL_LIMITS = {
    "SKALD_MAX_WRITE_BYTES": str(256 * 1024),
    "SKALD_MAX_UPLOAD_BYTES": str(512 * 1024),
    "SKALD_MAX_REQUEST_BYTES": str(2 * 1024 * 1024),
}


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    # GET /api/v1/debug/fault answers an unexpected error (the 500 path's own test)
    server = SkaldServer(
        tmp_path_factory.mktemp("dev") / "data",
        env={**SMALL_LIMITS, "SKALD_FAULT_INJECTION": "true"},
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def key_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    server = SkaldServer(tmp_path_factory.mktemp("keys") / "data", root_api_key=ROOT_KEY)
    server.start()
    yield server
    server.stop()


def make_client(url: str, **kw: str) -> SyncHTTPClient:
    client = SyncHTTPClient(url=url, timeout=120, **kw)
    client.initialize()
    return client


@pytest.fixture
def account() -> str:
    """A fresh account per test keeps tests independent on the shared dev server."""
    return "acct-" + uuid.uuid4().hex[:10]


@pytest.fixture
def http(dev_server: SkaldServer, account: str) -> Iterator[httpx.Client]:
    """Raw HTTP as alice of the test's account, its preset tree created."""
    with httpx.Client(
        base_url=dev_server.url,
        timeout=60,
        headers={"X-OpenViking-Account": account, "X-OpenViking-User": "alice"},
    ) as c:
        c.get("/api/v1/fs/ls", params={"uri": "viking://"})  # create the preset tree
        yield c


@pytest.fixture
def client(dev_server: SkaldServer, account: str) -> Iterator[SyncHTTPClient]:
    c = make_client(dev_server.url, account=account, user="alice")
    yield c
    c.close()


@pytest.fixture
def sample_dir(tmp_path: Path) -> Path:
    root = tmp_path / "guide"
    (root / "api").mkdir(parents=True)
    (root / "README.md").write_text("# Guide\n\nHow to use the service.\n")
    (root / "api" / "auth.md").write_text(
        "# Authentication\n\nSend the X-API-Key header or an Authorization Bearer token.\n"
    )
    (root / "api" / "client.py").write_text(
        '"""HTTP client."""\n\n\nclass Client:\n    def get(self, path: str) -> bytes:\n'
        '        return b""\n'
    )
    return root


@pytest.fixture
def key_admin(key_server: SkaldServer) -> Iterator[SyncHTTPClient]:
    """An account admin (not root) on the api_key server."""
    root = make_client(key_server.url, api_key=ROOT_KEY)
    key = root.admin_create_account("acct-" + uuid.uuid4().hex[:8], "boss")["user_key"]
    c = make_client(key_server.url, api_key=key)
    yield c
    c.close()
    root.close()
