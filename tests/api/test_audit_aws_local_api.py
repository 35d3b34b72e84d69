"""The audit trail on `skald serve --backend aws-local` in api_key mode: records are items of
the DynamoDB state table (moto), the admin's view reads the account's partitions and root's
every account's through gsi1, as in the cloud."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import NotFoundError

from tests.api.conftest import make_client
from tests.support.server import SkaldServer

pytest.importorskip("moto")
pytest.importorskip("osmem_server")

ROOT_KEY = "aws-audit-root-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def aws_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkaldServer]:
    server = SkaldServer(
        tmp_path_factory.mktemp("awsaudit") / "data",
        root_api_key=ROOT_KEY,
        env={"SKALD_BACKEND": "aws-local"},
    )
    server.start(timeout_s=120)
    yield server
    server.stop()


def listing(url: str, key: str, expect: int = 200, **params: str) -> dict[str, object]:
    response = httpx.get(
        f"{url}/api/v1/console/audit", headers={"X-API-Key": key}, params=params, timeout=60
    )
    assert response.status_code == expect, response.text
    body: dict[str, object] = response.json()
    return body


def test_rm_is_recorded_and_listed_on_dynamodb(aws_server: SkaldServer) -> None:
    url = aws_server.url
    root = make_client(url, api_key=ROOT_KEY)
    assert root.get_status()  # the aws backend, on its emulators
    name = "aws-" + uuid.uuid4().hex[:8]
    ada_key = root.admin_create_account(name, "ada")["user_key"]
    bob_key = root.admin_register_user(name, "bob", "user")["user_key"]
    seen: list[str] = []

    async def note(response: httpx.Response) -> None:
        if response.request.method == "DELETE":
            seen.append(response.headers["x-request-id"])

    ada = SyncHTTPClient(url=url, api_key=ada_key, timeout=120, event_hooks={"response": [note]})
    ada.initialize()
    try:
        ada.write("viking://resources/s3.md", "# In S3\n", mode="create")
        ada.rm("viking://resources/s3.md")
        with pytest.raises(NotFoundError):
            ada.rm("viking://resources/s3.md")
    finally:
        ada.close()
    callers: list[tuple[str, dict[str, Any]]] = [
        (ada_key, {}),
        (ROOT_KEY, {"account_id": name}),
        (ROOT_KEY, {}),
    ]
    for key, params in callers:
        result = listing(url, key, action="fs.rm", **params)["result"]
        assert isinstance(result, dict)
        items = [i for i in result["items"] if i["account_id"] == name]
        assert [(i["request_id"], i["outcome"], i["status_code"]) for i in items] == [
            (seen[1], "error", 404),
            (seen[0], "ok", 200),
        ]
        assert {(i["user_id"], i["role"], i["source_ip"], i["target"]) for i in items} == {
            ("ada", "admin", "127.0.0.1", "viking://resources/s3.md")
        }
    refused = listing(url, bob_key, expect=403)
    assert refused["error"]["code"] == "PERMISSION_DENIED"  # type: ignore[index]
    assert listing(url, ROOT_KEY, expect=400, status="nope")["status"] == "error"
    root.close()
