"""Fixtures for the conformance suites: each port's adapters behind one parametrised fixture.

To run a suite against another adapter, write a backend factory (a context manager that takes
pytest's tmp_path, sets the backing service up, yields an opener and tears it down) and add
one entry to the port's table below, e.g. `BLOB_BACKENDS["s3"] = s3_blobs`.

An opener returns a *new* client on the *same* backing storage each time it is called, which
is how the suites test persistence (close, reopen, read back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from skald.adapters.local.blobs.blobstore import LocalBlobStore
from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
from skald.adapters.local.sqlite.statestore import SqliteStateStore
from skald.ports import BlobStore, JobQueue, StateStore


class QueueOpener(Protocol):
    def __call__(
        self,
        *,
        max_attempts: int = 5,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
    ) -> JobQueue: ...


@dataclass(frozen=True)
class QueueBackend:
    name: str
    open: QueueOpener
    # Shortest duration (visibility, delay, backoff) the backend honours reliably; the suite
    # expresses its waits in ticks (SQS works in whole seconds, so it would use 1.0).
    tick_s: float


T = TypeVar("T")
BlobOpener = Callable[[], BlobStore]
StateOpener = Callable[[], StateStore]


# --------------------------------------------------------------------------------------------
# local backends


@contextmanager
def local_blobs(tmp_path: Path) -> Iterator[BlobOpener]:
    root = tmp_path / "blobs"
    yield lambda: LocalBlobStore(root)


@contextmanager
def local_state(tmp_path: Path) -> Iterator[StateOpener]:
    path = tmp_path / "state.db"
    yield lambda: SqliteStateStore(path)


@contextmanager
def local_queue(tmp_path: Path) -> Iterator[QueueBackend]:
    path = tmp_path / "jobs.db"

    def open_queue(
        *, max_attempts: int = 5, backoff_base_s: float = 1.0, backoff_max_s: float = 60.0
    ) -> JobQueue:
        return SqliteJobQueue(
            path,
            max_attempts=max_attempts,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
        )

    yield QueueBackend(name="local", open=open_queue, tick_s=0.1)


BLOB_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[BlobOpener]]] = {
    "local": local_blobs,
}
STATE_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[StateOpener]]] = {
    "local": local_state,
}
QUEUE_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[QueueBackend]]] = {
    "local": local_queue,
}


# --------------------------------------------------------------------------------------------
# DynamoDB backends on moto. Placed above the fixtures, not appended: `params=sorted(...)` is
# read when a fixture is defined, so an entry added after it would never run.
#
# One moto server per test session, on a free loopback port, started on first use; a fresh
# table per test with the CDK stack's exact schema. Dummy credentials come from the
# environment, patched for the test only, and every client names the loopback endpoint: these
# fixtures cannot reach a real AWS account.

import logging  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Iterable  # noqa: E402
from typing import Any, Literal, TypeVar, cast  # noqa: E402
from unittest import mock  # noqa: E402

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402

from skald.adapters.aws.dynamo.statestore import DynamoStateStore  # noqa: E402
from tests.support.tenancy import violations as _tenancy_violations  # noqa: E402
from tests.support.tenancy_capture import (  # noqa: E402
    TenantBound,
    bound_capture,
    failure_report,
)

# The tenant-scoping contract (tests/support/tenancy.py): every request an AWS adapter sends
# while a suite calls it names exactly the account of the port call (blob store: stays within
# the key or prefix given), unless it is a declared control-plane kind. The moto sessions'
# clients and the OpenSearch transport capture; each AWS adapter the backends open binds its
# port calls (tenant_bound); every test is checked at its end (_tenant_scoping).
TENANCY = bound_capture()
_Adapter = TypeVar("_Adapter")
# The services the suites open clients of (boto3's stubs type a client per literal name).
MotoService = Literal["apigateway", "dynamodb", "s3", "scheduler", "sqs"]


def tenant_bound(adapter: _Adapter, *, blobs: bool = False) -> _Adapter:
    """The adapter behind a proxy that binds each port call (it answers as the adapter)."""
    return cast(_Adapter, TenantBound(adapter, blobs=blobs))


@pytest.fixture(scope="session", autouse=True)
def _tenancy_opensearch() -> Iterator[None]:
    with TENANCY.opensearch():
        yield


@pytest.fixture(autouse=True)
def _tenant_scoping() -> Iterator[None]:
    start = len(TENANCY.requests)
    yield
    found = _tenancy_violations(TENANCY.since(start))
    del TENANCY.requests[start:]
    if found:
        pytest.fail(failure_report(found), pytrace=False)


_DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


class _OneRequestAtATime:
    """WSGI wrapper running moto's requests one at a time.

    DynamoDB makes each item write and each transaction atomic; moto does not when requests
    arrive concurrently (a conditional put checks, then writes, with other threads in between,
    and a failed transaction restores a deep copy of the whole table, wiping writes that other
    requests made meanwhile). Serialising requests gives the concurrency tests the guarantees
    the adapters rely on, and no more than those (DynamoDB serialises per item; this is a
    stricter order, never a weaker one)."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        with self._lock:
            return list(self._app(environ, start_response))


