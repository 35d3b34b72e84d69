"""OpenSearchIndex request builders (golden JSON), its client-side logic (a fake client) and
the one thing osmem-server answers for k-NN: HTTP 400, surfaced as IndexUnsupported.

Golden files live in tests/golden/opensearch/. After an intended change, regenerate them with
`SKALD_UPDATE_GOLDEN=1 pytest tests/unit/adapters/aws/opensearch/test_opensearch_requests.py` and
review the diff.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opensearchpy import OpenSearch, RequestsAWSV4SignerAuth, RequestsHttpConnection
from opensearchpy.exceptions import RequestError
from osmem_server import OsmemServer

from skald.adapters.aws.opensearch.index import (
    RRF_K,
    OpenSearchIndex,
    OpenSearchIndexError,
    bm25_query,
    build_client,
    bulk_body,
    cosine_from_score,
    delete_prefix_query,
    delete_uris_query,
    filter_clauses,
    hybrid_msearch_body,
    hybrid_pipeline_body,
    hybrid_query,
    index_template_body,
    knn_query,
    lexical_from_bm25,
    older_versions_query,
    record_id,
    stale_sections_query,
    to_millis,
    unit_vector,
)
from skald.ports import IndexFilter, IndexQuery, IndexRecord, IndexUnsupported

GOLDEN_DIR = Path(__file__).resolve().parents[4] / "golden" / "opensearch"
T0 = 1_700_000_000.0
V = [1.0, 0.0, 0.0]


def assert_golden(name: str, value: Any) -> None:
    path = GOLDEN_DIR / f"{name}.json"
    text = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("SKALD_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing: run with SKALD_UPDATE_GOLDEN=1 and review it"
    assert json.loads(text) == json.loads(path.read_text(encoding="utf-8")), (
        f"{name} differs from {path}; if intended, regenerate with SKALD_UPDATE_GOLDEN=1"
    )


# --------------------------------------------------------------------------------------------
# Golden: index, pipeline, filters, queries, writes.


def test_index_template_golden() -> None:
    assert_golden("index_template", index_template_body(dimension=384))
    assert_golden(
        "index_template_lucene_cosine",
        index_template_body(
            dimension=1024,
            engine="lucene",
            space_type="cosinesimil",
            m=32,
            ef_construction=256,
            ef_search=200,
        ),
    )
    with pytest.raises(ValueError):
        index_template_body(dimension=3, space_type="hamming")
    with pytest.raises(ValueError):
        index_template_body(dimension=3, engine="annoy")


def test_hybrid_pipeline_golden() -> None:
    assert_golden("hybrid_pipeline_rrf", hybrid_pipeline_body())
    assert_golden("hybrid_pipeline_min_max", hybrid_pipeline_body("min_max"))
    with pytest.raises(ValueError):
        hybrid_pipeline_body("harmonic")


TREE: dict[str, Any] = {
    "op": "and",
    "conds": [
        {"op": "must", "field": "context_type", "conds": ["memory"]},
        {"op": "must_not", "field": "owner", "conds": ["bob"]},
        {
            "op": "or",
            "conds": [
                {"op": "must", "field": "tags", "conds": ["lang=en", "kind=code"]},
                {"op": "must", "field": "level", "conds": [1, 2.5]},
                {"op": "must", "field": "uri", "conds": "viking://resources/proj/"},
                {"op": "must", "field": "created_at", "conds": [T0, T0 + 0.5]},
            ],
        },
        {"op": "range", "field": "updated_at", "gt": T0, "lte": T0 + 100},
        {"op": "range", "field": "level", "lt": 2},
        {"op": "prefix", "field": "uri", "prefix": "viking://resources/proj/src/"},
        {"op": "prefix", "field": "tags", "prefix": "kind="},
    ],
}

FILTERS: dict[str, IndexFilter] = {
    "account_only": IndexFilter(),
    "scopes": IndexFilter(scopes=["viking://resources/proj/", "viking://user/bob"]),
    "scope_root": IndexFilter(scopes=["viking://", "viking://resources/x"]),
    "exclude_scopes": IndexFilter(
        scopes=["viking://resources"], exclude_scopes=["viking://resources/proj/src"]
    ),
    "exclude_root": IndexFilter(exclude_scopes=["viking://"]),
    "context_types": IndexFilter(context_types=["memory", "skill"]),
    "context_types_empty": IndexFilter(context_types=[]),
    "levels": IndexFilter(levels=[0, 1]),
    "tags_all": IndexFilter(tags_all=["lang=py", "kind=code"]),
    "time_updated": IndexFilter(since=T0 + 50, until=T0 + 100),
    "time_created_since": IndexFilter(time_field="created_at", since=T0 + 0.25),
    "tree": IndexFilter(tree=TREE),
    "everything": IndexFilter(
        scopes=["viking://user/alice"],
        context_types=["memory"],
        levels=[2],
        tags_all=["lang=en"],
        until=T0,
        tree={"op": "must", "field": "memory_type", "conds": ["preferences"]},
    ),
}


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filter_clauses_golden(name: str) -> None:
    clauses = filter_clauses("acme", FILTERS[name])
    assert clauses[0] == {"term": {"account": "acme"}}  # always, always first
    assert_golden(f"filter_{name}", clauses)


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_knn_query_golden(name: str) -> None:
    body = knn_query(V, 60, filter_clauses("acme", FILTERS[name]))
    # Efficient filtering: the filter is inside the knn clause, nothing filters after it.
    assert set(body["query"]) == {"knn"} and "post_filter" not in body
    assert_golden(f"knn_{name}", body)


def test_bm25_query_golden() -> None:
    flt = filter_clauses("acme", FILTERS["everything"])
    assert_golden("bm25", bm25_query("Authentication tokens", flt, 20))
    assert_golden("bm25_with_vectors", bm25_query("a) OR (b", flt, 50, with_vectors=True))


def test_bm25_query_text_is_bounded() -> None:
    body = bm25_query(" ".join(f"w{i}" for i in range(1000)), [], 10)
    query = body["query"]["bool"]["should"][0]["match"]["text"]["query"]
    assert query.split() == [f"w{i}" for i in range(256)]


def test_hybrid_golden() -> None:
    flt = filter_clauses("acme", FILTERS["scopes"])
    assert_golden("hybrid_pipeline_query", hybrid_query("quantum entanglement", V, flt, 50, 50))
    assert_golden(
        "hybrid_client_msearch",
        hybrid_msearch_body("skald-records", "quantum entanglement", V, flt, 50, k=60),
    )


def _record(uri: str, **kw: Any) -> IndexRecord:
    fields: dict[str, Any] = {
        "account": "acme",
        "uri": uri,
        "level": 2,
        "context_type": "resource",
        "parent": uri.rsplit("/", 1)[0],
        "ancestors": ["viking://resources", "viking://resources/docs"],
        "text": "alpha beta",
        "abstract": "about it",
        "created_at": T0,
        "updated_at": T0 + 0.5,
    }
    fields.update(kw)
    return IndexRecord(**fields)


BULK_RECORDS = [
    _record(
        "viking://resources/docs/a.md",
        vector=[3.0, 4.0, 0.0],
        section=1,
        line_start=3,
        line_end=9,
        tags=["lang=en"],
        memory_type="preferences",
        owner="alice",
        peer="bob",
    ),
    _record(
        "viking://resources/docs/b.md/",
        vector=[0.0, 0.0, 0.0],
        level=1,
        parent="viking://resources/docs/",
        ancestors=["viking://resources/", "viking://resources/docs/"],
    ),
    _record("viking://resources/docs/c.md", vector=None, text="lexical only"),
]


def test_bulk_body_golden() -> None:
    body = bulk_body("skald-records", BULK_RECORDS, dimension=3, stamp=1_700_000_000_000_000)
    assert_golden("bulk_body", body)
    # The vector is scaled to unit length; a zero vector is dropped, like a missing one.
    assert body[1]["vector"] == [0.6, 0.8, 0.0]
    assert "vector" not in body[3] and "vector" not in body[5]
    assert body[0]["index"]["_id"] == record_id("acme", "viking://resources/docs/a.md", 2, 1)
    serverless = bulk_body(
        "skald-records", BULK_RECORDS, dimension=3, stamp=1_700_000_000_000_000, serverless=True
    )
    assert_golden("bulk_body_serverless", serverless)
    assert all("_id" not in line["index"] for line in serverless[::2])


def test_bulk_body_rejects_bad_records() -> None:
    with pytest.raises(ValueError, match="dimensions"):
        bulk_body("i", [_record("viking://r/a.md", vector=[1.0, 0.0])], dimension=3, stamp=1)
    with pytest.raises(ValueError, match="finite"):
        bulk_body(
            "i", [_record("viking://r/a.md", vector=[math.inf, 0.0, 0.0])], dimension=3, stamp=1
        )
    with pytest.raises(ValueError, match="required"):
        bulk_body("i", [_record("")], dimension=3, stamp=1)


def test_delete_queries_golden() -> None:
    assert_golden(
        "delete_uris",
        delete_uris_query(
            "acme", ["viking://resources/docs/a.md", "viking://resources/docs/b.md/"]
        ),
    )
    assert_golden("delete_prefix", delete_prefix_query("acme", "viking://resources/proj/"))
    # A scheme root is every record of the account, and only of the account.
    assert delete_prefix_query("acme", "viking://") == {
        "query": {"bool": {"filter": [{"term": {"account": "acme"}}]}}
    }
    assert_golden(
        "stale_sections",
        stale_sections_query("acme", ["viking://resources/docs/long.md"], 2, ["id-1", "id-2"]),
    )
    assert_golden(
        "stale_sections_all",
        stale_sections_query("acme", ["viking://resources/docs/long.md"], 2, []),
    )
    # Several files at once (a batch of semantic jobs): one query, URIs normalised and sorted.
    assert_golden(
        "stale_sections_many",
        stale_sections_query(
            "acme", ["viking://resources/docs/b.md", "viking://resources/docs/a.md/"], 2, ["id-1"]
        ),
    )
    assert_golden("older_versions", older_versions_query(["id-1", "id-2"], 1_700_000_000_000_000))


# --------------------------------------------------------------------------------------------
# Pure helpers.


@pytest.mark.parametrize(
    "bad",
    [
        {"op": "xor", "conds": []},
        {"op": "must", "field": "colour", "conds": ["red"]},
        {"op": "range", "field": "updated_at", "around": 5},
        {"op": "range", "field": "uri", "gte": 1},
        {"op": "prefix", "field": "level", "prefix": "1"},
        {"op": "must", "field": "level", "conds": ["high"]},
        {"op": "must", "field": "uri", "conds": [3]},
        {"op": "must", "field": "level", "conds": [True]},
        {"op": "must", "field": "uri", "conds": []},
        {"op": "prefix", "field": "uri", "prefix": 3},
        {"op": "must", "field": "uri", "conds": ["x"], "extra": 1},
        {"op": "and", "conds": [{"op": "nope"}]},
        {"op": "and", "conds": []},
        {"field": "uri"},
        ["not", "an", "object"],
    ],
)
def test_malformed_filters_raise_value_error(bad: Any) -> None:
    with pytest.raises(ValueError):
        filter_clauses("acme", IndexFilter(tree=bad))


def test_deep_filter_trees_are_refused() -> None:
    node: dict[str, Any] = {"op": "must", "field": "uri", "conds": ["viking://a"]}
    for _ in range(40):
        node = {"op": "and", "conds": [node]}
    with pytest.raises(ValueError, match="deeper"):
        filter_clauses("acme", IndexFilter(tree=node))
    with pytest.raises(ValueError, match="time_field"):
        filter_clauses("acme", IndexFilter(time_field="deleted_at"))


def _faiss_innerproduct_score(ip: float) -> float:
    """OpenSearch's documented score for faiss innerproduct (d = -ip)."""
    d = -ip
    return 1.0 / (1.0 + d) if d >= 0 else -d + 1.0


