"""The content Lambda entry answers API Gateway REST (v1) and HTTP API (v2) events."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def handler(tmp_path_factory: pytest.TempPathFactory) -> Any:
    mp = pytest.MonkeyPatch()
    mp.setenv("SKALD_DATA_DIR", str(tmp_path_factory.mktemp("lambda")))
    spec = importlib.util.spec_from_file_location("content_handler",
                                                  ROOT / "functions/content/handler.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module.handler
    mp.undo()


class Ctx:
    aws_request_id = "req-1"
    function_name = "content"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:content"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def rest_event(method: str, path: str, query: dict[str, str] | None = None,
               body: dict[str, Any] | None = None,
               authorizer: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "resource": "/{proxy+}", "path": path, "httpMethod": method,
        "headers": {"content-type": "application/json", "host": "api.example.com"},
        "multiValueHeaders": {}, "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()},
        "pathParameters": {"proxy": path.lstrip("/")}, "stageVariables": None,
        "requestContext": {"resourcePath": "/{proxy+}", "httpMethod": method, "path": path,
                           "stage": "prod", "requestId": "r1", "identity": {"sourceIp": "1.2.3.4"},
                           "authorizer": authorizer or {}},
        "body": json.dumps(body) if body is not None else None, "isBase64Encoded": False,
    }


def http_event(method: str, path: str, query: str = "", body: dict[str, Any] | None = None,
               authorizer: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": query,
        "headers": {"content-type": "application/json", "host": "api.example.com"},
        "requestContext": {"http": {"method": method, "path": path, "protocol": "HTTP/1.1",
                                    "sourceIp": "1.2.3.4", "userAgent": "t"},
                           "requestId": "r2", "routeKey": "$default", "stage": "$default",
                           "authorizer": {"lambda": authorizer or {}}},
        "body": json.dumps(body) if body is not None else None, "isBase64Encoded": False,
    }


AUTH = {"account_id": "lambda-acct", "user_id": "ann", "role": "user"}


def test_rest_v1_write_then_read(handler: Any) -> None:
    out = handler(rest_event("POST", "/api/v1/content/write",
                             body={"uri": "viking://resources/l/a.md", "content": "hello"},
                             authorizer=AUTH), Ctx())
    assert out["statusCode"] == 200, out
    out = handler(rest_event("GET", "/api/v1/content/read",
                             {"uri": "viking://resources/l/a.md"}, authorizer=AUTH), Ctx())
    assert json.loads(out["body"])["result"] == "hello"


def test_http_v2_uses_authorizer_identity(handler: Any) -> None:
    out = handler(http_event("GET", "/api/v1/fs/ls", "uri=viking%3A%2F%2F~%2F",
                             authorizer=AUTH), Ctx())
    body = json.loads(out["body"])
    assert out["statusCode"] == 200
    assert all(e["uri"].startswith("viking://user/ann/") for e in body["result"])
    out = handler(http_event("GET", "/api/v1/nope"), Ctx())
    assert out["statusCode"] == 404 and json.loads(out["body"])["status"] == "error"