class _MotoServer:
    _lock = threading.Lock()
    _instance: _MotoServer | None = None

    def __init__(self) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request
        app = _OneRequestAtATime(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            "127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler
        )
        self.endpoint = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name="moto-server"
        )
        self._thread.start()

    @classmethod
    def get(cls) -> _MotoServer:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    @classmethod
    def stop(cls) -> None:
        with cls._lock:
            if cls._instance is not None:
                cls._instance._server.shutdown()
                cls._instance._thread.join(timeout=10)
                cls._instance = None


@pytest.fixture(scope="session", autouse=True)
def _stop_moto_server() -> Iterator[None]:
    yield
    _MotoServer.stop()


_BOTO_SESSION: list[boto3.session.Session] = []
_BOTO_LOCK = threading.Lock()


def _dynamodb_client(endpoint: str) -> Any:
    """A new client each call, from one shared boto3 session: a fresh session would load and
    parse the service model again (~0.3 s). Sessions are not thread-safe, hence the lock."""
    # Enough connections for the concurrency tests' threads (the default pool holds 10).
    config = Config(max_pool_connections=32, retries={"mode": "standard", "max_attempts": 3})
    with _BOTO_LOCK:
        if not _BOTO_SESSION:
            _BOTO_SESSION.append(boto3.session.Session())
            TENANCY.hook(_BOTO_SESSION[0].events)
        return _BOTO_SESSION[0].client(
            "dynamodb", endpoint_url=endpoint, region_name="us-east-1", config=config
        )


@contextmanager
def moto_state_table() -> Iterator[tuple[str, str]]:
    """(endpoint, table name): a fresh table with the stack's schema, dropped afterwards."""
    with mock.patch.dict(os.environ, _DUMMY_AWS_ENV):
        endpoint = _MotoServer.get().endpoint
        client = _dynamodb_client(endpoint)
        name = f"skald-state-{uuid.uuid4().hex[:12]}"
        client.create_table(
            TableName=name,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": attr, "AttributeType": kind}
                for attr, kind in (
                    ("pk", "S"),
                    ("sk", "S"),
                    ("gsi1pk", "S"),
                    ("gsi1sk", "S"),
                    ("idle_pk", "S"),
                    ("idle_at", "N"),
                )
            ],
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": index,
                    "KeySchema": [
                        {"AttributeName": hash_key, "KeyType": "HASH"},
                        {"AttributeName": range_key, "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
                for index, hash_key, range_key in (
                    ("gsi1", "gsi1pk", "gsi1sk"),
                    ("idle", "idle_pk", "idle_at"),
                )
            ],
        )
        client.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"},
        )
        try:
            yield endpoint, name
        finally:
            client.delete_table(TableName=name)


@contextmanager
def dynamodb_state(tmp_path: Path) -> Iterator[StateOpener]:
    with moto_state_table() as (endpoint, table):
        yield lambda: tenant_bound(DynamoStateStore(_dynamodb_client(endpoint), table))


STATE_BACKENDS["dynamodb"] = dynamodb_state


# --------------------------------------------------------------------------------------------
# S3 and SQS backends on moto: the same server and dummy environment as DynamoDB's above (one
# request at a time, which gives moto the atomic conditional PUT that S3 has and the exclusive
# ReceiveMessage that SQS has). A fresh bucket / fresh queues per test.

from skald.adapters.aws.s3.blobstore import S3BlobStore  # noqa: E402
from skald.adapters.aws.sqs.account_counts import InMemoryAccountCounts  # noqa: E402
from skald.adapters.aws.sqs.jobqueue import (  # noqa: E402
    InMemoryDedupRegistry,
    InMemoryJobCounters,
    SqsJobQueue,
)

