"""Tenant-scoped credentials (skald.adapters.aws.tenant_clients): one AssumeRole per account
and container, tagged with the account; refreshed before expiry; bounded (least recently used
accounts go first); each call routed by the items it names, never by trust in the caller: a
tenant's call naming another account's key goes with the tenant's credentials (which IAM then
refuses, tests/contract/test_tenant_scope.py), control-plane items with the function's own.
The blob store's pools carry the call's tenant into their threads.

The STS client and the service clients are stand-ins recording what they are asked; the
routing rule itself is skald.adapters.aws.tenancy's."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from skald.adapters.aws.s3_blobstore import S3BlobStore
from skald.adapters.aws.tenancy import TAG_KEY, control_plane_call, is_tenant_account
from skald.adapters.aws.tenant_clients import Credentials, RoutedClient, TenantSessions
from skald.domain.call_context import tenant_scope
from skald.domain.errors import InvalidArgument

ROLE = "arn:aws:iam::123456789012:role/skald-content-tenant"
OPERATIONS = {"get_object": "GetObject", "head_object": "HeadObject",
              "put_object": "PutObject", "list_objects_v2": "ListObjectsV2",
              "get_item": "GetItem", "put_item": "PutItem", "query": "Query",
              "transact_write_items": "TransactWriteItems", "batch_get_item": "BatchGetItem"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeSts:
    def __init__(self, clock: Clock, gate: threading.Event | None = None) -> None:
        self.clock = clock
        self.calls: list[dict[str, Any]] = []
        self.gate = gate
        self._lock = threading.Lock()

    def assume_role(self, **params: Any) -> dict[str, Any]:
        if self.gate is not None:
            self.gate.wait(5)
        with self._lock:
            self.calls.append(params)
            n = len(self.calls)
        expires = datetime.fromtimestamp(self.clock() + params["DurationSeconds"], tz=UTC)
        return {"Credentials": {"AccessKeyId": f"ASIA{n}", "SecretAccessKey": "s",
                                "SessionToken": "t", "Expiration": expires}}


class FakeClient:
    """A boto3 client's stand-in: records (operation, params); answers from `answers`."""

    def __init__(self, name: str, answers: dict[str, Any] | None = None) -> None:
        self.name = name
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.answers = answers or {}
        self.meta = SimpleNamespace(method_to_api_mapping=OPERATIONS)
        self.threads: set[str] = set()

    def __getattr__(self, method: str) -> Any:
        if method not in OPERATIONS:
            raise AttributeError(method)

        def call(**params: Any) -> Any:
            self.calls.append((OPERATIONS[method], params))
            self.threads.add(threading.current_thread().name)
            answer = self.answers.get(method, {})
            if isinstance(answer, Exception):
                raise answer
            return answer(**params) if callable(answer) else answer
        return call

    def get_paginator(self, name: str) -> Any:
        client = self

        class Paginator:
            def paginate(self, **params: Any) -> list[dict[str, Any]]:
                client.calls.append((OPERATIONS[name], params))
                return [{"Contents": []}]
        return Paginator()