def test_innerproduct_scores_map_back_to_the_cosine() -> None:
    for ip in (-0.99, -0.5, -0.3, 0.0, 0.2, 0.5, 0.95, 1.0):
        assert cosine_from_score(_faiss_innerproduct_score(ip), "innerproduct") == pytest.approx(
            ip, abs=1e-12
        )
    assert cosine_from_score((1 + 0.3) / 2, "cosinesimil") == pytest.approx(0.3)
    assert cosine_from_score(1 / (1 + (2 - 2 * 0.3)), "l2") == pytest.approx(0.3)
    assert lexical_from_bm25(3.0) == 0.75


def test_small_helpers() -> None:
    assert to_millis(T0) == 1_700_000_000_000 and isinstance(to_millis(T0), int)
    assert to_millis(T0 + 0.0005) == pytest.approx(1_700_000_000_000.5)
    a = record_id("acme", "viking://r/a.md", 2, 0)
    assert a == record_id("acme", "viking://r/a.md/", 2, 0)  # normalised URI
    assert (
        len(
            {
                a,
                record_id("other", "viking://r/a.md", 2, 0),
                record_id("acme", "viking://r/a.md", 1, 0),
                record_id("acme", "viking://r/a.md", 2, 1),
            }
        )
        == 4
    )
    assert unit_vector([0.0, 0.0], 2, "q") is None
    assert unit_vector([0.0, 2.0], 2, "q") == [0.0, 1.0]


