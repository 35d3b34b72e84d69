"""The API Gateway REQUEST authorizer: REST (payload 1.0, IAM policy) and HTTP API (2.0,
simple responses), both key headers, the warm identity cache and the root key secret."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from skald.api import authorizer as authz
from skald.api.authorizer import (
    IdentityCache,
    api_key_of,
    authorizer_settings,
    forget_secrets,
    make_authorizer,
)
from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.identity import Identity
from tests.support.compose import local_services

ROOT_KEY = "root-key-for-tests"
ROOT = Identity("_root", "root", "root")
METHOD_ARN = "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/GET/api/v1/fs/ls"
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:skald-root-AbCdEf"
REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Composition]:
    c = local_services(Settings(backend="local", data_dir=tmp_path / "data",
                                 root_api_key=ROOT_KEY))
    yield c
    c.close()


@pytest.fixture
def alice_key(container: Composition) -> str:
    key: str = container.accounts.create_account(ROOT, "acme", "alice")["user_key"]
    return key


@pytest.fixture(autouse=True)
def no_secret_cache() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


def rest_event(headers: dict[str, str] | None = None,
               multi: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {
        "type": "REQUEST", "methodArn": METHOD_ARN, "resource": "/api/v1/fs/ls",
        "path": "/api/v1/fs/ls", "httpMethod": "GET", "headers": headers or {},
        "multiValueHeaders": multi or {}, "queryStringParameters": {"uri": "viking://"},
        "pathParameters": {}, "stageVariables": {},
        "requestContext": {"accountId": "123456789012", "apiId": "abc123", "stage": "prod",
                           "httpMethod": "GET", "requestId": "r-1",
                           "identity": {"sourceIp": "203.0.113.9"}},
    }


def http_event(headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "version": "2.0", "type": "REQUEST",
        "routeArn": "arn:aws:execute-api:us-east-1:123456789012:abc123/$default/GET/api",
        "identitySource": [], "routeKey": "$default", "rawPath": "/api/v1/fs/ls",
        "rawQueryString": "", "headers": headers or {},
        "requestContext": {"http": {"method": "GET", "path": "/api/v1/fs/ls"},
                           "requestId": "r-2", "stage": "$default"},
    }


def allowed_context(result: dict[str, Any]) -> dict[str, Any]:
    statement = result["policyDocument"]["Statement"][0]
    assert statement["Effect"] == "Allow" and statement["Action"] == "execute-api:Invoke"
    assert METHOD_ARN in statement["Resource"]
    ctx: dict[str, Any] = result["context"]
    assert all(isinstance(v, str) for v in ctx.values())  # API Gateway's rule for context
    return ctx


# --------------------------------------------------------------------------------------------


def test_rest_allows_a_user_key_and_passes_the_identity(container: Composition,
                                                        alice_key: str) -> None:
    handler = make_authorizer(lambda: container)
    result = handler(rest_event({"X-API-Key": alice_key}), None)
    assert allowed_context(result) == {"account_id": "acme", "user_id": "alice",
                                       "role": "admin"}
    assert result["principalId"] == "acme/alice"
    # stage-wide too, so an optional gateway cache can re-use the policy on other routes
    assert "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/*" in \
        result["policyDocument"]["Statement"][0]["Resource"]


def test_rest_accepts_bearer_and_any_header_case(container: Composition,
                                                 alice_key: str) -> None:
    handler = make_authorizer(lambda: container)
    for event in (rest_event({"Authorization": f"Bearer {alice_key}"}),
                  rest_event({"authorization": f"bearer  {alice_key} "}),
                  rest_event({"x-api-key": alice_key}),
                  rest_event(multi={"X-Api-Key": [alice_key]})):
        assert allowed_context(handler(event, None))["user_id"] == "alice"


def test_rest_denies_with_api_gateways_401_convention(container: Composition,
                                                      alice_key: str) -> None:
    handler = make_authorizer(lambda: container)
    for event in (rest_event(), rest_event({"X-API-Key": "nope"}),
                  rest_event({"Authorization": "Basic " + alice_key}),
                  rest_event({"Authorization": "Bearer "})):
        with pytest.raises(Exception, match="^Unauthorized$"):
            handler(event, None)


def test_root_key_is_allowed_as_root(container: Composition) -> None:
    handler = make_authorizer(lambda: container)
    ctx = allowed_context(handler(rest_event({"X-API-Key": ROOT_KEY}), None))
    assert ctx == {"account_id": "_root", "user_id": "root", "role": "root"}


def test_http_api_v2_simple_responses(container: Composition, alice_key: str) -> None:
    handler = make_authorizer(lambda: container)
    user = container.accounts.register_user(ROOT, "acme", "bob", "user")
    assert handler(http_event({"x-api-key": user["user_key"]}), None) == {
        "isAuthorized": True,
        "context": {"account_id": "acme", "user_id": "bob", "role": "user"}}
    ok = handler(http_event({"authorization": f"Bearer {alice_key}"}), None)
    assert ok["isAuthorized"] is True and ok["context"]["user_id"] == "alice"
    assert handler(http_event({"x-api-key": "wrong"}), None) == {"isAuthorized": False}
    assert handler(http_event(), None) == {"isAuthorized": False}


def test_dev_mode_denies_everything(tmp_path: Path) -> None:
    c = local_services(Settings(backend="local", data_dir=tmp_path / "dev"))
    try:
        handler = make_authorizer(lambda: c)
        with pytest.raises(Exception, match="Unauthorized"):
            handler(rest_event({"X-API-Key": "anything"}), None)
        assert handler(http_event({"x-api-key": "anything"}), None) == {"isAuthorized": False}
    finally:
        c.close()


def test_cache_spares_lookups_for_60_seconds(container: Composition, alice_key: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    lookups: list[str] = []
    real = container.state.resolve_key

    def counting(key_hash: str) -> Any:
        lookups.append(key_hash)
        return real(key_hash)

    monkeypatch.setattr(container.state, "resolve_key", counting)
    clock = Clock()
    cache = IdentityCache(clock=clock)
    handler = make_authorizer(lambda: container, cache=cache)
    for _ in range(5):
        allowed_context(handler(rest_event({"X-API-Key": alice_key}), None))
    assert len(lookups) == 1
    # A regenerated key: the old one lives on until its cache entry expires (<= 60 s).
    container.accounts.regenerate_key(ROOT, "acme", "alice")
    clock.now += 59
    allowed_context(handler(rest_event({"X-API-Key": alice_key}), None))
    clock.now += 2
    with pytest.raises(Exception, match="Unauthorized"):
        handler(rest_event({"X-API-Key": alice_key}), None)
    assert len(lookups) == 2
    # Unknown keys are never cached: each attempt is looked up.
    for _ in range(2):
        with pytest.raises(Exception, match="Unauthorized"):
            handler(rest_event({"X-API-Key": "bad"}), None)
    assert len(lookups) == 4


def test_cache_is_a_bounded_lru() -> None:
    clock = Clock()
    cache = IdentityCache(max_entries=2, clock=clock)
    cache.put("a", {"user_id": "a"})
    cache.put("b", {"user_id": "b"})
    assert cache.get("a") == {"user_id": "a"}  # "a" is now the most recent
    cache.put("c", {"user_id": "c"})
    assert cache.get("b") is None and cache.get("a") is not None and len(cache) == 2
    clock.now += 61
    assert cache.get("a") is None


def test_cache_never_holds_raw_keys(container: Composition, alice_key: str) -> None:
    cache = IdentityCache()
    make_authorizer(lambda: container, cache=cache)(rest_event({"X-API-Key": alice_key}), None)
    assert alice_key not in repr(cache._items)


def test_api_key_of_prefers_x_api_key() -> None:
    assert api_key_of({"headers": {"X-API-Key": "a", "Authorization": "Bearer b"}}) == "a"
    assert api_key_of({"headers": None, "multiValueHeaders": None}) is None


# --------------------------------------------------------------------------------------------
# Root key from Secrets Manager


def secrets_client() -> Any:
    return boto3.client("secretsmanager", region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def secret_response(value: str) -> dict[str, Any]:
    return {"ARN": SECRET_ARN, "Name": "skald-root", "VersionId": "v1" * 16,
            "SecretString": value}


def test_root_key_is_fetched_once_from_secrets_manager(tmp_path: Path) -> None:
    client = secrets_client()
    base = Settings(backend="local", data_dir=tmp_path, root_api_key_secret_arn=SECRET_ARN)
    with Stubber(client) as stub:
        stub.add_response("get_secret_value", secret_response("from-the-vault"),
                          {"SecretId": SECRET_ARN})
        assert authorizer_settings(base, secrets_client=client).root_api_key == \
            "from-the-vault"
        # a second cold path in the same process is served from the cache (no 2nd stub)
        assert authorizer_settings(base, secrets_client=client).root_api_key == \
            "from-the-vault"
        stub.assert_no_pending_responses()


def test_root_key_secret_may_be_json(tmp_path: Path) -> None:
    client = secrets_client()
    base = Settings(backend="local", data_dir=tmp_path, root_api_key_secret_arn=SECRET_ARN)
    with Stubber(client) as stub:
        stub.add_response("get_secret_value",
                          secret_response(json.dumps({"root_api_key": "json-key"})))
        assert authorizer_settings(base, secrets_client=client).root_api_key == "json-key"


def test_explicit_root_key_wins_over_the_secret(tmp_path: Path) -> None:
    base = Settings(backend="local", data_dir=tmp_path, root_api_key="explicit",
                    root_api_key_secret_arn=SECRET_ARN)
    assert authorizer_settings(base, secrets_client=object()).root_api_key == "explicit"


def test_entry_module_resolves_the_root_key_from_the_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = secrets_client()
    monkeypatch.setenv("SKALD_DATA_DIR", str(tmp_path / "entry"))
    monkeypatch.setenv("SKALD_ROOT_API_KEY_SECRET_ARN", SECRET_ARN)
    monkeypatch.delenv("SKALD_ROOT_API_KEY", raising=False)
    monkeypatch.setattr(boto3, "client", lambda *_a, **_k: client)
    spec = importlib.util.spec_from_file_location("authorizer_entry",
                                                  REPO / "functions/authorizer/handler.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # importing builds nothing yet
    with Stubber(client) as stub:
        stub.add_response("get_secret_value", secret_response("vault-root"))
        ctx = allowed_context(module.handler(rest_event({"X-API-Key": "vault-root"}), None))
        assert ctx["role"] == "root"
        with pytest.raises(Exception, match="Unauthorized"):
            module.handler(rest_event({"X-API-Key": ROOT_KEY}), None)
    assert authz._secret_cache == {SECRET_ARN: "vault-root"}