class Made:
    """The service clients TenantSessions makes: one per (service, access key)."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.clients: list[tuple[str, Credentials, FakeClient]] = []
        self.answers = answers

    def __call__(self, service: str, credentials: Credentials) -> FakeClient:
        client = FakeClient(f"{service}:{credentials.access_key}", self.answers)
        self.clients.append((service, credentials, client))
        return client


def sessions(clock: Clock, *, max_accounts: int = 256, sts: FakeSts | None = None,
             made: Made | None = None) -> tuple[TenantSessions, FakeSts, Made]:
    sts = sts or FakeSts(clock)
    made = made or Made()
    return TenantSessions(sts, ROLE, made, duration_s=3600, max_accounts=max_accounts,
                          refresh_margin_s=600, clock=clock), sts, made


# -- the credentials cache ----------------------------------------------------------------------


def test_one_assume_role_per_account_tagged_with_the_account() -> None:
    cache, sts, made = sessions(Clock())
    first = cache.client("acme", "s3")
    assert cache.client("acme", "s3") is first
    assert cache.client("acme", "dynamodb") is not first  # same credentials, another service
    other = cache.client("globex", "s3")
    assert other is not first
    assert [c["Tags"] for c in sts.calls] == [[{"Key": TAG_KEY, "Value": "acme"}],
                                              [{"Key": TAG_KEY, "Value": "globex"}]]
    assert {c["RoleArn"] for c in sts.calls} == {ROLE}
    assert [c["RoleSessionName"] for c in sts.calls] == ["skald-acme", "skald-globex"]
    assert {c["DurationSeconds"] for c in sts.calls} == {3600}
    # Both acme clients carry acme's credentials, globex's its own.
    keys = {(service, creds.access_key) for service, creds, _ in made.clients}
    assert keys == {("s3", "ASIA1"), ("dynamodb", "ASIA1"), ("s3", "ASIA2")}
    assert cache.stats.assumed == 2


def test_credentials_are_replaced_before_they_expire() -> None:
    clock = Clock()
    cache, sts, _ = sessions(clock)
    first = cache.client("acme", "s3")
    clock.now += 3600 - 600 - 1  # more than the margin left: still the same
    assert cache.client("acme", "s3") is first
    clock.now += 1  # the margin left: assumed again, a new client
    second = cache.client("acme", "s3")
    assert second is not first and len(sts.calls) == 2
    clock.now += 100
    assert cache.client("acme", "s3") is second


def test_the_cache_keeps_the_most_recently_used_accounts() -> None:
    cache, sts, _ = sessions(Clock(), max_accounts=2)
    cache.client("a1", "s3")
    cache.client("a2", "s3")
    cache.client("a1", "s3")  # a1 used last: a2 goes first
    cache.client("a3", "s3")
    assert cache.accounts() == ["a1", "a3"] and cache.stats.evicted == 1
    assert len(sts.calls) == 3
    cache.client("a1", "s3")  # still cached
    assert len(sts.calls) == 3
    cache.client("a2", "s3")  # evicted: assumed again, evicting a3
    assert len(sts.calls) == 4 and cache.accounts() == ["a1", "a2"]


def test_threads_asking_for_a_new_account_at_once_assume_once() -> None:
    gate = threading.Event()
    clock = Clock()
    cache, sts, _ = sessions(clock, sts=FakeSts(clock, gate))
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(cache.client("acme", "s3")))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join(10)
    assert len(sts.calls) == 1 and len(got) == 8 and len({id(c) for c in got}) == 1


@pytest.mark.parametrize("account", ["", "_health", "a/b", "a*", "a#b", "x" * 256])
def test_no_credentials_for_what_is_not_an_account_id(account: str) -> None:
    cache, sts, _ = sessions(Clock())
    with pytest.raises(InvalidArgument):
        cache.client(account, "s3")
    assert not sts.calls and not is_tenant_account(account)


def test_session_length_and_bounds_are_checked() -> None:
    sts = FakeSts(Clock())
    for duration in (899, 3601):  # role chaining: one hour at most
        with pytest.raises(ValueError):
            TenantSessions(sts, ROLE, Made(), duration_s=duration)
    with pytest.raises(ValueError):
        TenantSessions(sts, ROLE, Made(), max_accounts=0)


# -- routing ------------------------------------------------------------------------------------


def routed(service: str) -> tuple[RoutedClient, FakeClient, Made]:
    base = FakeClient("own")
    cache, sts, made = sessions(Clock())
    client = RoutedClient(base, cache, service)
    client.sts = sts  # type: ignore[attr-defined]  # for the tests' eyes
    return client, base, made


def went_with(made: Made, base: FakeClient) -> dict[str, list[str]]:
    """Which client each recorded call went with: 'own' or the account's access key."""
    out = {"own": [op for op, _ in base.calls]}
    for _, credentials, client in made.clients:
        out.setdefault(credentials.access_key, []).extend(op for op, _ in client.calls)
    return out


def test_without_a_tenant_every_call_goes_with_the_own_client() -> None:
    s3, base, made = routed("s3")
    s3.get_object(Bucket="b", Key="acme/x.md")
    s3.list_objects_v2(Bucket="b", Prefix="")
    assert len(base.calls) == 2 and not made.clients