# Logical queue names the JobQueue and worker suites use; each gets an SQS queue and a DLQ.
SQS_TEST_QUEUES = ("semantic", "a", "b", "c", "elsewhere")
# Small pages, so the suite also exercises S3 list pagination (continuation tokens).
S3_TEST_PAGE_SIZE = 3


_MOTO_SESSION: list[boto3.session.Session] = []


def moto_client(service: MotoService, endpoint: str) -> Any:
    """A new boto3 client on the moto server; call inside the dummy AWS environment.

    Clients come from one shared session (built in the dummy environment on first use), whose
    loader caches the service models: a fresh session costs ~0.35 s per client."""
    if not _MOTO_SESSION:
        _MOTO_SESSION.append(boto3.session.Session())
        TENANCY.hook(_MOTO_SESSION[0].events)
    config = Config(
        max_pool_connections=32,
        retries={"mode": "standard", "max_attempts": 3},
        s3={"addressing_style": "path"},
    )
    return _MOTO_SESSION[0].client(
        service, endpoint_url=endpoint, region_name="us-east-1", config=config
    )


@contextmanager
def moto_bucket() -> Iterator[tuple[str, str]]:
    """(endpoint, bucket): a fresh bucket, emptied and dropped afterwards."""
    with mock.patch.dict(os.environ, _DUMMY_AWS_ENV):
        endpoint = _MotoServer.get().endpoint
        client = moto_client("s3", endpoint)
        bucket = f"skald-blobs-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        try:
            yield endpoint, bucket
        finally:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
                if keys:
                    client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
            for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
                client.abort_multipart_upload(
                    Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                )
            client.delete_bucket(Bucket=bucket)


@contextmanager
def s3_blobs(tmp_path: Path) -> Iterator[BlobOpener]:
    with moto_bucket() as (endpoint, bucket):
        yield lambda: tenant_bound(
            S3BlobStore(moto_client("s3", endpoint), bucket, list_page_size=S3_TEST_PAGE_SIZE),
            blobs=True,
        )


@contextmanager
def moto_queues(
    names: Iterable[str] = SQS_TEST_QUEUES,
) -> Iterator[tuple[str, dict[str, str], dict[str, str]]]:
    """(endpoint, queue urls, DLQ urls) by logical name: fresh queues, deleted afterwards."""
    with mock.patch.dict(os.environ, _DUMMY_AWS_ENV):
        endpoint = _MotoServer.get().endpoint
        client = moto_client("sqs", endpoint)
        tag = uuid.uuid4().hex[:10]
        urls: dict[str, str] = {}
        dlqs: dict[str, str] = {}
        for name in names:
            urls[name] = client.create_queue(QueueName=f"skald-{tag}-{name}")["QueueUrl"]
            dlqs[name] = client.create_queue(QueueName=f"skald-{tag}-{name}-dlq")["QueueUrl"]
        try:
            yield endpoint, urls, dlqs
        finally:
            for url in [*urls.values(), *dlqs.values()]:
                client.delete_queue(QueueUrl=url)


@contextmanager
def sqs_queue(tmp_path: Path) -> Iterator[QueueBackend]:
    with moto_queues() as (endpoint, urls, dlqs):
        # What a deployment keeps in DynamoDB, shared by every client of the backend.
        counters = InMemoryJobCounters()
        dedup = InMemoryDedupRegistry()
        accounts = InMemoryAccountCounts()

        def open_queue(
            *, max_attempts: int = 5, backoff_base_s: float = 1.0, backoff_max_s: float = 60.0
        ) -> JobQueue:
            return tenant_bound(
                SqsJobQueue(
                    moto_client("sqs", endpoint),
                    urls,
                    counters=counters,
                    max_attempts=max_attempts,
                    dlq_urls=dlqs,
                    backoff_base_s=backoff_base_s,
                    backoff_max_s=backoff_max_s,
                    dedup=dedup,
                    accounts=accounts,
                )
            )

        yield QueueBackend(name="sqs", open=open_queue, tick_s=1.0)


