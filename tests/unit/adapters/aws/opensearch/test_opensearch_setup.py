"""Deploy-time setup of the records index: a versioned index behind the alias the app uses.

Against osmem-server (aliases, `_reindex`, search + bulk work there): creation, the no-op
second run, a changed mapping copied and switched atomically, a plain index from before
aliases, a changed vector size, a half-built index, OpenSearch Serverless's copy path, and
the adapter reading through the alias. osmem has no search pipelines: that part is checked on
the recorded requests instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from opensearchpy import OpenSearch
from opensearchpy.connection import Connection, Urllib3HttpConnection

from skald.adapters.aws.opensearch import setup as opensearch_setup
from skald.adapters.aws.opensearch.index import (
    OpenSearchIndex,
    hybrid_pipeline_body,
    index_template_body,
)
from skald.adapters.aws.opensearch.setup import (
    IndexSetupError,
    ensure_search_index,
    versioned_name,
)
from skald.ports import IndexRecord

osmem_server = pytest.importorskip("osmem_server")

ALIAS = "skald-records"
DIM = 4


class Recording(Urllib3HttpConnection):
    """A real connection that notes each request (method, path)."""

    sent: ClassVar[list[tuple[str, str]]] = []

    def perform_request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        Recording.sent.append((method, url.split("?")[0]))
        return super().perform_request(method, url, *args, **kwargs)


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    srv = osmem_server.OsmemServer.start(japanese=False)
    yield srv
    srv.close()


@pytest.fixture
def client(server: Any) -> Iterator[OpenSearch]:
    clone = server.clone()
    Recording.sent.clear()
    c = OpenSearch(hosts=[clone.url], connection_class=Recording)
    yield c
    c.close()
    clone.close()


def record(uri: str, dim: int = DIM) -> IndexRecord:
    return IndexRecord(
        account="acme",
        uri=uri,
        level=2,
        context_type="resource",
        parent="viking://resources",
        ancestors=["viking://resources"],
        text=f"notes about {uri}",
        vector=[1.0] + [0.0] * (dim - 1),
        created_at=1.0,
        updated_at=1.0,
    )


def adapter(client: OpenSearch, *, dim: int = DIM, serverless: bool = False) -> OpenSearchIndex:
    url = client.transport.hosts[0]
    return OpenSearchIndex(
        OpenSearch(hosts=[url]), ALIAS, dimension=dim, refresh=not serverless, serverless=serverless
    )


def behind_alias(client: OpenSearch) -> list[str]:
    return sorted(client.indices.get_alias(name=ALIAS))


def changed_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new release's mapping: another ef_search, same vectors."""
    monkeypatch.setattr(
        opensearch_setup,
        "index_template_body",
        lambda dimension: index_template_body(dimension=dimension, ef_search=200),
    )


def test_first_run_creates_the_versioned_index_and_the_alias(client: OpenSearch) -> None:
    lines = ensure_search_index(client, ALIAS, dimension=DIM)
    target = versioned_name(ALIAS, index_template_body(dimension=DIM))
    assert lines == [f"search index {ALIAS} -> {target}: created"]
    assert behind_alias(client) == [target]
    mapping = client.indices.get_mapping(index=ALIAS)[target]["mappings"]
    assert mapping["properties"]["vector"]["dimension"] == DIM
    index = adapter(client)
    index.upsert([record("viking://resources/a.md")])  # reads and writes via the alias
    assert [r.uri for r in index.get("acme", "viking://resources/a.md")] == [
        "viking://resources/a.md"
    ]
    index.close()


def test_a_second_run_with_the_same_mapping_sends_no_write(client: OpenSearch) -> None:
    ensure_search_index(client, ALIAS, dimension=DIM)
    Recording.sent.clear()
    lines = ensure_search_index(client, ALIAS, dimension=DIM)
    assert lines[0].endswith(": unchanged")
    assert Recording.sent == [("GET", f"/_alias/{ALIAS}")]