def test_in_a_tenants_scope_account_items_go_scoped_control_plane_items_own() -> None:
    s3, base, made = routed("s3")
    with tenant_scope("acme"):
        s3.get_object(Bucket="b", Key="acme/notes/a.md")
        s3.put_object(Bucket="b", Key="_jobs/semantic/j1.json", Body=b"{}")
        s3.get_object(Bucket="b", Key="_watches/w1.json")
        s3.list_objects_v2(Bucket="b", Prefix="acme/notes/")
        s3.list_objects_v2(Bucket="b", Prefix="_watches/")
        s3.list_objects_v2(Bucket="b")  # the whole bucket: scoped, hence refused by IAM
        s3.get_paginator("list_objects_v2").paginate(Bucket="b", Prefix="acme/")
    assert went_with(made, base) == {
        "own": ["PutObject", "GetObject", "ListObjectsV2"],
        "ASIA1": ["GetObject", "ListObjectsV2", "ListObjectsV2", "ListObjectsV2"]}


def test_a_call_naming_another_accounts_key_goes_with_the_tenants_credentials() -> None:
    s3, base, made = routed("s3")
    with tenant_scope("acme"):
        s3.get_object(Bucket="b", Key="globex/secret.md")
        s3.head_object(Bucket="b", Key="acme2/x.md")
    assert not base.calls
    [(_, credentials, client)] = made.clients
    assert credentials.access_key == "ASIA1" and len(client.calls) == 2
    # ... the credentials of acme, the tenant: the only session assumed was acme's.
    [assumed] = s3.sts.calls  # type: ignore[attr-defined]
    assert assumed["Tags"] == [{"Key": TAG_KEY, "Value": "acme"}]


def _key(pk: str, sk: str = "META") -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def test_state_table_calls_are_routed_by_the_partitions_they_name() -> None:
    dynamo, base, made = routed("dynamodb")
    with tenant_scope("acme"):
        dynamo.get_item(TableName="t", Key=_key("TASK#1"))  # own
        dynamo.put_item(TableName="t", Item=_key("QUEUE#memory", "DEDUP#k"))  # own
        dynamo.get_item(TableName="t", Key=_key("SESS#acme#alice#s1"))  # scoped
        dynamo.get_item(TableName="t", Key=_key("SESS#globex#bob#s1"))  # scoped: refused
        # A commit: the session, its archive and its task in one transaction: scoped.
        dynamo.transact_write_items(TransactItems=[
            {"Update": {"TableName": "t", "Key": _key("SESS#acme#alice#s1")}},
            {"Put": {"TableName": "t", "Item": _key("TASK#1")}}])
        dynamo.query(TableName="t", KeyConditionExpression="#n0 = :v0",
                     ExpressionAttributeNames={"#n0": "pk"},
                     ExpressionAttributeValues={":v0": {"S": "ACCT#acme#SESSIONS"}})
        dynamo.query(TableName="t", IndexName="gsi1", KeyConditionExpression="#n0 = :v0",
                     ExpressionAttributeNames={"#n0": "gsi1pk"},
                     ExpressionAttributeValues={":v0": {"S": "ACCT#acme#TASKS"}})  # own
        dynamo.batch_get_item(RequestItems={"t": {"Keys": [_key("SESS#acme#a#1")]}})
    assert went_with(made, base) == {
        "own": ["GetItem", "PutItem", "Query"],
        "ASIA1": ["GetItem", "GetItem", "TransactWriteItems", "Query", "BatchGetItem"]}


def test_the_control_plane_rule() -> None:
    assert control_plane_call("dynamodb", "GetItem", {"Key": _key("ACCT#_health")})
    assert control_plane_call("dynamodb", "PutItem", {"Item": _key("ACCOUNTS", "ACCT#a")})
    assert control_plane_call("dynamodb", "DescribeTable", {"TableName": "t"})
    assert not control_plane_call("dynamodb", "GetItem", {"Key": _key("ACCT#acme")})
    assert not control_plane_call("dynamodb", "Scan", {"TableName": "t"})
    assert not control_plane_call("dynamodb", "GetItem", {"Key": {"id": {"S": "x"}}})
    assert not control_plane_call("dynamodb", "TransactWriteItems", {"TransactItems": [
        {"Put": {"Item": _key("KEY#h")}}, {"Put": {"Item": _key("ACCT#a", "USER#u")}}]})
    assert control_plane_call("s3", "CopyObject", {
        "Key": "_jobs/a", "CopySource": {"Bucket": "b", "Key": "_jobs/b"}})
    assert not control_plane_call("s3", "CopyObject", {
        "Key": "_jobs/a", "CopySource": {"Bucket": "b", "Key": "acme/b"}})
    assert not control_plane_call("s3", "HeadBucket", {"Bucket": "b"})
    assert not control_plane_call("sqs", "SendMessage", {})