def test_build_client_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = build_client("http://localhost:9200")
    assert plain.transport.hosts[0]["host"] == "localhost"
    basic = build_client("search.example.com", auth="basic", username="u", password="p")
    conn = basic.transport.connection_pool.connection
    assert conn.use_ssl and conn.headers["authorization"].startswith("Basic ")
    with pytest.raises(ValueError):
        build_client("https://x", auth="basic")
    with pytest.raises(ValueError):
        build_client("https://x", auth="kerberos")  # type: ignore[arg-type]
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    for auth, host, service, region in (
        ("sigv4-es", "search-dev-abc.eu-west-1.es.amazonaws.com", "es", "eu-west-1"),
        ("sigv4-aoss", "abc123.us-east-2.aoss.amazonaws.com", "aoss", "us-east-2"),
    ):
        client = build_client(host, auth=auth)  # type: ignore[arg-type]
        conn = client.transport.connection_pool.connection
        assert isinstance(conn, RequestsHttpConnection)
        signer = conn.session.auth
        assert isinstance(signer, RequestsAWSV4SignerAuth)
        assert (signer.service, signer.signer.region) == (service, region)
    with pytest.raises(ValueError, match="region"):
        build_client("https://vpc-domain.internal", auth="sigv4-es")
    assert build_client("https://vpc-domain.internal", auth="sigv4-es", region="ap-south-1")