def test_a_changed_mapping_is_copied_then_switched(
    client: OpenSearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    ensure_search_index(client, ALIAS, dimension=DIM)
    old = behind_alias(client)
    index = adapter(client)
    index.upsert([record(f"viking://resources/{i}.md") for i in range(3)])
    changed_mapping(monkeypatch)
    Recording.sent.clear()
    [line] = ensure_search_index(client, ALIAS, dimension=DIM)
    new = versioned_name(ALIAS, index_template_body(dimension=DIM, ef_search=200))
    assert line == (
        f"search index {ALIAS} -> {new}: migrated from {old[0]} (3 records "
        f"copied); previous index kept: {old[0]}"
    )
    assert behind_alias(client) == [new]
    assert [m for m, p in Recording.sent if p == "/_aliases"] == ["POST"]  # one swap
    assert ("POST", "/_reindex") in Recording.sent
    assert index.count("acme") == 3  # same adapter, same alias, the new index
    assert client.indices.exists(index=old[0])
    index.close()


def test_a_plain_index_named_like_the_alias_is_migrated(client: OpenSearch) -> None:
    """Deployments from before aliases: the app created `skald-records` itself."""
    plain = OpenSearchIndex(client, ALIAS, dimension=DIM, refresh=True)
    plain.ensure_index()
    plain.upsert([record("viking://resources/old.md")])
    [line] = ensure_search_index(client, ALIAS, dimension=DIM)
    target = versioned_name(ALIAS, index_template_body(dimension=DIM))
    assert line == f"search index {ALIAS} -> {target}: migrated from {ALIAS} (1 records copied)"
    assert behind_alias(client) == [target]
    index = adapter(client)
    assert [r.uri for r in index.get("acme", "viking://resources/old.md")]
    index.close()


def test_a_new_vector_size_starts_empty_and_says_so(client: OpenSearch) -> None:
    ensure_search_index(client, ALIAS, dimension=DIM)
    index = adapter(client)
    index.upsert([record("viking://resources/a.md")])
    index.close()
    [line] = ensure_search_index(client, ALIAS, dimension=8)
    assert "holds 4-d vectors, the new mapping 8-d: records not copied" in line
    assert "POST /api/v1/content/reindex" in line
    assert behind_alias(client) == [versioned_name(ALIAS, index_template_body(dimension=8))]
    wider = adapter(client, dim=8)
    assert wider.count("acme") == 0
    wider.upsert([record("viking://resources/b.md", dim=8)])  # the app's new size fits
    wider.close()


def test_a_half_built_index_is_rebuilt(client: OpenSearch, monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_search_index(client, ALIAS, dimension=DIM)
    index = adapter(client)
    index.upsert([record("viking://resources/a.md")])
    changed_mapping(monkeypatch)
    new = versioned_name(ALIAS, index_template_body(dimension=DIM, ef_search=200))
    client.indices.create(index=new, body=index_template_body(dimension=DIM, ef_search=200))
    client.index(
        index=new,
        id="stale",
        body={"account": "acme", "uri": "viking://gone", "level": 2},
        refresh=True,
    )
    ensure_search_index(client, ALIAS, dimension=DIM)
    assert behind_alias(client) == [new]
    assert index.count("acme") == 1  # the stale document went with the half-built index
    index.close()


def test_serverless_copies_by_search_and_bulk(
    client: OpenSearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Serverless documents have server-made ids and no _reindex: pages of search_after."""
    monkeypatch.setattr(opensearch_setup, "COPY_PAGE", 2)
    ensure_search_index(client, ALIAS, dimension=DIM, serverless=True)
    index = adapter(client, serverless=True)
    index.upsert([record(f"viking://resources/{i}.md") for i in range(5)])
    changed_mapping(monkeypatch)
    Recording.sent.clear()
    [line] = ensure_search_index(client, ALIAS, dimension=DIM, serverless=True)
    assert "(5 records copied)" in line
    assert ("POST", "/_reindex") not in Recording.sent
    assert Recording.sent.count(("POST", "/_bulk")) == 3
    assert sorted(
        r.uri for i in range(5) for r in index.get("acme", f"viking://resources/{i}.md")
    ) == [f"viking://resources/{i}.md" for i in range(5)]
    index.close()


def test_a_failed_copy_leaves_the_alias_where_it_was(
    client: OpenSearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    ensure_search_index(client, ALIAS, dimension=DIM)
    old = behind_alias(client)
    index = adapter(client)
    index.upsert([record("viking://resources/a.md")])
    index.close()
    strict = index_template_body(dimension=DIM)
    del strict["mappings"]["properties"]["uri"]  # a mapping the old records do not fit
    monkeypatch.setattr(opensearch_setup, "index_template_body", lambda dimension: strict)
    with pytest.raises(IndexSetupError, match="the alias was not moved"):
        ensure_search_index(client, ALIAS, dimension=DIM)
    assert behind_alias(client) == old


# -- search pipelines: recorded requests (osmem has no search pipelines) ----------------------


class Scripted(Connection):
    """Answers from a table instead of a server; records what was sent."""

    answers: ClassVar[dict[tuple[str, str], tuple[int, Any]]] = {}
    sent: ClassVar[list[tuple[str, str, Any]]] = []

    def perform_request(
        self,
        method: str,
        url: str,
        params: Any = None,
        body: Any = None,
        timeout: Any = None,
        ignore: Any = (),
        headers: Any = None,
    ) -> Any:
        path = url.split("?")[0]
        Scripted.sent.append((method, path, json.loads(body) if body else None))
        status, payload = Scripted.answers.get((method, path), (404, {"error": "not found"}))
        raw = json.dumps(payload)
        if not 200 <= status < 300 and status not in ignore:
            self._raise_error(status, raw, "application/json")
        return status, {"content-type": "application/json"}, raw


def test_the_hybrid_pipeline_is_created_then_left_alone() -> None:
    target = versioned_name(ALIAS, index_template_body(dimension=DIM))
    Scripted.sent.clear()
    Scripted.answers = {
        ("GET", f"/_alias/{ALIAS}"): (200, {target: {"aliases": {ALIAS: {}}}}),
        ("PUT", "/_search/pipeline/skald-hybrid"): (200, {"acknowledged": True}),
    }
    client = OpenSearch(hosts=[{"host": "search.invalid", "port": 443}], connection_class=Scripted)
    lines = ensure_search_index(client, ALIAS, dimension=DIM, pipeline="skald-hybrid")
    assert lines[1] == "search pipeline skald-hybrid: created"
    assert Scripted.sent == [
        ("GET", f"/_alias/{ALIAS}", None),
        ("GET", "/_search/pipeline/skald-hybrid", None),
        ("PUT", "/_search/pipeline/skald-hybrid", hybrid_pipeline_body("rrf")),
    ]
    Scripted.sent.clear()
    Scripted.answers[("GET", "/_search/pipeline/skald-hybrid")] = (
        200,
        {"skald-hybrid": hybrid_pipeline_body("rrf")},
    )
    lines = ensure_search_index(client, ALIAS, dimension=DIM, pipeline="skald-hybrid")
    assert lines[1] == "search pipeline skald-hybrid: unchanged"
    assert [m for m, _, _ in Scripted.sent] == ["GET", "GET"]


def test_a_domain_still_starting_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Right after deploy the endpoint (or its access policy) may refuse for a while."""
    target = versioned_name(ALIAS, index_template_body(dimension=DIM))
    Scripted.sent.clear()
    Scripted.answers = {("GET", f"/_alias/{ALIAS}"): (403, {"message": "not yet"})}
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        Scripted.answers[("GET", f"/_alias/{ALIAS}")] = (200, {target: {"aliases": {ALIAS: {}}}})

    monkeypatch.setattr(time, "sleep", sleep)  # the time module the setup calls
    client = OpenSearch(hosts=[{"host": "search.invalid", "port": 443}], connection_class=Scripted)
    assert ensure_search_index(client, ALIAS, dimension=DIM, ready_timeout_s=60)[0].endswith(
        ": unchanged"
    )
    assert sleeps == [2.0]
    Scripted.answers[("GET", f"/_alias/{ALIAS}")] = (403, {"message": "denied"})
    with pytest.raises(Exception, match="403"):
        ensure_search_index(client, ALIAS, dimension=DIM)  # no wait asked: fails at once


def test_the_app_never_creates_the_index(client: OpenSearch) -> None:
    """The AWS factory's index is a client of the alias: without setup it finds nothing to
    use (and creates nothing); after setup it works."""
    from opensearchpy.exceptions import NotFoundError

    from skald.adapters.aws.factory import AwsAdapterFactory
    from skald.compose.entrypoints import compose
    from skald.config import Settings

    url = client.transport.hosts[0]
    settings = Settings(
        backend="aws",
        opensearch_endpoint=f"http://{url['host']}:{url['port']}",
        embedding_provider="bedrock",
        embedding_dimension=DIM,
    )
    search = compose("search", factory=AwsAdapterFactory(settings))
    try:
        with pytest.raises(NotFoundError):
            search.index.count("acme")
        assert client.cat.indices(format="json") == []
        ensure_search_index(client, ALIAS, dimension=DIM)
        assert search.index.count("acme") == 0
        assert search.adapters.built == ("index",)
    finally:
        search.close()
