"""Tenant-scoped credentials (skald.adapters.aws.tenancy.clients): one AssumeRole per account
and container, tagged with the account; refreshed before expiry; bounded (least recently used
accounts go first); each call signed by the items it names, never by trust in the caller: a
tenant's call naming another account's key is signed with the tenant's credentials (which IAM
then refuses, tests/contract/test_tenant_scope.py), control-plane items with the function's
own. The blob store's pools carry the call's tenant into their threads.

Routing runs on real boto3 clients whose requests stop right after signing (a `before-send`
hook answers them), so each test sees the access key a request was really signed with. The
STS client is a stand-in recording what it is asked."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Literal, cast

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.config import Config
from botocore.exceptions import ClientError

from skald.adapters.aws.s3.blobstore import S3BlobStore
from skald.adapters.aws.tenancy.clients import RoutedClient, TenantSessions
from skald.adapters.aws.tenancy.rules import TAG_KEY, control_plane_call, is_tenant_account
from skald.domain.access.call_context import tenant_scope
from skald.domain.errors import InvalidArgument

ROLE = "arn:aws:iam::123456789012:role/skald-content-tenant"
OWN = "OWNKEY"


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
        return {
            "Credentials": {
                "AccessKeyId": f"ASIA{n}",
                "SecretAccessKey": "s",
                "SessionToken": "t",
                "Expiration": expires,
            }
        }


def sessions(
    clock: Clock | None = None, *, max_accounts: int = 256, sts: FakeSts | None = None
) -> tuple[TenantSessions, FakeSts]:
    clock = clock or Clock()
    sts = sts or FakeSts(clock)
    return TenantSessions(
        sts, ROLE, duration_s=3600, max_accounts=max_accounts, refresh_margin_s=600, clock=clock
    ), sts


# -- the credentials cache ----------------------------------------------------------------------


def test_one_assume_role_per_account_tagged_with_the_account() -> None:
    cache, sts = sessions()
    first = cache.credentials("acme")
    assert cache.credentials("acme") is first
    assert cache.credentials("globex").access_key != first.access_key
    assert [c["Tags"] for c in sts.calls] == [
        [{"Key": TAG_KEY, "Value": "acme"}],
        [{"Key": TAG_KEY, "Value": "globex"}],
    ]
    assert {c["RoleArn"] for c in sts.calls} == {ROLE}
    assert [c["RoleSessionName"] for c in sts.calls] == ["skald-acme", "skald-globex"]
    assert {c["DurationSeconds"] for c in sts.calls} == {3600}
    assert cache.stats.assumed == 2 and cache.stats.hits == 1


def test_credentials_are_replaced_before_they_expire() -> None:
    clock = Clock()
    cache, sts = sessions(clock)
    first = cache.credentials("acme")
    clock.now += 3600 - 600 - 1  # more than the margin left: still the same
    assert cache.credentials("acme") is first
    clock.now += 1  # the margin left: assumed again
    second = cache.credentials("acme")
    assert second.access_key != first.access_key and len(sts.calls) == 2
    clock.now += 100
    assert cache.credentials("acme") is second


def test_the_cache_keeps_the_most_recently_used_accounts() -> None:
    cache, sts = sessions(max_accounts=2)
    cache.credentials("a1")
    cache.credentials("a2")
    cache.credentials("a1")  # a1 used last: a2 goes first
    cache.credentials("a3")
    assert cache.accounts() == ["a1", "a3"] and cache.stats.evicted == 1
    assert len(sts.calls) == 3
    cache.credentials("a1")  # still cached
    assert len(sts.calls) == 3
    cache.credentials("a2")  # evicted: assumed again, evicting a3
    assert len(sts.calls) == 4 and cache.accounts() == ["a1", "a2"]


def test_threads_asking_for_a_new_account_at_once_assume_once() -> None:
    gate = threading.Event()
    clock = Clock()
    cache, sts = sessions(clock, sts=FakeSts(clock, gate))
    got: list[Any] = []
    threads = [
        threading.Thread(target=lambda: got.append(cache.credentials("acme"))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join(10)
    assert len(sts.calls) == 1 and len(got) == 8 and len({id(c) for c in got}) == 1


@pytest.mark.parametrize("account", ["", "_health", "a/b", "a*", "a#b", "x" * 256])
def test_no_credentials_for_what_is_not_an_account_id(account: str) -> None:
    cache, sts = sessions()
    with pytest.raises(InvalidArgument):
        cache.credentials(account)
    assert not sts.calls and not is_tenant_account(account)


def test_session_length_and_bounds_are_checked() -> None:
    sts = FakeSts(Clock())
    for duration in (899, 3601):  # role chaining: one hour at most
        with pytest.raises(ValueError):
            TenantSessions(sts, ROLE, duration_s=duration)
    with pytest.raises(ValueError):
        TenantSessions(sts, ROLE, max_accounts=0)


# -- routing: whose credentials sign each request ---------------------------------------------


class _Raw:
    """The raw body botocore reads a stopped request's answer from."""

    def __init__(self, body: bytes) -> None:
        self._io = io.BytesIO(body)

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._io.read()

    def read(self, amt: int | None = None) -> bytes:
        return self._io.read(amt)

    def close(self) -> None:
        self._io.close()


