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

from skald.adapters.aws.secrets import SecretValue
from skald.api.authorizer import (
    CACHE_TTL_S,
    IdentityCache,
    api_key_of,
    make_authorizer,
)
from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.services.tenancy.keys import hash_key
from tests.support.compose import local_services

ROOT_KEY = "root-key-for-tests"
ROOT = Identity("_root", "root", "root")
METHOD_ARN = "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/GET/api/v1/fs/ls"
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:skald-root-AbCdEf"
REPO = Path(__file__).resolve().parents[3]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Composition]:
    c = local_services(Settings(backend="local", data_dir=tmp_path / "data", root_api_key=ROOT_KEY))
    yield c
    c.close()


@pytest.fixture
def alice_key(container: Composition) -> str:
    key: str = container.accounts.create_account(ROOT, "acme", "alice").user_key
    return key


def rest_event(
    headers: dict[str, str] | None = None, multi: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    return {
        "type": "REQUEST",
        "methodArn": METHOD_ARN,
        "resource": "/api/v1/fs/ls",
        "path": "/api/v1/fs/ls",
        "httpMethod": "GET",
        "headers": headers or {},
        "multiValueHeaders": multi or {},
        "queryStringParameters": {"uri": "viking://"},
        "pathParameters": {},
        "stageVariables": {},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "stage": "prod",
            "httpMethod": "GET",
            "requestId": "r-1",
            "identity": {"sourceIp": "203.0.113.9"},
        },
    }


def http_event(headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "version": "2.0",
        "type": "REQUEST",
        "routeArn": "arn:aws:execute-api:us-east-1:123456789012:abc123/$default/GET/api",
        "identitySource": [],
        "routeKey": "$default",
        "rawPath": "/api/v1/fs/ls",
        "rawQueryString": "",
        "headers": headers or {},
        "requestContext": {
            "http": {"method": "GET", "path": "/api/v1/fs/ls"},
            "requestId": "r-2",
            "stage": "$default",
        },
    }


def allowed_context(result: dict[str, Any]) -> dict[str, Any]:
    statement = result["policyDocument"]["Statement"][0]
    assert statement["Effect"] == "Allow" and statement["Action"] == "execute-api:Invoke"
    assert METHOD_ARN in statement["Resource"]
    ctx: dict[str, Any] = result["context"]
    assert all(isinstance(v, str) for v in ctx.values())  # API Gateway's rule for context
    return ctx


# --------------------------------------------------------------------------------------------


def test_rest_allows_a_user_key_and_passes_the_identity(
    container: Composition, alice_key: str
) -> None:
    handler = make_authorizer(lambda: container)
    result = handler(rest_event({"X-API-Key": alice_key}), None)
    alice = container.state.get_user("acme", "alice")
    assert alice is not None
    assert allowed_context(result) == {
        "account_id": "acme",
        "user_id": "alice",
        "role": "admin",
        "key_id": hash_key(alice_key)[:16],
        "generation": alice.generation,
    }
    assert result["principalId"] == "acme/alice"
    # stage-wide too, so an optional gateway cache can re-use the policy on other routes
    assert (
        "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/*"
        in result["policyDocument"]["Statement"][0]["Resource"]
    )


def test_rest_accepts_bearer_and_any_header_case(container: Composition, alice_key: str) -> None:
    handler = make_authorizer(lambda: container)
    for event in (
        rest_event({"Authorization": f"Bearer {alice_key}"}),
        rest_event({"authorization": f"bearer  {alice_key} "}),
        rest_event({"x-api-key": alice_key}),
        rest_event(multi={"X-Api-Key": [alice_key]}),
    ):
        assert allowed_context(handler(event, None))["user_id"] == "alice"


def test_rest_denies_with_api_gateways_401_convention(
    container: Composition, alice_key: str
) -> None:
    handler = make_authorizer(lambda: container)
    for event in (
        rest_event(),
        rest_event({"X-API-Key": "nope"}),
        rest_event({"Authorization": "Basic " + alice_key}),
        rest_event({"Authorization": "Bearer "}),
    ):
        with pytest.raises(Exception, match="^Unauthorized$"):
            handler(event, None)


def test_root_key_is_allowed_as_root(container: Composition) -> None:
    handler = make_authorizer(lambda: container)
    ctx = allowed_context(handler(rest_event({"X-API-Key": ROOT_KEY}), None))
    assert ctx == {
        "account_id": "_root",
        "user_id": "root",
        "role": "root",
        "key_id": "root",
        "generation": "",
    }