BLOB_BACKENDS["s3"] = s3_blobs
QUEUE_BACKENDS["sqs"] = sqs_queue


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "local_only(reason): runs against the local adapter only (the reason says why)",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skips a `local_only` test for every backend parameter other than "local"."""
    marker = item.get_closest_marker("local_only")
    callspec = getattr(item, "callspec", None)
    if marker is None or callspec is None:
        return
    backends = {name: value for name, value in callspec.params.items() if name.endswith("_backend")}
    others = sorted(str(v) for v in backends.values() if v != "local")
    if others:
        reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
        pytest.skip(f"local only ({', '.join(others)}): {reason}")


# --------------------------------------------------------------------------------------------


def close_quietly(obj: object) -> None:
    close = getattr(obj, "close", None)
    if callable(close):
        close()


class _Tracker:
    """Closes every client a test opened, at teardown."""

    def __init__(self) -> None:
        self.opened: list[object] = []

    def track(self, obj: T) -> T:
        self.opened.append(obj)
        return obj

    def close_all(self) -> None:
        for obj in reversed(self.opened):
            close_quietly(obj)


@pytest.fixture(params=sorted(BLOB_BACKENDS))
def blob_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlobOpener]:
    tracker = _Tracker()
    with BLOB_BACKENDS[request.param](tmp_path) as opener:
        yield lambda: tracker.track(opener())
        tracker.close_all()


@pytest.fixture
def blob_store(blob_backend: BlobOpener) -> BlobStore:
    return blob_backend()


@pytest.fixture(params=sorted(STATE_BACKENDS))
def state_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateOpener]:
    tracker = _Tracker()
    with STATE_BACKENDS[request.param](tmp_path) as opener:
        yield lambda: tracker.track(opener())
        tracker.close_all()


@pytest.fixture
def state_store(state_backend: StateOpener) -> StateStore:
    return state_backend()


@pytest.fixture(params=sorted(QUEUE_BACKENDS))
def queue_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QueueBackend]:
    tracker = _Tracker()
    with QUEUE_BACKENDS[request.param](tmp_path) as backend:

        def open_tracked(
            *, max_attempts: int = 5, backoff_base_s: float = 1.0, backoff_max_s: float = 60.0
        ) -> JobQueue:
            queue = backend.open(
                max_attempts=max_attempts,
                backoff_base_s=backoff_base_s,
                backoff_max_s=backoff_max_s,
            )
            return tracker.track(queue)

        yield QueueBackend(name=backend.name, open=open_tracked, tick_s=backend.tick_s)
        tracker.close_all()


@pytest.fixture
def job_queue(queue_backend: QueueBackend) -> JobQueue:
    return queue_backend.open()


# --------------------------------------------------------------------------------------------
# sessions (appended as a block, imports included, so the fixtures above stay untouched)

from skald.adapters.local.sqlite.sessionstore import SqliteSessionStore  # noqa: E402
from skald.ports import SessionStore  # noqa: E402

SessionOpener = Callable[[], SessionStore]


@contextmanager
def local_sessions(tmp_path: Path) -> Iterator[SessionOpener]:
    path = tmp_path / "state.db"
    yield lambda: SqliteSessionStore(path)


SESSION_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[SessionOpener]]] = {
    "local": local_sessions,
}


# DynamoDB sessions on moto (helpers: the DynamoDB block above the fixtures)

from skald.adapters.aws.dynamo.sessionstore import DynamoSessionStore  # noqa: E402


@contextmanager
def dynamodb_sessions(tmp_path: Path) -> Iterator[SessionOpener]:
    with moto_state_table() as (endpoint, table):
        yield lambda: tenant_bound(DynamoSessionStore(_dynamodb_client(endpoint), table))


SESSION_BACKENDS["dynamodb"] = dynamodb_sessions


@pytest.fixture(params=sorted(SESSION_BACKENDS))
def session_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionOpener]:
    tracker = _Tracker()
    with SESSION_BACKENDS[request.param](tmp_path) as opener:
        yield lambda: tracker.track(opener())
        tracker.close_all()


@pytest.fixture
def session_store(session_backend: SessionOpener) -> SessionStore:
    return session_backend()


# --------------------------------------------------------------------------------------------
# SearchIndex on OpenSearch (osmem-server). Appended as a block, imports included. The suite's
# backend table lives in test_searchindex.py, which adds OSMEM_INDEX_FACTORIES to it.
#
# osmem-server is an in-memory OpenSearch REST server, started once per session. Each test
# gets a fresh copy-on-write clone of it, so indexes never leak between tests. osmem answers
# k-NN and hybrid queries with HTTP 400: tests needing them (the suite's `knn_index` fixture)
# are skipped here and run only in test_searchindex_real.py.

from opensearchpy import OpenSearch  # noqa: E402
from osmem_server import OsmemServer  # noqa: E402

from skald.adapters.aws.opensearch.index import OpenSearchIndex  # noqa: E402
from skald.adapters.aws.opensearch.setup import ensure_search_index  # noqa: E402
from skald.ports import SearchIndex  # noqa: E402

OSMEM_KNN_SKIP = "osmem-server rejects k-NN; covered only by the real_opensearch suite"
_osmem_clone_url: dict[str, str] = {}  # set per test by _osmem_index_clone, read by openers


def _osmem_index_backend(
    serverless: bool,
) -> Callable[[Path, int], AbstractContextManager[Callable[[], SearchIndex]]]:
    @contextmanager
    def factory(tmp_path: Path, dimension: int) -> Iterator[Callable[[], SearchIndex]]:
        url = _osmem_clone_url["url"]

        def open_index(*, production: bool = False) -> SearchIndex:
            # Through the alias deploy-time setup makes (idempotent: one GET once it exists).
            setup_client = OpenSearch(hosts=[url])
            ensure_search_index(
                setup_client, "skald-records", dimension=dimension, serverless=serverless
            )
            setup_client.close()
            # refresh=True on a domain exercises the refresh parameter (osmem makes writes
            # visible at once anyway); serverless mode must not send it. `production`: the
            # deployed policy, refresh=False (a write is searchable at the next refresh).
            return tenant_bound(
                OpenSearchIndex(
                    OpenSearch(hosts=[url]),
                    "skald-records",
                    dimension=dimension,
                    refresh=not (serverless or production),
                    serverless=serverless,
                )
            )

        yield open_index

    return factory


# "opensearch-serverless" runs the adapter's OpenSearch Serverless code paths (no custom _id,
# no refresh, no delete-by-query) against the same server.
OSMEM_INDEX_FACTORIES = {
    "opensearch": _osmem_index_backend(serverless=False),
    "opensearch-serverless": _osmem_index_backend(serverless=True),
}


@pytest.fixture(scope="session")
def skald_osmem_server() -> Iterator[OsmemServer]:
    # Not the plugin's osmem_server: that one loads Japanese analysis (~4 s), unused here.
    server = OsmemServer.start(japanese=False)
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _osmem_index_clone(request: pytest.FixtureRequest) -> Iterator[None]:
    """For an osmem SearchIndex backend: skips k-NN tests, else provides a fresh clone."""
    callspec = getattr(request.node, "callspec", None)
    backend = callspec.params.get("index_env") if callspec is not None else None
    if backend not in OSMEM_INDEX_FACTORIES:
        yield
        return
    if "knn_index" in request.fixturenames:
        pytest.skip(OSMEM_KNN_SKIP)
    server: OsmemServer = request.getfixturevalue("skald_osmem_server")
    clone = server.clone()
    _osmem_clone_url["url"] = clone.url
    try:
        yield
    finally:
        _osmem_clone_url.pop("url", None)
        clone.close()


# --------------------------------------------------------------------------------------------
# RecallLedger and DedupRegistry (appended as a block, imports included).
#
# RecallLedger: BlobRecallLedger over the local directory store and over S3 (the same code on
# both blob stores), DynamoRecallLedger on the moto table. DedupRegistry: the in-process one
# (what SqsJobQueue uses without DynamoDB, and in tests) and DynamoDedupRegistry on moto. The
# dedup openers take a clock, so the suite moves time instead of sleeping.

from skald.adapters.aws.dynamo.extras import (  # noqa: E402
    DynamoDedupRegistry,
    DynamoRecallLedger,
)
from skald.adapters.aws.sqs.jobqueue import DedupRegistry  # noqa: E402
from skald.adapters.local.blobs.recall_ledger import BlobRecallLedger  # noqa: E402
from skald.ports import RECALL_LEDGER_MAX_TURNS, RecallLedger  # noqa: E402


class RecallOpener(Protocol):
    """A new ledger client on the backend's storage; `max_turns` is the history it keeps."""

    def __call__(self, *, max_turns: int = RECALL_LEDGER_MAX_TURNS) -> RecallLedger: ...