# The clients these tests sign with (boto3's stubs type a client per literal name).
Service = Literal["dynamodb", "s3"]
_S3_HEADERS = {
    "ETag": '"e"',
    "Content-Length": "1",
    "Last-Modified": "Thu, 01 Jan 2026 00:00:00 GMT",
}
_LISTING = (
    b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<IsTruncated>false</IsTruncated></ListBucketResult>"
)


class Sent:
    """A real client whose requests are answered right after signing; records, per request,
    (operation, the access key that signed it, the thread)."""

    def __init__(self, service: Service) -> None:
        self.client = boto3.client(
            service,
            region_name="us-east-1",
            endpoint_url="http://127.0.0.1:9",
            aws_access_key_id=OWN,
            aws_secret_access_key="x",
            aws_session_token="t",
            config=Config(retries={"max_attempts": 1, "mode": "standard"}),
        )
        self.requests: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        # A before-send handler answers in the network's place (botocore uses the first
        # response a handler returns); the stubs type handlers as returning None.
        self.client.meta.events.register("before-send", cast(Callable[..., None], self._send))

    def _send(self, request: Any, event_name: str, **_: Any) -> AWSResponse:
        auth = request.headers["Authorization"]
        auth = auth.decode() if isinstance(auth, bytes) else auth
        match = re.search(r"Credential=([^/]+)/", auth)
        assert match is not None, auth
        operation = event_name.rsplit(".", 1)[1]
        with self._lock:
            self.requests.append((operation, match.group(1), threading.current_thread().name))
        if operation == "ListObjectsV2":
            return AWSResponse(request.url, 200, HTTPHeaders(), _Raw(_LISTING))
        if "dynamodb" in request.url or "X-Amz-Target" in request.headers:
            json_type = HTTPHeaders.from_dict({"Content-Type": "application/x-amz-json-1.0"})
            return AWSResponse(request.url, 200, json_type, _Raw(b"{}"))
        return AWSResponse(
            request.url,
            200,
            HTTPHeaders.from_dict(_S3_HEADERS),
            _Raw(b"x" if request.method == "GET" else b""),
        )

    def signed(self) -> list[tuple[str, str]]:
        return [(operation, key) for operation, key, _ in self.requests]


def routed(service: Service) -> tuple[RoutedClient, Sent, FakeSts]:
    sent = Sent(service)
    cache, sts = sessions()
    return RoutedClient(sent.client, cache, service), sent, sts


def test_without_a_tenant_every_request_is_signed_with_the_own_credentials() -> None:
    s3, sent, sts = routed("s3")
    s3.get_object(Bucket="b", Key="acme/x.md")
    s3.list_objects_v2(Bucket="b", Prefix="")
    assert sent.signed() == [("GetObject", OWN), ("ListObjectsV2", OWN)] and not sts.calls


def test_in_a_tenants_scope_account_items_are_signed_scoped_control_plane_own() -> None:
    s3, sent, sts = routed("s3")
    with tenant_scope("acme"):
        s3.get_object(Bucket="b", Key="acme/notes/a.md")
        s3.put_object(Bucket="b", Key="_jobs/semantic/j1.json", Body=b"{}")
        s3.get_object(Bucket="b", Key="_watches/w1.json")
        s3.list_objects_v2(Bucket="b", Prefix="acme/notes/")
        s3.list_objects_v2(Bucket="b", Prefix="_watches/")
        s3.list_objects_v2(Bucket="b")  # the whole bucket: scoped, hence refused by IAM
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket="b", Prefix="acme/")
    list(pages)  # fetched later, out of the scope: still signed as chosen when asked
    s3.get_object(Bucket="b", Key="acme/notes/a.md")  # out of the scope: own
    assert sent.signed() == [
        ("GetObject", "ASIA1"),
        ("PutObject", OWN),
        ("GetObject", OWN),
        ("ListObjectsV2", "ASIA1"),
        ("ListObjectsV2", OWN),
        ("ListObjectsV2", "ASIA1"),
        ("ListObjectsV2", "ASIA1"),
        ("GetObject", OWN),
    ]
    assert [c["Tags"] for c in sts.calls] == [[{"Key": TAG_KEY, "Value": "acme"}]]