def test_http_api_v2_simple_responses(container: Composition, alice_key: str) -> None:
    handler = make_authorizer(lambda: container)
    user = container.accounts.register_user(ROOT, "acme", "bob", "user")
    answer = handler(http_event({"x-api-key": user.user_key}), None)
    assert answer["isAuthorized"] is True
    assert {k: answer["context"][k] for k in ("account_id", "user_id", "role", "key_id")} == {
        "account_id": "acme",
        "user_id": "bob",
        "role": "user",
        "key_id": hash_key(user.user_key)[:16],
    }
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


def test_cache_spares_lookups_within_its_bound(
    container: Composition, alice_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    # A regenerated key: the old one lives on until its cache entry expires (the bound).
    container.accounts.regenerate_key(ROOT, "acme", "alice")
    clock.now += CACHE_TTL_S - 0.5
    allowed_context(handler(rest_event({"X-API-Key": alice_key}), None))
    clock.now += 0.5
    with pytest.raises(Exception, match="Unauthorized"):
        handler(rest_event({"X-API-Key": alice_key}), None)
    assert len(lookups) == 2
    # Unknown keys are never cached: each attempt is looked up.
    for _ in range(2):
        with pytest.raises(Exception, match="Unauthorized"):
            handler(rest_event({"X-API-Key": "bad"}), None)
    assert len(lookups) == 4


@pytest.mark.parametrize("change", ["revoke", "promote", "remove user", "remove account"])
def test_a_change_reaches_every_warm_instance_within_the_bound(
    container: Composition, alice_key: str, change: str
) -> None:
    """Two warm authorizer instances (their own caches, one fake clock): whatever an admin
    changes about a key takes effect on both at most CACHE_TTL_S later."""
    clock = Clock()
    bob_key = container.accounts.register_user(ROOT, "acme", "bob", "user").user_key
    instances = [
        make_authorizer(lambda: container, cache=IdentityCache(clock=clock)) for _ in range(2)
    ]
    for handler in instances:
        assert allowed_context(handler(rest_event({"X-API-Key": bob_key}), None))["role"] == "user"
    alice = Identity("acme", "alice", "admin")
    if change == "revoke":
        [only] = container.accounts.list_keys(alice, "acme", "bob")
        container.accounts.revoke_key(alice, "acme", "bob", only.key_id)
    elif change == "promote":
        container.accounts.set_role(alice, "acme", "bob", "admin")
    elif change == "remove user":
        container.accounts.remove_user(alice, "acme", "bob")
    else:
        container.accounts.delete_account(ROOT, "acme")
    clock.now += CACHE_TTL_S
    for handler in instances:
        if change == "promote":
            ctx = allowed_context(handler(rest_event({"X-API-Key": bob_key}), None))
            assert ctx["role"] == "admin"
        else:
            with pytest.raises(Exception, match="Unauthorized"):
                handler(rest_event({"X-API-Key": bob_key}), None)


def test_cache_is_a_bounded_lru() -> None:
    clock = Clock()
    cache = IdentityCache(max_entries=2, clock=clock)
    cache.put("a", {"user_id": "a"})
    cache.put("b", {"user_id": "b"})
    assert cache.get("a") == {"user_id": "a"}  # "a" is now the most recent
    cache.put("c", {"user_id": "c"})
    assert cache.get("b") is None and cache.get("a") is not None and len(cache) == 2
    clock.now += CACHE_TTL_S
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
    return boto3.client(
        "secretsmanager",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def secret_response(value: str) -> dict[str, Any]:
    return {"ARN": SECRET_ARN, "Name": "skald-root", "VersionId": "v1" * 16, "SecretString": value}


def test_root_key_is_read_from_its_secret_again_after_the_bound(
    container: Composition, alice_key: str
) -> None:
    """A rotated root key takes over within the bound on a warm instance; requests with a
    user key never read the secret."""
    from skald.services.tenancy.root_key import RootKey

    client = secrets_client()
    clock = Clock()
    secret = SecretValue(SECRET_ARN, client=client)
    container.accounts.root = RootKey(secret.root_api_key, ttl_s=CACHE_TTL_S, clock=clock)
    handler = make_authorizer(lambda: container, cache=IdentityCache(clock=clock))
    with Stubber(client) as stub:
        stub.add_response(
            "get_secret_value", secret_response("vault-root-1"), {"SecretId": SECRET_ARN}
        )
        assert (
            allowed_context(handler(rest_event({"X-API-Key": "vault-root-1"}), None))["role"]
            == "root"
        )
        for _ in range(3):  # within the bound: no second read, user keys never read it
            allowed_context(handler(rest_event({"X-API-Key": "vault-root-1"}), None))
            allowed_context(handler(rest_event({"X-API-Key": alice_key}), None))
        stub.assert_no_pending_responses()
        # rotated: the new key is accepted at once (a key nobody claims asks the secret),
        # the old one is refused once the bound has passed
        stub.add_response("get_secret_value", secret_response("vault-root-2"))
        clock.now += CACHE_TTL_S
        assert (
            allowed_context(handler(rest_event({"X-API-Key": "vault-root-2"}), None))["role"]
            == "root"
        )
        with pytest.raises(Exception, match="Unauthorized"):
            handler(rest_event({"X-API-Key": "vault-root-1"}), None)
        stub.assert_no_pending_responses()


def test_root_key_secret_may_be_json() -> None:
    client = secrets_client()
    with Stubber(client) as stub:
        stub.add_response(
            "get_secret_value", secret_response(json.dumps({"root_api_key": "json-key"}))
        )
        assert SecretValue(SECRET_ARN, client=client).root_api_key() == "json-key"


def test_explicit_root_key_wins_over_the_secret(tmp_path: Path) -> None:
    c = local_services(
        Settings(
            backend="local",
            data_dir=tmp_path,
            root_api_key="explicit",
            root_api_key_secret_arn=SECRET_ARN,
        )
    )
    try:
        assert c.accounts.resolve_in_memory(_creds("explicit")) is not None
    finally:
        c.close()


def _creds(key: str) -> Any:
    from skald.services.tenancy.accounts import Credentials

    return Credentials(key, None, None, None)


def test_entry_module_resolves_the_root_key_from_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = secrets_client()
    monkeypatch.setenv("SKALD_DATA_DIR", str(tmp_path / "entry"))
    monkeypatch.setenv("SKALD_ROOT_API_KEY_SECRET_ARN", SECRET_ARN)
    monkeypatch.delenv("SKALD_ROOT_API_KEY", raising=False)
    monkeypatch.setattr(boto3, "client", lambda *_a, **_k: client)
    spec = importlib.util.spec_from_file_location(
        "authorizer_entry", REPO / "functions/authorizer/handler.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # importing builds nothing yet
    with Stubber(client) as stub:
        stub.add_response("get_secret_value", secret_response("vault-root"))
        ctx = allowed_context(module.handler(rest_event({"X-API-Key": "vault-root"}), None))
        assert ctx["role"] == "root"
        stub.assert_no_pending_responses()


# --------------------------------------------------------------------------------------------
# the edge's usage plans: every REST allow names the caller's account key


def test_rest_allow_names_the_account_key_of_the_usage_plan(
    container: Composition, alice_key: str
) -> None:
    from skald.domain.plans import edge_key_value

    handler = make_authorizer(lambda: container, usage_key=lambda a: edge_key_value("Skald", a))
    alice = handler(rest_event({"X-API-Key": alice_key}), None)
    assert alice["usageIdentifierKey"] == edge_key_value("Skald", "acme")
    root = handler(rest_event({"X-API-Key": ROOT_KEY}), None)
    assert root["usageIdentifierKey"] == edge_key_value("Skald", "_root")
    # a cached identity answers the same key
    assert (
        handler(rest_event({"X-API-Key": alice_key}), None)["usageIdentifierKey"]
        == (alice["usageIdentifierKey"])
    )
    # HTTP APIs have no usage plans; without a namespace nothing is named
    assert "usageIdentifierKey" not in handler(http_event({"x-api-key": alice_key}), None)
    plain = make_authorizer(lambda: container)(rest_event({"X-API-Key": alice_key}), None)
    assert "usageIdentifierKey" not in plain


def test_entry_point_names_the_key_from_the_edge_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skald.compose.entrypoints import lambda_handler
    from skald.domain.plans import edge_key_value

    settings = Settings(
        backend="local",
        data_dir=tmp_path / "ns",
        root_api_key=ROOT_KEY,
        edge_namespace="SkaldProd",
    )
    handler = lambda_handler("authorizer", settings)
    answer = handler(rest_event({"X-API-Key": ROOT_KEY}), None)
    assert answer["usageIdentifierKey"] == edge_key_value("SkaldProd", "_root")