Clock = Callable[[], float]
DedupOpener = Callable[[Clock], DedupRegistry]


@contextmanager
def local_recall(tmp_path: Path) -> Iterator[RecallOpener]:
    with local_blobs(tmp_path) as blobs:

        def open_ledger(*, max_turns: int = RECALL_LEDGER_MAX_TURNS) -> RecallLedger:
            return BlobRecallLedger(blobs(), max_turns=max_turns)

        yield open_ledger


@contextmanager
def s3_recall(tmp_path: Path) -> Iterator[RecallOpener]:
    with s3_blobs(tmp_path) as blobs:

        def open_ledger(*, max_turns: int = RECALL_LEDGER_MAX_TURNS) -> RecallLedger:
            return BlobRecallLedger(blobs(), max_turns=max_turns)

        yield open_ledger


@contextmanager
def dynamodb_recall(tmp_path: Path) -> Iterator[RecallOpener]:
    with moto_state_table() as (endpoint, table):

        def open_ledger(*, max_turns: int = RECALL_LEDGER_MAX_TURNS) -> RecallLedger:
            return tenant_bound(
                DynamoRecallLedger(_dynamodb_client(endpoint), table, max_turns=max_turns)
            )

        yield open_ledger


RECALL_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[RecallOpener]]] = {
    "local": local_recall,
    "s3": s3_recall,
    "dynamodb": dynamodb_recall,
}


