"""A folder of 10,000 files added through openviking-sdk on `skald serve --backend aws-local`
(S3, DynamoDB and SQS on moto, the worker Lambda handlers, OpenSearch on osmem-server): the add
answers well inside API Gateway's 29 s with a task, the fetch worker imports the archive from
the upload in S3, and every file is there once, indexed once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openviking_sdk import SyncHTTPClient

from tests.api.conftest import make_client
from tests.api.test_sessions_api import wait_task
from tests.support.server import SkaldServer
from tests.support.tenancy_capture import check_capture_file

pytest.importorskip("moto")
pytest.importorskip("osmem_server")

DIRS, PER_DIR = 100, 100  # 10,000 files: the archive entry limit


@pytest.fixture(scope="module")
def aws_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    # Every AWS request is captured with the tenant of its call: the worker reads the upload
    # and writes the files in the importing account's scope only.
    work = tmp_path_factory.mktemp("awsimports")
    server = SkaldServer(
        work / "data", env={"SKALD_BACKEND": "aws-local"}, capture=work / "requests.jsonl"
    )
    server.start(timeout_s=120)
    yield server
    server.stop()
    assert server.capture is not None
    check_capture_file(server.capture, tenants=1)


@pytest.fixture(scope="module")
def c(aws_server: SkaldServer) -> Iterator[SyncHTTPClient]:
    client = make_client(aws_server.url, account="imp", user="ann")
    yield client
    client.close()


def _timed_requests(c: SyncHTTPClient) -> list[tuple[str, float]]:
    """The path and duration of every request the SDK client sends from now on."""
    timings: list[tuple[str, float]] = []
    inner = c._async_client  # the SDK's async client, under its sync wrapper
    send = inner._request

    async def timed(method: str, url: str, **kw: Any) -> Any:
        started = time.monotonic()
        try:
            return await send(method, url, **kw)
        finally:
            timings.append((url, time.monotonic() - started))

    inner._request = timed
    return timings


def _text(i: int) -> str:
    return f"# Entry {i}\n\nquokka{i:05d} lives here.\n"


@pytest.mark.timeout(900)
def test_ten_thousand_files_are_imported_by_the_worker(c: SyncHTTPClient, tmp_path: Path) -> None:
    src = tmp_path / "library"
    for d in range(DIRS):
        folder = src / f"shelf{d:03d}"
        folder.mkdir(parents=True)
        for f in range(PER_DIR):
            i = d * PER_DIR + f
            (folder / f"book{i:05d}.md").write_text(_text(i))

    timings = _timed_requests(c)
    res = c.add_resource(str(src))  # zipped, uploaded, added: one SDK call
    [(_, answered)] = [t for t in timings if t[0] == "/api/v1/resources"]
    assert answered < 5.0, f"the add request took {answered:.1f}s"
    assert res["status"] == "success" and res["root_uri"] == "viking://resources/library"

    started = time.monotonic()
    done = wait_task(c, res["task_id"], timeout=900)
    print(f"add request {answered:.2f}s, import and processing {time.monotonic() - started:.1f}s")
    assert done["status"] == "completed", done
    assert done["meta"]["import"]["done"] == DIRS * PER_DIR
    assert done["result"]["indexed_files"] == DIRS * PER_DIR, done["result"]

    shelves = c.ls("viking://resources/library")
    assert [e["name"] for e in shelves] == [f"shelf{d:03d}" for d in range(DIRS)]
    seen: list[str] = []
    for shelf in shelves:
        seen += [e["uri"] for e in c.ls(shelf["uri"]) if not e["isDir"]]
    assert len(seen) == len(set(seen)) == DIRS * PER_DIR
    for i in (0, 4321, 9999):
        uri = f"viking://resources/library/shelf{i // PER_DIR:03d}/book{i:05d}.md"
        assert c.read(uri) == _text(i)
        hits = c.search(f"quokka{i:05d}", options={"search_type": "keywords"})
        files = [h["uri"] for h in hits["resources"] if h["level"] == 2]
        assert files == [uri], files  # indexed once
