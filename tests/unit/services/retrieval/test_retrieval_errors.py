"""Whose mistake a failed search is: a filter no index can apply is the caller's (400
INVALID_FILTER); an embedding model whose vectors are not the index's size is the server's
(503 UNAVAILABLE, saying what disagrees), not a bad filter. Through the real app."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from skald.api.app import create_app
from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.paths.uri import parse_uri
from tests.support.compose import local_services

ANN = Identity("acme", "ann", "user")
HEADERS = {"X-OpenViking-Account": "acme", "X-OpenViking-User": "ann"}


class OtherModel:
    """An embedding model of another vector size than the index was built with (the index
    made with the bundled model, the server then configured with another)."""

    dimension = 8
    model_id = "other-model"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * 7 for _ in texts]


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Composition]:
    c = local_services(Settings(backend="local", data_dir=tmp_path / "data"))
    uri = parse_uri("viking://resources/travel/kyoto.md", user_id="ann")
    c.fs.ensure_preset(ANN)
    _, change = c.fs.write(ANN, uri, b"# Kyoto\n\nTemples in autumn.\n", "replace")
    c.semantic.process(
        {
            "account": "acme",
            "user": "ann",
            "role": "user",
            "written": change.written,
            "removed": [],
            "dirs": change.dirs,
        }
    )
    yield c
    c.close()


@pytest.mark.parametrize("search_type", ["semantic", "hybrid"])
def test_a_vector_of_another_size_is_a_503_that_says_so(
    services: Composition, search_type: str
) -> None:
    services.retrieval.embedder = OtherModel()
    with TestClient(create_app(services), base_url="http://127.0.0.1") as http:
        resp = http.post(
            "/api/v1/search/find",
            headers=HEADERS,
            json={"query": "temples", "search_type": search_type},
        )
    assert resp.status_code == 503, resp.text
    error = resp.json()["error"]
    assert error["code"] == "UNAVAILABLE"
    assert "vector size" in error["message"] and "8 dimensions" in error["message"]
    assert error["details"]["service"] == "search index"


def test_a_filter_no_index_can_apply_stays_a_400(services: Composition) -> None:
    with TestClient(create_app(services), base_url="http://127.0.0.1") as http:
        for flt in ({"op": "nope"}, {"op": "must", "field": "level", "conds": [2**40]}):
            resp = http.post(
                "/api/v1/search/find", headers=HEADERS, json={"query": "temples", "filter": flt}
            )
            assert resp.status_code == 400, resp.text
            assert resp.json()["error"]["code"] == "INVALID_FILTER"
        ok = http.post("/api/v1/search/find", headers=HEADERS, json={"query": "temples"})
    assert ok.status_code == 200
    assert [h["uri"] for h in ok.json()["result"]["resources"]][:1] == [
        "viking://resources/travel/kyoto.md"
    ]