@contextmanager
def memory_dedup(tmp_path: Path) -> Iterator[DedupOpener]:
    # One registry per backend, whatever clock each opener is given: the clock is the
    # registry's, so the suite hands every opener the same one.
    shared: list[DedupRegistry] = []

    def open_registry(clock: Clock) -> DedupRegistry:
        if not shared:
            shared.append(InMemoryDedupRegistry(clock=clock))
        return shared[0]

    yield open_registry


@contextmanager
def dynamodb_dedup(tmp_path: Path) -> Iterator[DedupOpener]:
    with moto_state_table() as (endpoint, table):
        yield lambda clock: tenant_bound(
            DynamoDedupRegistry(_dynamodb_client(endpoint), table, clock=clock)
        )


DEDUP_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[DedupOpener]]] = {
    "memory": memory_dedup,
    "dynamodb": dynamodb_dedup,
}


@pytest.fixture(params=sorted(RECALL_BACKENDS))
def recall_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RecallOpener]:
    with RECALL_BACKENDS[request.param](tmp_path) as opener:
        yield opener


@pytest.fixture
def recall_ledger(recall_backend: RecallOpener) -> RecallLedger:
    return recall_backend()


@pytest.fixture(params=sorted(DEDUP_BACKENDS))
def dedup_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DedupOpener]:
    with DEDUP_BACKENDS[request.param](tmp_path) as opener:
        yield opener


# A session store and a state store on one backing store (one SQLite file, one DynamoDB
# table): what a commit needs, since reserving an archive also creates the commit's task.
# Appended as a block, imports included.

from skald.ports import StateStore as _StateStore  # noqa: E402

CommitStores = tuple[SessionStore, _StateStore]
CommitOpener = Callable[[], CommitStores]


@contextmanager
def local_commit_stores(tmp_path: Path) -> Iterator[CommitOpener]:
    path = tmp_path / "state.db"
    yield lambda: (SqliteSessionStore(path), SqliteStateStore(path))


@contextmanager
def dynamodb_commit_stores(tmp_path: Path) -> Iterator[CommitOpener]:
    with moto_state_table() as (endpoint, table):
        yield lambda: (
            tenant_bound(DynamoSessionStore(_dynamodb_client(endpoint), table)),
            tenant_bound(DynamoStateStore(_dynamodb_client(endpoint), table)),
        )


COMMIT_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[CommitOpener]]] = {
    "local": local_commit_stores,
    "dynamodb": dynamodb_commit_stores,
}


@pytest.fixture(params=sorted(COMMIT_BACKENDS))
def commit_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CommitOpener]:
    """Opens (session store, state store) pairs on the same backing store."""
    tracker = _Tracker()
    with COMMIT_BACKENDS[request.param](tmp_path) as opener:

        def open_pair() -> CommitStores:
            sessions, state = opener()
            return tracker.track(sessions), tracker.track(state)

        yield open_pair
        tracker.close_all()