def test_the_blob_stores_pools_carry_the_tenant_into_their_threads() -> None:
    answers = {"head_object": {"ContentLength": 1, "ETag": '"e"',
                               "LastModified": datetime(2026, 1, 1, tzinfo=UTC)},
               "put_object": {"ETag": '"e"', "ResponseMetadata": {"HTTPHeaders": {}}},
               "get_object": lambda **_: {"Body": _Body(b"x")}}
    base = FakeClient("own", answers)
    made = Made(answers)
    cache, _, _ = sessions(Clock(), made=made)
    store = S3BlobStore(RoutedClient(base, cache, "s3"), "b")
    with tenant_scope("acme"):
        store.head_many([f"acme/{i}.md" for i in range(8)])
        store.put_many([(f"acme/{i}.md", b"x") for i in range(8)])
        assert list(store.get_many((f"acme/{i}.md", 1) for i in range(8))) == [b"x"] * 8
    assert not base.calls
    [(_, _, client)] = made.clients
    assert len(client.calls) == 24
    assert any(name.startswith("skald-s3-") for name in client.threads)


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data

    def close(self) -> None:
        pass


# -- a 403 for a missing key ------------------------------------------------------------------


def _denied(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "403" if operation == "HeadObject" else
                                  "AccessDenied"},
                        "ResponseMetadata": {"HTTPStatusCode": 403}}, operation)


@pytest.mark.parametrize("listed, outcome", [
    ([], "missing"),                                    # the key is not there
    ([{"Key": "acme/a.md"}], "refused"),                 # it is: the 403 was a refusal
    ([{"Key": "acme/a.md.bak"}], "missing"),             # only longer keys
    (_denied("ListObjectsV2"), "refused"),               # listing refused too: not ours
])
def test_a_read_refused_with_403_is_missing_only_when_a_listing_says_so(
        listed: Any, outcome: str) -> None:
    """S3 answers 404 for a missing key to a caller allowed to list the bucket; one allowed
    to list its account's prefix only may get 403 instead: the store lists that one key."""
    answers: dict[str, Any] = {
        "head_object": _denied("HeadObject"), "get_object": _denied("GetObject"),
        "list_objects_v2": listed if isinstance(listed, Exception) else {"Contents": listed}}
    client = FakeClient("scoped", answers)
    store = S3BlobStore(client, "b")
    if outcome == "missing":
        assert store.head("acme/a.md") is None
        with pytest.raises(Exception, match="acme/a.md"):
            store.get("acme/a.md")
    else:
        with pytest.raises(ClientError):
            store.head("acme/a.md")
        with pytest.raises(ClientError):
            store.get("acme/a.md")
    listings = [p for op, p in client.calls if op == "ListObjectsV2"]
    assert listings and all(p == {"Bucket": "b", "Prefix": "acme/a.md", "MaxKeys": 1}
                            for p in listings)


# -- the adapter factory, on moto ---------------------------------------------------------------


def test_the_factory_routes_blobs_and_state_through_the_tenant_role(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With SKALD_TENANT_ROLE_ARN set, the blob store and the state stores get routed clients
    sharing one credentials cache; moto's STS issues the credentials (it enforces no IAM:
    the refusals are the IAM contract's to prove)."""
    moto = pytest.importorskip("moto")
    import boto3

    from skald.adapters.aws.factory import AwsAdapterFactory
    from skald.adapters.aws.local_stack import create_state_table
    from skald.config import Settings
    from skald.ports import Account

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="blobs")
        create_state_table(boto3.client("dynamodb", region_name="us-east-1"), "state")
        plain = AwsAdapterFactory(Settings(backend="aws", bucket="blobs", state_table="state"))
        assert not isinstance(plain.blobs()._s3, RoutedClient)  # type: ignore[attr-defined]
        factory = AwsAdapterFactory(Settings(backend="aws", bucket="blobs", state_table="state",
                                             tenant_role_arn=ROLE))
        blobs, state = factory.blobs(), factory.state()
        with tenant_scope("acme"):
            blobs.put("acme/a.md", b"hello")
            assert blobs.get("acme/a.md") == b"hello"
            state.create_account(Account("acme", 1.0))
            assert state.get_account("acme") is not None
        sessions = factory.tenant_sessions()
        assert sessions.accounts() == ["acme"] and sessions.stats.assumed == 1
        assert blobs.get("acme/a.md") == b"hello"  # no tenant: the own client, same bucket
