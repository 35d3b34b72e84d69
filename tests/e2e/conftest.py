"""The real-account path: these tests drive a deployed stack through openviking-sdk and run
only when it is named (docs/deploy.md, "End-to-end tests"):

    SKALD_E2E_URL        the stack's ApiUrl output
    SKALD_E2E_API_KEY    a user key (data routes)
    SKALD_E2E_ROOT_KEY   optional: the root key (admin routes)
    SKALD_E2E_STACK      optional: the stack name, for the dead-letter test, which also needs
                         the operator's AWS credentials (boto3's usual chain)

Everything a test writes lives under a fresh viking://resources/e2e-<id>/ or session
e2e-<id>-..., removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from openviking_sdk import SyncHTTPClient

T = TypeVar("T")

URL = os.environ.get("SKALD_E2E_URL", "").rstrip("/")
API_KEY = os.environ.get("SKALD_E2E_API_KEY", "")
ROOT_KEY = os.environ.get("SKALD_E2E_ROOT_KEY", "")
STACK = os.environ.get("SKALD_E2E_STACK", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.e2e)
            if not (URL and API_KEY):
                item.add_marker(
                    pytest.mark.skip(
                        reason="no deployed stack: set SKALD_E2E_URL and SKALD_E2E_API_KEY "
                        "(a user key; see docs/deploy.md)"
                    )
                )


@pytest.fixture(scope="session")
def client() -> Iterator[SyncHTTPClient]:
    c = SyncHTTPClient(url=URL, api_key=API_KEY, timeout=60)
    c.initialize()
    yield c
    c.close()


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def folder(client: SyncHTTPClient, run_id: str) -> Iterator[str]:
    uri = f"viking://resources/e2e-{run_id}"
    yield uri
    with contextlib.suppress(Exception):  # best effort: it may never have been made
        client.rm(uri, recursive=True)


def eventually(
    probe: Callable[[], T | None], timeout_s: float, what: str, every_s: float = 2.0
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def task_done(client: SyncHTTPClient, task_id: str, timeout_s: float = 300) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        task = client.get_task(task_id) or {}
        assert task.get("status") != "failed", task
        return task if task.get("status") == "completed" else None

    return eventually(finished, timeout_s, f"task {task_id}")