# --------------------------------------------------------------------------------------------
# The audit log: the state database's audit component, and audit items in the DynamoDB state
# table. Appended as a block, imports included. An opener takes the clock the log settles
# and prunes by (reads take theirs from the query).

from skald.adapters.aws.dynamo.audit import DynamoAuditLog  # noqa: E402
from skald.adapters.local.sqlite.audit_log import SqliteAuditLog  # noqa: E402
from skald.ports import AuditLog  # noqa: E402

AuditClock = Callable[[], float]
AuditOpener = Callable[[AuditClock], AuditLog]


@contextmanager
def local_audit(tmp_path: Path) -> Iterator[AuditOpener]:
    path = tmp_path / "state.db"
    yield lambda clock: SqliteAuditLog(path, clock=clock)


@contextmanager
def dynamodb_audit(tmp_path: Path) -> Iterator[AuditOpener]:
    with moto_state_table() as (endpoint, table):
        yield lambda clock: DynamoAuditLog(_dynamodb_client(endpoint), table, clock=clock)


AUDIT_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[AuditOpener]]] = {
    "local": local_audit,
    "dynamodb": dynamodb_audit,
}


@pytest.fixture(params=sorted(AUDIT_BACKENDS))
def audit_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AuditOpener]:
    tracker = _Tracker()
    with AUDIT_BACKENDS[request.param](tmp_path) as opener:
        yield lambda clock: tracker.track(opener(clock))
        tracker.close_all()


# --------------------------------------------------------------------------------------------
# The usage ledger: the state database's usage component, and usage items in the DynamoDB
# state table. Appended as a block, imports included.

from skald.adapters.aws.dynamo.usage import DynamoUsageLedger  # noqa: E402
from skald.adapters.local.sqlite.usage_ledger import SqliteUsageLedger  # noqa: E402
from skald.ports import UsageLedger  # noqa: E402

UsageOpener = Callable[[], UsageLedger]


@contextmanager
def local_usage(tmp_path: Path) -> Iterator[UsageOpener]:
    path = tmp_path / "state.db"
    yield lambda: SqliteUsageLedger(path)


@contextmanager
def dynamodb_usage(tmp_path: Path) -> Iterator[UsageOpener]:
    with moto_state_table() as (endpoint, table):
        yield lambda: tenant_bound(DynamoUsageLedger(_dynamodb_client(endpoint), table))


USAGE_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[UsageOpener]]] = {
    "local": local_usage,
    "dynamodb": dynamodb_usage,
}


@pytest.fixture(params=sorted(USAGE_BACKENDS))
def usage_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[UsageOpener]:
    tracker = _Tracker()
    with USAGE_BACKENDS[request.param](tmp_path) as opener:
        yield lambda: tracker.track(opener())
        tracker.close_all()


# AccountCounts (SqsJobQueue's per-account counts and running slots): the in-process one and
# DynamoAccountCounts on moto. Appended as a block, imports included; openers take a clock.

from skald.adapters.aws.dynamo.account_jobs import DynamoAccountCounts  # noqa: E402
from skald.adapters.aws.sqs.account_counts import AccountCounts  # noqa: E402

AccountCountsOpener = Callable[[Clock], AccountCounts]


@contextmanager
def memory_account_counts(tmp_path: Path) -> Iterator[AccountCountsOpener]:
    shared: dict[str, InMemoryAccountCounts] = {}

    def open_counts(clock: Clock) -> AccountCounts:
        counts = shared.setdefault("counts", InMemoryAccountCounts(clock=clock))
        counts._clock = clock
        return counts

    yield open_counts


@contextmanager
def dynamodb_account_counts(tmp_path: Path) -> Iterator[AccountCountsOpener]:
    with moto_state_table() as (endpoint, table):

        def open_counts(clock: Clock) -> AccountCounts:
            return tenant_bound(DynamoAccountCounts(_dynamodb_client(endpoint), table, clock=clock))

        yield open_counts


ACCOUNT_COUNT_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[AccountCountsOpener]]] = {
    "memory": memory_account_counts,
    "dynamodb": dynamodb_account_counts,
}


@pytest.fixture(params=sorted(ACCOUNT_COUNT_BACKENDS))
def account_counts_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[AccountCountsOpener]:
    with ACCOUNT_COUNT_BACKENDS[request.param](tmp_path) as opener:
        yield opener