def test_a_call_naming_another_accounts_key_is_signed_with_the_tenants_credentials() -> None:
    s3, sent, sts = routed("s3")
    with tenant_scope("acme"):
        s3.get_object(Bucket="b", Key="globex/secret.md")
        s3.head_object(Bucket="b", Key="acme2/x.md")
    assert sent.signed() == [("GetObject", "ASIA1"), ("HeadObject", "ASIA1")]
    # ... acme's: the only session assumed was tagged acme.
    assert [c["Tags"] for c in sts.calls] == [[{"Key": TAG_KEY, "Value": "acme"}]]


def _key(pk: str, sk: str = "META") -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def test_state_table_calls_are_signed_by_the_partitions_they_name() -> None:
    dynamo, sent, _ = routed("dynamodb")
    with tenant_scope("acme"):
        dynamo.get_item(TableName="t", Key=_key("TASK#1"))  # own
        dynamo.put_item(TableName="t", Item=_key("QUEUE#memory", "DEDUP#k"))  # own
        dynamo.get_item(TableName="t", Key=_key("SESS#acme#alice#s1"))  # scoped
        dynamo.get_item(TableName="t", Key=_key("SESS#globex#bob#s1"))  # scoped: refused
        # A commit: the session, its archive and its task in one transaction: scoped.
        dynamo.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": "t",
                        "Key": _key("SESS#acme#alice#s1"),
                        "UpdateExpression": "SET a = :a",
                        "ExpressionAttributeValues": {":a": {"N": "1"}},
                    }
                },
                {"Put": {"TableName": "t", "Item": _key("TASK#1")}},
            ]
        )
        dynamo.query(
            TableName="t",
            KeyConditionExpression="#n0 = :v0",
            ExpressionAttributeNames={"#n0": "pk"},
            ExpressionAttributeValues={":v0": {"S": "ACCT#acme#SESSIONS"}},
        )
        dynamo.query(
            TableName="t",
            IndexName="gsi1",
            KeyConditionExpression="#n0 = :v0",
            ExpressionAttributeNames={"#n0": "gsi1pk"},
            ExpressionAttributeValues={":v0": {"S": "ACCT#acme#TASKS"}},
        )  # own
        dynamo.batch_get_item(RequestItems={"t": {"Keys": [_key("SESS#acme#a#1")]}})
    assert sent.signed() == [
        ("GetItem", OWN),
        ("PutItem", OWN),
        ("GetItem", "ASIA1"),
        ("GetItem", "ASIA1"),
        ("TransactWriteItems", "ASIA1"),
        ("Query", "ASIA1"),
        ("Query", OWN),
        ("BatchGetItem", "ASIA1"),
    ]


def test_the_control_plane_rule() -> None:
    assert control_plane_call("dynamodb", "GetItem", {"Key": _key("ACCT#_health")})
    assert control_plane_call("dynamodb", "PutItem", {"Item": _key("ACCOUNTS", "ACCT#a")})
    assert control_plane_call("dynamodb", "DescribeTable", {"TableName": "t"})
    assert not control_plane_call("dynamodb", "GetItem", {"Key": _key("ACCT#acme")})
    assert not control_plane_call("dynamodb", "Scan", {"TableName": "t"})
    assert not control_plane_call("dynamodb", "GetItem", {"Key": {"id": {"S": "x"}}})
    assert not control_plane_call(
        "dynamodb",
        "TransactWriteItems",
        {
            "TransactItems": [
                {"Put": {"Item": _key("KEY#h")}},
                {"Put": {"Item": _key("ACCT#a", "USER#u")}},
            ]
        },
    )
    assert control_plane_call(
        "s3", "CopyObject", {"Key": "_jobs/a", "CopySource": {"Bucket": "b", "Key": "_jobs/b"}}
    )
    assert not control_plane_call(
        "s3", "CopyObject", {"Key": "_jobs/a", "CopySource": {"Bucket": "b", "Key": "acme/b"}}
    )
    assert not control_plane_call("s3", "HeadBucket", {"Bucket": "b"})
    assert not control_plane_call("sqs", "SendMessage", {})


def test_the_blob_stores_pools_carry_the_tenant_into_their_threads() -> None:
    s3, sent, _ = routed("s3")
    store = S3BlobStore(s3, "b")
    with tenant_scope("acme"):
        store.head_many([f"acme/{i}.md" for i in range(8)])
        store.put_many([(f"acme/{i}.md", b"x") for i in range(8)])
        assert list(store.get_many((f"acme/{i}.md", 1) for i in range(8))) == [b"x"] * 8
    assert len(sent.requests) == 24
    assert {key for _, key, _ in sent.requests} == {"ASIA1"}
    assert all(thread.startswith("skald-s3-") for _, _, thread in sent.requests)  # pools


