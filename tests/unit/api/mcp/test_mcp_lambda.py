"""/mcp behind API Gateway: the Lambda wiring (Mangum, lifespan off) serves stateless MCP
requests, each on its own, with the identity the authorizer resolved."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skald.compose.entrypoints import LambdaHandler, lambda_handler
from skald.config import Settings
from tests.unit.api.test_lambda_entry import AUTH, Ctx


@pytest.fixture(scope="module")
def handler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LambdaHandler]:
    settings = Settings(
        data_dir=Path(tmp_path_factory.mktemp("mcp-lambda")), root_api_key="root-key-for-the-test"
    )
    handler: LambdaHandler = lambda_handler("mcp", settings)  # the deployed function's own wiring
    yield handler


def rpc(
    handler: LambdaHandler,
    method: str,
    params: dict[str, Any] | None = None,
    authorizer: dict[str, str] | None = None,
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params or {}}
    event = {
        "version": "2.0",
        "routeKey": "POST /mcp",
        "rawPath": "/mcp",
        "rawQueryString": "",
        "headers": {
            "content-type": "application/json",
            "host": "abc.execute-api.aws",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-11-25",
        },
        "requestContext": {
            "http": {
                "method": "POST",
                "path": "/mcp",
                "protocol": "HTTP/1.1",
                "sourceIp": "1.2.3.4",
                "userAgent": "t",
            },
            "requestId": "r",
            "routeKey": "POST /mcp",
            "stage": "$default",
            "authorizer": {"lambda": authorizer} if authorizer else {},
        },
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }
    out: dict[str, Any] = handler(event, Ctx())
    return out


def call(handler: LambdaHandler, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    out = rpc(handler, "tools/call", {"name": tool, "arguments": arguments}, AUTH)
    assert out["statusCode"] == 200, out
    result: dict[str, Any] = json.loads(out["body"])["result"]
    return result


def test_tools_run_with_the_authorizer_identity(handler: LambdaHandler) -> None:
    listed = rpc(handler, "tools/list", authorizer=AUTH)
    assert listed["statusCode"] == 200
    assert len(json.loads(listed["body"])["result"]["tools"]) == 14
    health = call(handler, "health", {})["structuredContent"]
    assert (health["account_id"], health["user_id"], health["role"]) == (
        "lambda-acct",
        "ann",
        "user",
    )
    written = call(handler, "write", {"uri": "viking://resources/l/m.md", "content": "lambda"})
    assert not written["isError"] and written["structuredContent"]["created"] is True
    read = call(handler, "read", {"uris": "viking://resources/l/m.md"})
    assert read["content"][0]["text"] == "lambda"


def test_no_authorizer_identity_and_no_key_is_401(handler: LambdaHandler) -> None:
    out = rpc(handler, "tools/list")
    assert out["statusCode"] == 401
    assert json.loads(out["body"])["error"]["code"] == "UNAUTHENTICATED"
