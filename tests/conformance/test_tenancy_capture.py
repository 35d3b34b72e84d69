"""The tenant-scoping capture of the conformance suites catches what it is there to catch:
adapters that leak (their requests name another account, widen a prefix, drop the account
filter) are reported, and requests sent from an adapter's thread pool are captured with the
port call's account. Each test takes back what it captured, so the suite's own check at the
end of the test (conftest._tenant_scoping) sees nothing of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opensearchpy import OpenSearch
from osmem_server import OsmemServer

from skald.adapters.aws.dynamo.statestore import DynamoStateStore
from skald.adapters.aws.opensearch.index import OpenSearchIndex
from skald.adapters.aws.opensearch.setup import ensure_search_index
from skald.adapters.aws.s3.blobstore import S3BlobStore
from skald.ports import Account, BlobListing, IndexFilter, IndexRecord, User
from tests.conformance.conftest import (
    TENANCY,
    _dynamodb_client,
    moto_bucket,
    moto_client,
    moto_state_table,
    tenant_bound,
)
from tests.support.tenancy import StoreRequest, violations


@pytest.fixture
def taken() -> Iterator[list[StoreRequest]]:
    """What the test's adapters send, taken out of the suite's capture."""
    start = len(TENANCY.requests)
    out: list[StoreRequest] = []
    yield out
    del TENANCY.requests[start:]


def take(out: list[StoreRequest], start: int) -> list[str]:
    out[:] = TENANCY.since(start)
    return violations(out)


class WideningBlobs(S3BlobStore):
    """Lists the whole bucket and filters afterwards."""

    def list(self, prefix: str, *, delimiter: str | None = "/") -> BlobListing:
        found = super().list("", delimiter=None)
        return BlobListing([b for b in found.blobs if b.key.startswith(prefix)], [])


def test_a_blob_store_that_widens_a_prefix_is_reported(taken: list[StoreRequest]) -> None:
    with moto_bucket() as (endpoint, bucket):
        store = tenant_bound(WideningBlobs(moto_client("s3", endpoint), bucket), blobs=True)
        store.put("acme/a.md", b"a")
        start = len(TENANCY.requests)
        assert [b.key for b in store.list("acme/").blobs] == ["acme/a.md"]
        found = take(taken, start)
    assert found and all("prefix : outside what the caller gave (acme/)" in f for f in found)


def test_pool_threads_send_with_the_port_calls_account(taken: list[StoreRequest]) -> None:
    with moto_bucket() as (endpoint, bucket):
        store = tenant_bound(S3BlobStore(moto_client("s3", endpoint), bucket), blobs=True)
        start = len(TENANCY.requests)
        store.put_many([(f"acme/{n}.md", b"x") for n in range(4)])
        store.head_many([f"acme/{n}.md" for n in range(4)])
        assert list(store.get_many([(f"acme/{n}.md", 1) for n in range(4)])) == [b"x"] * 4
        assert take(taken, start) == []
    sent = [(r.operation, r.accounts) for r in taken]
    for operation in ("PutObject", "HeadObject", "GetObject"):
        assert sent.count((operation, frozenset({"acme"}))) == 4, sent


class PeekingState(DynamoStateStore):
    """Reads a user of another account along with the one asked for."""

    def get_user(self, account_id: str, user_id: str) -> User | None:
        super().get_user("beta", user_id)
        return super().get_user(account_id, user_id)


def test_a_state_store_that_reads_another_account_is_reported(taken: list[StoreRequest]) -> None:
    with moto_state_table() as (endpoint, table):
        store = tenant_bound(PeekingState(_dynamodb_client(endpoint), table))
        store.create_account(Account("acme", 1.0))
        start = len(TENANCY.requests)
        assert store.get_user("acme", "alice") is None
        found = take(taken, start)
    assert len(found) == 1 and "names ['beta'], not the caller's ['acme']" in found[0], found


class UnfilteredIndex(OpenSearchIndex):
    """Counts every account's records."""

    def count(self, account: str, flt: IndexFilter | None = None) -> int:
        resp = self._client.count(index=self.index, body={"query": {"match_all": {}}})
        return int(resp["count"])


def test_an_index_that_drops_the_account_filter_is_reported(
    taken: list[StoreRequest], skald_osmem_server: OsmemServer
) -> None:
    clone = skald_osmem_server.clone()
    try:
        setup = OpenSearch(hosts=[clone.url])
        ensure_search_index(setup, "skald-records", dimension=4)
        setup.close()
        index: Any = tenant_bound(
            UnfilteredIndex(
                OpenSearch(hosts=[clone.url]), "skald-records", dimension=4, refresh=True
            )
        )
        start = len(TENANCY.requests)
        index.upsert(
            [
                IndexRecord(
                    account="acme",
                    uri="viking://resources/a.md",
                    level=2,
                    context_type="resource",
                    parent="viking://resources",
                    ancestors=["viking://resources"],
                    text="tea",
                )
            ]
        )
        assert index.count("acme") == 1
        found = take(taken, start)
        index.close()
    finally:
        clone.close()
    assert len(found) == 1 and "query not restricted to an account" in found[0], found