# -- a 403 for a missing key ------------------------------------------------------------------


class FakeClient:
    """An S3 client's stand-in answering from `answers`, recording (operation, params)."""

    OPERATIONS = {
        "get_object": "GetObject",
        "head_object": "HeadObject",
        "list_objects_v2": "ListObjectsV2",
    }

    def __init__(self, answers: dict[str, Any]) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.answers = answers

    def __getattr__(self, method: str) -> Any:
        if method not in self.OPERATIONS:
            raise AttributeError(method)

        def call(**params: Any) -> Any:
            self.calls.append((self.OPERATIONS[method], params))
            answer = self.answers[method]
            if isinstance(answer, Exception):
                raise answer
            return answer

        return call


def _denied(operation: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "403" if operation == "HeadObject" else "AccessDenied"},
            "ResponseMetadata": {
                "RequestId": "",
                "HostId": "",
                "HTTPStatusCode": 403,
                "HTTPHeaders": {},
                "RetryAttempts": 0,
            },
        },
        operation,
    )


@pytest.mark.parametrize(
    "listed, outcome",
    [
        ([], "missing"),  # the key is not there
        ([{"Key": "acme/a.md"}], "refused"),  # it is: the 403 was a refusal
        ([{"Key": "acme/a.md.bak"}], "missing"),  # only longer keys
        (_denied("ListObjectsV2"), "refused"),  # listing refused too: not ours
    ],
)
def test_a_read_refused_with_403_is_missing_only_when_a_listing_says_so(
    listed: Any, outcome: str
) -> None:
    """S3 answers 404 for a missing key to a caller allowed to list the bucket; one allowed
    to list its account's prefix only may get 403 instead: the store lists that one key."""
    answers: dict[str, Any] = {
        "head_object": _denied("HeadObject"),
        "get_object": _denied("GetObject"),
        "list_objects_v2": listed if isinstance(listed, Exception) else {"Contents": listed},
    }
    client = FakeClient(answers)
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
    assert listings and all(
        p == {"Bucket": "b", "Prefix": "acme/a.md", "MaxKeys": 1} for p in listings
    )


# -- the adapter factory, on moto ---------------------------------------------------------------


def test_the_factory_routes_blobs_and_state_through_the_tenant_role(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With SKALD_TENANT_ROLE_ARN set, the blob store and the state stores get routed clients
    sharing one credentials cache; moto's STS issues the credentials (it enforces no IAM:
    the refusals are the IAM contract's to prove)."""
    moto = pytest.importorskip("moto")
    import boto3

    from skald.adapters.aws.factory import AwsAdapterFactory
    from skald.adapters.aws.local_stack import create_state_table
    from skald.config import Settings
    from skald.ports import Account

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="blobs")
        create_state_table(boto3.client("dynamodb", region_name="us-east-1"), "state")
        plain = AwsAdapterFactory(Settings(backend="aws", bucket="blobs", state_table="state"))
        assert not isinstance(plain.blobs()._s3, RoutedClient)  # type: ignore[attr-defined]
        factory = AwsAdapterFactory(
            Settings(backend="aws", bucket="blobs", state_table="state", tenant_role_arn=ROLE)
        )
        blobs, state = factory.blobs(), factory.state()
        with tenant_scope("acme"):
            blobs.put("acme/a.md", b"hello")
            assert blobs.get("acme/a.md") == b"hello"
            state.create_account(Account("acme", 1.0))
            assert state.get_account("acme") is not None
        sessions = factory.tenant_sessions()
        assert sessions.accounts() == ["acme"] and sessions.stats.assumed == 1
        assert blobs.get("acme/a.md") == b"hello"  # no tenant: the own client, same bucket


def test_the_catalogue_gives_the_data_plane_functions_the_tenant_role_variable() -> None:
    from skald import catalog

    scoped = {fn.name for fn in catalog.FUNCTIONS if catalog.tenant_scoped(fn)}
    assert scoped == {
        "content",
        "search",
        "sessions",
        "mcp",
        "semantic",
        "memory",
        "autocommit",
        "fetch",
        "purge",
    }
    for fn in catalog.FUNCTIONS:
        assert (catalog.TENANT_ROLE_ENV in catalog.environment(fn)) is (fn.name in scoped)
    # Optional: a stack deployed without tenant credentials does not set it.
    assert catalog.TENANT_ROLE_ENV in catalog.OPTIONAL_ENV
