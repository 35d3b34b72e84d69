"""Metering on `skald serve --backend aws-local`: the ledger is the DynamoDB state table
(moto), the semantic worker runs as its Lambda handler (its own buffer, flushed at the end of
each invocation), and the storage limit reads the totals items."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.api.test_metering_api import Traffic, dropped, new_account, sdk, series, summed
from tests.support.server import SkaldServer

pytest.importorskip("moto")
pytest.importorskip("osmem_server")

from tests.api.conftest import ROOT_KEY  # noqa: E402


@pytest.fixture(scope="module")
def aws_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    server = SkaldServer(
        tmp_path_factory.mktemp("awsmeter") / "data",
        root_api_key=ROOT_KEY,
        env={"SKALD_BACKEND": "aws-local"},
    )
    server.start(timeout_s=120)
    yield server
    server.stop()


def test_meters_and_the_storage_limit_on_dynamodb(aws_server: SkaldServer) -> None:
    account, key = new_account(
        aws_server, {"plan": "unlimited", "limits": {"storage_bytes": 50_000}}
    )
    traffic = Traffic()
    c = sdk(aws_server, key, traffic)
    content = "# Meters\n\nA note kept in S3, metered in DynamoDB.\n"
    try:
        c.write("viking://resources/aws/a.md", content, wait=True)
        c.ls("viking://resources/aws")
        c.wait_processed()
    finally:
        c.close()
    got = series(aws_server, key, account)
    families = {i["dims"]["family"]: i["value"] for i in got["items"] if i["unit"] == "requests"}
    assert families == dict(traffic.families)
    assert got["totals"]["bytes_uploaded"] == traffic.uploaded
    assert got["totals"]["bytes_stored"] >= len(content.encode())
    # the worker Lambda's records (flushed at the end of its invocation)
    assert summed(got["items"], "worker_ms", kind="semantic.process") > 0
    assert summed(got["items"], "index_records") > 0
    # 30,000 bytes more fit under the limit, 25,000 after them do not
    with httpx.Client(base_url=aws_server.url, headers={"X-API-Key": key}, timeout=60) as http:
        fits = http.post(
            "/api/v1/content/write",
            json={"uri": "viking://resources/aws/fits.md", "content": "y" * 30_000},
        )
        assert fits.status_code == 200, fits.text
        over = http.post(
            "/api/v1/content/write",
            json={"uri": "viking://resources/aws/big.md", "content": "z" * 25_000},
        )
        assert over.status_code == 403, over.text
        assert over.json()["error"]["details"]["limit"] == "storage_bytes"
        assert (
            http.get(
                "/api/v1/content/read", params={"uri": "viking://resources/aws/big.md"}
            ).status_code
            == 404
        )
    assert dropped(aws_server) == 0