# --------------------------------------------------------------------------------------------
# Client-side logic against a scripted fake client: k-NN ranking and hybrid fusion cannot run
# on osmem-server, and retries need failures on demand.


class _Indices:
    def __init__(self, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self._calls = calls

    def refresh(self, **kw: Any) -> dict[str, Any]:
        self._calls.append(("refresh", kw))
        return {}


class FakeClient:
    """Records calls; `handler(method, kwargs)` answers them."""

    def __init__(self, handler: Callable[[str, dict[str, Any]], Any]) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.indices = _Indices(self.calls)
        self._handler = handler

    def _call(self, method: str, kw: dict[str, Any]) -> Any:
        self.calls.append((method, kw))
        return self._handler(method, kw)

    def search(self, **kw: Any) -> Any:
        return self._call("search", kw)

    def msearch(self, **kw: Any) -> Any:
        return self._call("msearch", kw)

    def bulk(self, **kw: Any) -> Any:
        return self._call("bulk", kw)

    def delete_by_query(self, **kw: Any) -> Any:
        return self._call("delete_by_query", kw)

    def close(self) -> None:
        pass


def _src(uri: str, *, section: int = 0, vector: list[float] | None = None) -> dict[str, Any]:
    src: dict[str, Any] = {
        "record_id": record_id("acme", uri, 2, section),
        "account": "acme",
        "uri": uri,
        "level": 2,
        "section": section,
        "context_type": "resource",
        "parent": "viking://r",
        "ancestors": ["viking://r"],
        "text": "t",
        "abstract": "",
        "tags": [],
        "created_at": 1_700_000_000_000,
        "updated_at": 1_700_000_000_000,
        "written_at": 1,
    }
    if vector is not None:
        src["vector"] = vector
    return src


def _hits(*pairs: tuple[dict[str, Any], float]) -> dict[str, Any]:
    return {
        "hits": {
            "hits": [{"_id": s["record_id"], "_score": score, "_source": s} for s, score in pairs]
        }
    }


def _index(client: FakeClient, **kw: Any) -> OpenSearchIndex:
    return OpenSearchIndex(client, "skald-records", dimension=3, **kw)  # type: ignore[arg-type]


def _ip(cos: float) -> float:
    return _faiss_innerproduct_score(cos)


def test_dense_scores_are_cosines_and_ties_are_fetched_until_resolved() -> None:
    tied = [_src(f"viking://r/{name}.md") for name in "zyxwvutsrqponmlkjihgfedcba"]

    def handler(method: str, kw: dict[str, Any]) -> Any:
        k = kw["body"]["query"]["knn"]["vector"]["k"]
        # Every record ties at cosine 0.7; the engine returns *some* k of them, worst order.
        return _hits(*[(s, _ip(0.7)) for s in tied[:k]])

    client = FakeClient(handler)
    hits = _index(client).search(IndexQuery(account="acme", mode="dense", limit=3, vector=V))
    assert [h.record.uri for h in hits] == [f"viking://r/{c}.md" for c in "abc"]
    assert [h.score for h in hits] == pytest.approx([0.7] * 3)
    assert all(h.dense_score == h.score and h.lexical_score is None for h in hits)
    ks = [kw["body"]["query"]["knn"]["vector"]["k"] for _, kw in client.calls]
    assert ks == [13, 26, 52]  # limit + margin, doubled while the tie reached the end


def test_client_side_hybrid_is_normalised_rrf_with_both_partial_scores() -> None:
    both, dense_only = _src("viking://r/both.md"), _src("viking://r/dense.md")
    lex_only = _src("viking://r/lex.md", vector=[0.0, 1.0, 0.0])  # cosine 0 with V
    novec = _src("viking://r/novec.md")

    def handler(method: str, kw: dict[str, Any]) -> Any:
        assert method == "msearch"
        body = kw["body"]
        assert body[1]["query"]["knn"]["vector"]["k"] == 60 and body[3]["size"] == 50
        return {
            "responses": [
                _hits((both, _ip(0.9)), (dense_only, _ip(0.8))),
                _hits((lex_only, 3.0), (both, 1.0), (novec, 0.5)),
            ]
        }

    client = FakeClient(handler)
    hits = _index(client).search(
        IndexQuery(account="acme", mode="hybrid", limit=10, vector=V, text="quantum")
    )
    by_uri = {h.record.uri: h for h in hits}
    assert [h.record.uri for h in hits][0] == "viking://r/both.md"
    best = 2.0 / (RRF_K + 1)
    assert by_uri["viking://r/both.md"].score == pytest.approx(
        (1 / (RRF_K + 1) + 1 / (RRF_K + 2)) / best
    )
    assert by_uri["viking://r/both.md"].dense_score == pytest.approx(0.9)
    assert by_uri["viking://r/both.md"].lexical_score == pytest.approx(0.5)
    assert by_uri["viking://r/lex.md"].dense_score == pytest.approx(0.0)  # from its vector
    assert by_uri["viking://r/lex.md"].lexical_score == pytest.approx(0.75)
    assert by_uri["viking://r/novec.md"].dense_score is None
    assert by_uri["viking://r/dense.md"].lexical_score is None
    assert all(h.record.vector is None for h in hits)
    assert [h.record.uri for h in hits] == [
        "viking://r/both.md",
        "viking://r/lex.md",
        "viking://r/dense.md",
        "viking://r/novec.md",
    ]


def test_client_side_hybrid_ranks_files_among_files_only() -> None:
    summary = {
        **_src("viking://r/.overview.md"),
        "level": 1,
        "record_id": record_id("acme", "viking://r/.overview.md", 1, 0),
    }
    first, second = _src("viking://r/a.md"), _src("viking://r/b.md")

    def handler(method: str, kw: dict[str, Any]) -> Any:
        return {
            "responses": [
                _hits((summary, _ip(0.9)), (first, _ip(0.8)), (second, _ip(0.7))),
                _hits((summary, 2.0), (second, 1.0), (first, 0.5)),
            ]
        }

    hits = _index(FakeClient(handler)).search(
        IndexQuery(account="acme", mode="hybrid", limit=10, vector=V, text="q")
    )
    by_uri = {h.record.uri: h.score for h in hits}
    best = 2.0 / (RRF_K + 1)
    # The summary above them costs neither file a rank in either list.
    assert by_uri["viking://r/a.md"] == pytest.approx((1 / (RRF_K + 1) + 1 / (RRF_K + 2)) / best)
    assert by_uri["viking://r/b.md"] == pytest.approx(by_uri["viking://r/a.md"])
    assert by_uri["viking://r/.overview.md"] == pytest.approx(1.0)


def test_a_k_nn_rejection_becomes_index_unsupported() -> None:
    reason = "[knn] query is not supported by osmem"

    def handler(method: str, kw: dict[str, Any]) -> Any:
        return {
            "responses": [
                {
                    "status": 400,
                    "error": {"type": "unsupported_operation_exception", "reason": reason},
                },
                _hits(),
            ]
        }

    with pytest.raises(IndexUnsupported, match="k-NN"):
        _index(FakeClient(handler)).search(
            IndexQuery(account="acme", mode="hybrid", limit=5, vector=V, text="x")
        )


def test_pipeline_hybrid_rescales_rrf_and_asks_bm25_for_the_lexical_part() -> None:
    a = _src("viking://r/a.md", vector=[0.6, 0.8, 0.0])
    b = _src("viking://r/b.md", vector=[0.0, 0.0, 1.0])

    def handler(method: str, kw: dict[str, Any]) -> Any:
        body = kw["body"]
        if "hybrid" in body["query"]:
            assert kw["search_pipeline"] == "skald-hybrid"
            return _hits((a, 2 / (RRF_K + 1)), (b, 1 / (RRF_K + 1)))
        ids = body["query"]["bool"]["filter"][-1]["terms"]["record_id"]
        assert ids == [a["record_id"], b["record_id"]]
        return _hits((b, 1.0))

    client = FakeClient(handler)
    hits = _index(client, hybrid_pipeline="skald-hybrid").search(
        IndexQuery(account="acme", mode="hybrid", limit=5, vector=V, text="x")
    )
    assert [h.record.uri for h in hits] == ["viking://r/a.md", "viking://r/b.md"]
    assert [h.score for h in hits] == pytest.approx([1.0, 0.5])
    assert [h.dense_score for h in hits] == [pytest.approx(0.6), pytest.approx(0.0)]
    assert [h.lexical_score for h in hits] == [None, pytest.approx(0.5)]


def test_delete_by_query_refreshes_first_and_retries_version_conflicts() -> None:
    answers = iter(
        [
            {"deleted": 2, "version_conflicts": 1, "failures": []},
            {"deleted": 1, "version_conflicts": 0, "failures": []},
        ]
    )
    client = FakeClient(lambda method, kw: next(answers))
    assert _index(client).delete_uris("acme", ["viking://r/a.md"]) == 3
    assert [m for m, _ in client.calls] == [
        "refresh",
        "delete_by_query",
        "refresh",
        "delete_by_query",
    ]
    dbq = client.calls[1][1]
    # Read your deletes: refreshed after the delete too, whatever the refresh policy.
    assert dbq["conflicts"] == "proceed" and dbq["refresh"] is True
    assert dbq["body"] == delete_uris_query("acme", ["viking://r/a.md"])
    # With a refresh policy every write is already visible: no extra refresh.
    answers = iter([{"deleted": 1, "version_conflicts": 0, "failures": []}])
    client = FakeClient(lambda method, kw: next(answers))
    assert _index(client, refresh="wait_for").delete_prefix("acme", "viking://r") == 1
    assert [m for m, _ in client.calls] == ["delete_by_query"]
    assert client.calls[0][1]["refresh"] is True


def test_only_the_deletes_of_replace_many_follow_the_refresh_policy() -> None:
    """A rewritten record's leftover sections go at the policy's pace (no refresh per write);
    delete_uris and delete_prefix are seen by the next search (a removal answers after
    them)."""

    def handler(method: str, kw: dict[str, Any]) -> Any:
        if method == "bulk":
            return {"items": [{"index": {"status": 201}}]}
        return {"deleted": 0, "version_conflicts": 0, "failures": []}

    client = FakeClient(handler)
    rec = IndexRecord(
        account="acme",
        uri="viking://r/a.md",
        level=2,
        context_type="resource",
        parent="viking://r",
        ancestors=["viking://r"],
        text="t",
        vector=V,
    )
    _index(client).replace_many("acme", {("viking://r/a.md", 2): [rec]})
    assert [kw["refresh"] for m, kw in client.calls if m == "delete_by_query"] == [False]
    _index(client).delete_prefix("acme", "viking://r")
    assert [kw["refresh"] for m, kw in client.calls if m == "delete_by_query"] == [False, True]


def test_bulk_retries_throttled_items_and_reports_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("skald.adapters.aws.opensearch.writes.time.sleep", lambda s: None)
    sent: list[int] = []

    def handler(method: str, kw: dict[str, Any]) -> Any:
        lines = kw["body"].splitlines()
        sent.append(len(lines) // 2)
        statuses = [429, 201] if len(sent) == 1 else [201] * (len(lines) // 2)
        return {
            "errors": 429 in statuses,
            "items": [
                {"index": {"status": s, **({"error": {"type": "rejected"}} if s == 429 else {})}}
                for s in statuses
            ],
        }

    index = _index(FakeClient(handler), refresh=True)
    index.upsert([_record("viking://r/a.md", vector=V), _record("viking://r/b.md")])
    assert sent == [2, 1]  # only the throttled document went again

    def failing(method: str, kw: dict[str, Any]) -> Any:
        return {
            "errors": True,
            "items": [
                {
                    "index": {
                        "status": 400,
                        "error": {"type": "mapper_parsing_exception", "reason": "bad"},
                    }
                }
            ],
        }

    with pytest.raises(OpenSearchIndexError, match="mapper_parsing_exception"):
        _index(FakeClient(failing)).upsert([_record("viking://r/a.md")])


def test_serverless_writes_without_ids_then_drops_older_versions() -> None:
    old = {"_id": "gen-1", "sort": ["x", 1]}

    def handler(method: str, kw: dict[str, Any]) -> Any:
        if method == "bulk":
            lines = [json.loads(line) for line in kw["body"].splitlines()]
            if "delete" in lines[0]:
                return {"items": [{"delete": {"status": 200, "result": "deleted"}}]}
            return {"items": [{"index": {"status": 201}}] * (len(lines) // 2)}
        return {"hits": {"hits": [old]}}

    client = FakeClient(handler)
    index = _index(client, serverless=True)
    index.replace_sections(
        "acme",
        "viking://r/a.md",
        2,
        [_record("viking://r/a.md", section=1), _record("viking://r/a.md", section=2)],
    )
    methods = [m for m, _ in client.calls]
    assert methods == ["bulk", "search", "bulk"]
    first = [json.loads(line) for line in client.calls[0][1]["body"].splitlines()]
    assert all("_id" not in line["index"] for line in first[::2])
    assert "refresh" not in client.calls[0][1]
    stamp = first[1]["written_at"]
    scan = client.calls[1][1]["body"]
    assert scan["query"]["bool"]["filter"][-1] == {"range": {"written_at": {"lt": stamp}}}
    assert json.loads(client.calls[2][1]["body"]) == {
        "delete": {"_index": "skald-records", "_id": "gen-1"}
    }
    with pytest.raises(ValueError):
        _index(client, serverless=True, refresh="wait_for")


# --------------------------------------------------------------------------------------------
# osmem-server: it really answers k-NN with 400, and the adapter says so clearly.


@pytest.fixture(scope="module")
def osmem_url() -> Iterator[str]:
    server = OsmemServer.start(japanese=False)
    try:
        with server.clone() as clone:
            yield clone.url
    finally:
        server.close()


def test_osmem_rejects_k_nn_and_the_adapter_raises_index_unsupported(osmem_url: str) -> None:
    index = OpenSearchIndex(
        OpenSearch(hosts=[osmem_url]), "skald-knn-check", dimension=3, refresh=True
    )
    with index:
        assert index.ensure_index() is True
        assert index.ensure_index() is False  # idempotent
        index.upsert([_record("viking://resources/docs/a.md", vector=V, text="walrus")])
        raw = OpenSearch(hosts=[osmem_url])
        with pytest.raises(RequestError) as err:
            raw.search(index="skald-knn-check", body=knn_query(V, 5, []))
        assert err.value.status_code == 400
        for mode in ("dense", "hybrid"):
            with pytest.raises(IndexUnsupported) as unsupported:
                index.search(
                    IndexQuery(account="acme", mode=mode, limit=5, vector=V, text="walrus")
                )
            message = str(unsupported.value)
            assert "skald-knn-check" in message and "k-NN" in message
            assert "not supported by osmem" in message and "lexical search still works" in message
        hits = index.search(IndexQuery(account="acme", mode="lexical", limit=5, text="walrus"))
        assert [h.record.uri for h in hits] == ["viking://resources/docs/a.md"]
        # Another dimension on the same index is refused rather than silently mixed.
        other = OpenSearchIndex(OpenSearch(hosts=[osmem_url]), "skald-knn-check", dimension=4)
        with other, pytest.raises(ValueError, match="3-d vectors"):
            other.ensure_index()
        raw.close()
