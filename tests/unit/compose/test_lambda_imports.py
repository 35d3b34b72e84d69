"""Importing a function's handler module (a Lambda cold start's init) makes no AWS call and
opens no connection: clients and adapters come with the first invocation that needs them.

The environment is a deployed function's (SKALD_BACKEND=aws, every variable the catalogue
lists), with every endpoint on loopback: botocore's before-send hook records any AWS request
and a listening socket stands in for OpenSearch, recording any connection.
"""

from __future__ import annotations

import importlib.util
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from skald import catalog
from tests.support.lambda_events import Ctx, rest_event

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def silent_endpoint() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


@pytest.fixture
def aws_calls(
    monkeypatch: pytest.MonkeyPatch, silent_endpoint: socket.socket
) -> Iterator[list[str]]:
    """Every AWS request any botocore client makes, as "service.Operation"."""
    url = f"http://127.0.0.1:{silent_endpoint.getsockname()[1]}"
    env = {
        name: f"deployed-{name.lower()}"
        for fn in catalog.FUNCTIONS
        for name in catalog.environment(fn)
    }
    env.update(
        {
            "SKALD_BACKEND": "aws",
            "SKALD_AWS_ENDPOINT_URL": url,
            "SKALD_OPENSEARCH_ENDPOINT": url,
            "SKALD_OPENSEARCH_AUTH": "none",
            "SKALD_EMBEDDING_PROVIDER": "bedrock",
            "SKALD_EMBEDDING_DIMENSION": "1024",
            "SKALD_LLM_PROVIDER": "bedrock",
            "SKALD_JOB_MAX_ATTEMPTS": "5",
            "SKALD_WORKER_MAX_CONCURRENCY": "10",
            "SKALD_SETUP_WAIT_S": "0",
            "SKALD_AUDIT_RETENTION_DAYS": "400",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "SKALD_ROOT_API_KEY_SECRET_ARN": (
                "arn:aws:secretsmanager:us-east-1:123456789012:secret:root-AbCdEf"
            ),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
        }
    )
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    calls: list[str] = []
    create_client = botocore.session.Session.create_client

    def recording(self: botocore.session.Session, *args: Any, **kwargs: Any) -> Any:
        client = create_client(self, *args, **kwargs)

        def record(model: Any, **_: Any) -> None:
            calls.append(f"{client.meta.service_model.service_name}.{model.name}")
            raise RuntimeError("no AWS call expected here")

        client.meta.events.register("before-call", record)
        return client

    monkeypatch.setattr(botocore.session.Session, "create_client", recording)
    yield calls


def _import(fn: catalog.Function) -> Any:
    module, _, attribute = fn.handler.partition(".")
    path = ROOT / "functions" / fn.code / f"{module}.py"
    spec = importlib.util.spec_from_file_location(f"entry_{fn.name}", path)
    assert spec and spec.loader
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return getattr(loaded, attribute)


@pytest.mark.parametrize("fn", catalog.FUNCTIONS, ids=lambda fn: fn.name)
def test_importing_a_handler_calls_nothing(
    fn: catalog.Function, aws_calls: list[str], silent_endpoint: socket.socket
) -> None:
    handler = _import(fn)
    assert callable(handler)
    assert aws_calls == []
    with pytest.raises(BlockingIOError):
        silent_endpoint.accept()  # nobody connected to "OpenSearch"


def test_an_unauthenticated_request_is_refused_before_any_call(
    aws_calls: list[str], silent_endpoint: socket.socket
) -> None:
    for fn in catalog.functions("http"):
        handler = _import(fn)
        path = next(
            p.removesuffix(catalog.PROXY) + "x" if p.endswith(catalog.PROXY) else p
            for p in fn.routes
        )
        out = handler(rest_event("POST", path, body={}), Ctx())
        assert out["statusCode"] == 401, (fn.name, out)
        assert json.loads(out["body"])["error"]["code"] == "UNAUTHENTICATED"
    assert aws_calls == []
    with pytest.raises(BlockingIOError):
        silent_endpoint.accept()
