"""The HTTP Lambda entries answer API Gateway REST (v1) and HTTP API (v2) events, and fail
closed: the identity comes only from the authorizer's context, whatever the settings say."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def handler(tmp_path_factory: pytest.TempPathFactory) -> Any:
    mp = pytest.MonkeyPatch()
    mp.setenv("SKALD_DATA_DIR", str(tmp_path_factory.mktemp("lambda")))
    spec = importlib.util.spec_from_file_location(
        "content_handler", ROOT / "functions/content/handler.py"
    )
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


def rest_event(
    method: str,
    path: str,
    query: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
    authorizer: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {"content-type": "application/json", "host": "api.example.com"},
        "multiValueHeaders": {},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()},
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": path,
            "stage": "prod",
            "requestId": "r1",
            "identity": {"sourceIp": "1.2.3.4"},
            "authorizer": authorizer or {},
        },
        "body": json.dumps(body) if body is not None else None,
        "isBase64Encoded": False,
    }


def http_event(
    method: str,
    path: str,
    query: str = "",
    body: dict[str, Any] | None = None,
    authorizer: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": {"content-type": "application/json", "host": "api.example.com"},
        "requestContext": {
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "1.2.3.4",
                "userAgent": "t",
            },
            "requestId": "r2",
            "routeKey": "$default",
            "stage": "$default",
            "authorizer": {"lambda": authorizer or {}},
        },
        "body": json.dumps(body) if body is not None else None,
        "isBase64Encoded": False,
    }


AUTH = {"account_id": "lambda-acct", "user_id": "ann", "role": "user"}


def test_rest_v1_write_then_read(handler: Any) -> None:
    out = handler(
        rest_event(
            "POST",
            "/api/v1/content/write",
            body={"uri": "viking://resources/l/a.md", "content": "hello"},
            authorizer=AUTH,
        ),
        Ctx(),
    )
    assert out["statusCode"] == 200, out
    out = handler(
        rest_event(
            "GET", "/api/v1/content/read", {"uri": "viking://resources/l/a.md"}, authorizer=AUTH
        ),
        Ctx(),
    )
    assert json.loads(out["body"])["result"] == "hello"


def test_http_v2_uses_authorizer_identity(handler: Any) -> None:
    out = handler(
        http_event("GET", "/api/v1/fs/ls", "uri=viking%3A%2F%2F~%2F", authorizer=AUTH), Ctx()
    )
    body = json.loads(out["body"])
    assert out["statusCode"] == 200
    assert all(e["uri"].startswith("viking://user/ann/") for e in body["result"])
    out = handler(http_event("GET", "/api/v1/nope", authorizer=AUTH), Ctx())
    assert out["statusCode"] == 404 and json.loads(out["body"])["status"] == "error"


def unauthenticated(out: dict[str, Any]) -> bool:
    body = json.loads(out["body"])
    refused: bool = (
        out["statusCode"] == 401
        and body["status"] == "error"
        and body["error"]["code"] == "UNAUTHENTICATED"
    )
    return refused


def test_no_authorizer_context_is_401_even_without_a_root_key(handler: Any) -> None:
    """The settings have no root key (that would be dev mode in `skald serve`): the function
    still refuses what the authorizer did not vouch for, headers or not."""
    assert unauthenticated(handler(rest_event("GET", "/api/v1/fs/ls", {"uri": "viking://"}), Ctx()))
    sneaky = http_event(
        "POST", "/api/v1/content/write", body={"uri": "viking://resources/x.md", "content": "no"}
    )
    sneaky["headers"].update({"x-openviking-account": "lambda-acct", "x-api-key": "guess"})
    assert unauthenticated(handler(sneaky, Ctx()))
    partial = rest_event("GET", "/api/v1/system/status", authorizer={"account_id": "a"})
    assert unauthenticated(handler(partial, Ctx()))
    out = handler(
        rest_event(
            "GET", "/api/v1/content/read", {"uri": "viking://resources/x.md"}, authorizer=AUTH
        ),
        Ctx(),
    )
    assert out["statusCode"] == 404  # the refused write wrote nothing


def test_health_is_public_and_says_nothing_about_auth(handler: Any) -> None:
    for event in (rest_event("GET", "/health"), http_event("GET", "/health")):
        out = handler(event, Ctx())
        assert out["statusCode"] == 200
        body = json.loads(out["body"])
        assert set(body) == {"status", "healthy", "version"}
        assert body["status"] == "ok" and body["healthy"] is True


def test_root_from_the_authorizer_reaches_admin_not_data(handler: Any) -> None:
    root = {"account_id": "_root", "user_id": "root", "role": "root"}
    out = handler(
        rest_event(
            "POST",
            "/api/v1/admin/accounts",
            body={"account_id": "made-by-root", "admin_user_id": "amy"},
            authorizer=root,
        ),
        Ctx(),
    )
    assert out["statusCode"] == 200 and json.loads(out["body"])["result"]["user_key"]
    out = handler(rest_event("GET", "/api/v1/fs/ls", {"uri": "viking://"}, authorizer=root), Ctx())
    assert out["statusCode"] == 403
    observer = json.loads(
        handler(rest_event("GET", "/api/v1/observer/system", authorizer=root), Ctx())["body"]
    )
    assert observer["result"]["auth_mode"] == "api_key"


def test_ready_is_public_and_names_no_internals(tmp_path: Path) -> None:
    from skald.adapters.local.factory import LocalAdapterFactory
    from skald.compose.entrypoints import lambda_handler
    from skald.config import Settings

    class BrokenIndex(LocalAdapterFactory):
        def index(self) -> Any:
            raise ConnectionError("https://vpc-skald-search-abc.eu-west-1.es.amazonaws.com")

    factory = BrokenIndex(Settings(backend="local", data_dir=tmp_path))
    handler = lambda_handler("content", factory=factory)
    out = handler(rest_event("GET", "/ready"), Ctx())
    assert out["statusCode"] == 503
    assert json.loads(out["body"]) == {
        "status": "not_ready",
        "checks": {"storage": "ok", "state": "ok", "index": "error", "queue": "ok"},
    }
    factory.close()


def test_requests_are_published_as_emf_lines_by_route_template(
    handler: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    user = {"account_id": "emf", "user_id": "amy", "role": "admin"}
    capsys.readouterr()
    out = handler(rest_event("GET", "/api/v1/tasks/t-404", authorizer=user), Ctx())
    assert out["statusCode"] == 404
    lines = [
        json.loads(line)
        for line in capsys.readouterr().out.splitlines()
        if line.startswith('{"_aws"')
    ]
    latency = next(m for m in lines if "RequestLatency" in m)
    assert latency["route"] == "/api/v1/tasks/{task_id}" and latency["method"] == "GET"
    namespace = latency["_aws"]["CloudWatchMetrics"][0]["Namespace"]
    assert namespace and "t-404" not in json.dumps(lines)
    # no /metrics scrape endpoint in a Lambda: the numbers went to the log
    assert handler(rest_event("GET", "/metrics", authorizer=user), Ctx())["statusCode"] == 404
