"""OpenSearch contract: every request body the OpenSearch adapter sends (index creation and
mappings, _bulk actions and documents, _search with knn, hybrid, bool and every filter kind,
_count, _delete_by_query, the search pipeline, _msearch) validates against OpenSearch's own
API specification (opensearch-project's opensearch-api-specification): the folder
SKALD_OPENSEARCH_API_SPEC names, else a read-only copy CI lays out next to the clone
(opensearch_spec.DEFAULT_SPEC). Requests are captured at the transport while every public
adapter method runs against osmem-server (see opensearch_capture.py)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.contract.opensearch_spec import SPEC_ENV, OpenSearchSpec, spec_root
from tests.support.tenancy import StoreRequest, caller, violations

pytestmark = pytest.mark.contract

osmem_server = pytest.importorskip("osmem_server")

from tests.contract.opensearch_capture import ACCOUNT, Captured, drive_adapter  # noqa: E402


@pytest.fixture(scope="module")
def spec() -> OpenSearchSpec:
    root = spec_root()
    if root is None:
        pytest.skip(
            f"the OpenSearch API specification is not beside the repository "
            f"(../shared/vendor/opensearch-api-spec); set {SPEC_ENV} to its folder"
        )
    return OpenSearchSpec(root)


@pytest.fixture(scope="module")
def captured() -> Iterator[list[Captured]]:
    server = osmem_server.OsmemServer.start(japanese=False)
    try:
        yield drive_adapter(server.url)
    finally:
        server.close()


def test_every_request_matches_the_specification(
    spec: OpenSearchSpec, captured: list[Captured]
) -> None:
    problems = [
        f"[{c.label}] {error}"
        for c in captured
        for error in spec.validate(c.method, c.path, c.params, c.body)
    ]
    assert problems == []


def _operations(spec: OpenSearchSpec, captured: list[Captured]) -> set[str]:
    ops = set()
    for c in captured:
        found = spec.operation(c.method, c.path)
        assert found is not None, (c.method, c.path)
        ops.add(str(found[0].body.get("x-operation-group")))
    return ops


def test_the_capture_covers_every_kind_of_request(
    spec: OpenSearchSpec, captured: list[Captured]
) -> None:
    assert _operations(spec, captured) >= {
        "indices.create",
        "indices.get_mapping",
        "indices.refresh",
        "indices.delete",
        "search_pipeline.put",
        "bulk",
        "search",
        "msearch",
        "count",
        "delete_by_query",
    }
    bodies = [c.body for c in captured if isinstance(c.body, dict)]
    queries = {key for b in bodies for key in _query_kinds(b.get("query"))}
    assert queries >= {
        "knn",
        "hybrid",
        "bool",
        "match",
        "term",
        "terms",
        "range",
        "prefix",
        "match_none",
        "ids",
    }
    pipelined = [c for c in captured if c.params.get("search_pipeline")]
    assert pipelined and all("hybrid" in c.body["query"] for c in pipelined)
    assert any(
        c.path == "/_bulk" and '"delete"' in c.body for c in captured if isinstance(c.body, str)
    )  # serverless deletes by id


def test_the_validator_rejects_wrong_bodies(spec: OpenSearchSpec, captured: list[Captured]) -> None:
    knn = next(c for c in captured if isinstance(c.body, dict) and "knn" in c.body.get("query", {}))
    assert spec.validate(knn.method, knn.path, knn.params, knn.body) == []

    def broken(change: Any) -> list[str]:
        body = copy.deepcopy(knn.body)
        change(body)
        return spec.validate(knn.method, knn.path, knn.params, body)

    def k_as_text(body: dict[str, Any]) -> None:
        body["query"]["knn"]["vector"]["k"] = str(body["query"]["knn"]["vector"]["k"])

    def misspelt_query(body: dict[str, Any]) -> None:
        body["query"] = {"knnn": body["query"]["knn"]}

    def size_as_list(body: dict[str, Any]) -> None:
        body["size"] = [body["size"]]

    def misspelt_bool_key(body: dict[str, Any]) -> None:
        inner = body["query"]["knn"]["vector"]["filter"]["bool"]
        inner["filters"] = inner.pop("filter")

    assert any("is not of type 'integer'" in e for e in broken(k_as_text))
    assert any("'knnn' was unexpected" in e for e in broken(misspelt_query))
    assert broken(size_as_list)
    assert any("'filters' is not one of" in e for e in broken(misspelt_bool_key))
    assert spec.validate("POST", "/skald-records/_search", {"refresh": "true"}, {}) != []
    assert spec.validate("POST", "/_bulk", None, '{"index": {"_index": 5}}\n{}\n') != []
    assert spec.validate("PUT", "/_no_such_api/x", None, {}) != []


def _query_kinds(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _query_kinds(value)
    elif isinstance(node, list):
        for value in node:
            yield from _query_kinds(value)


def test_every_request_names_the_account_of_its_call(captured: list[Captured]) -> None:
    """The tenant-scoping rule (tests/support/tenancy.py) over every request of the drive,
    whose calls are all for one account: each names exactly that account (k-NN, hybrid and
    the serverless paths included, which only this capture reaches), or is index setup. A
    serverless delete by id is judged by the ids the searches before it answered."""
    requests = [
        StoreRequest(
            "opensearch",
            c.method,
            {"path": c.path, "body": c.body},
            caller(ACCOUNT),
            answer=c.answer,
            where=c.label,
        )
        for c in captured
    ]
    assert violations(requests) == []
    # The same requests on behalf of another account: every one of them that reads or
    # writes records is reported.
    moved = [replace(r, accounts=caller("someone-else")) for r in requests]
    flagged = {line.split("] ", 1)[0] for line in violations(moved)}
    data = {
        f"[{r.where}"
        for r in requests
        if r.params["path"].rsplit("/", 1)[-1]
        in ("_search", "_msearch", "_count", "_bulk", "_delete_by_query")
    }
    assert data and flagged == data
