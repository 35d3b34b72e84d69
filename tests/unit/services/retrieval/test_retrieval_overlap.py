"""Hybrid find embeds the query in another thread while the index scores the keyword side;
the outcome must be what a sequential search gives, failures included."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidFilter
from skald.domain.paths.uri import parse_uri
from skald.services.retrieval.results import Found
from skald.services.retrieval.service import FindRequest
from tests.support.compose import local_services

ME = Identity("acme", "ann", "user")


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Composition]:
    c = local_services(Settings(backend="local", data_dir=tmp_path / "data"))
    for i, text in enumerate(
        ["Kyoto temples in autumn", "Oslo harbour ferries", "Lisbon trams and hills"]
    ):
        uri = parse_uri(f"viking://resources/travel/t{i}.md", user_id="ann")
        _, change = c.fs.write(ME, uri, f"# Trip {i}\n\n{text}.\n".encode(), "replace")
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


def uris(result: Found) -> list[str]:
    return [h.uri for h in result.resources]


def test_background_embedding_ranks_as_a_sequential_search(container: Composition) -> None:
    req = FindRequest(query="temples in Kyoto", target_uri=["viking://resources/travel"], level=[2])
    overlapped = container.retrieval.find(ME, req)
    # The same search with the vector computed first, through the index port directly.
    vector = container.embedder.embed(["temples in Kyoto"])[0]
    from skald.ports import IndexFilter, IndexQuery

    hits = container.index.search(
        IndexQuery(
            "acme",
            "hybrid",
            20,
            vector=vector,
            text="temples Kyoto",
            filter=IndexFilter(scopes=["viking://resources/travel"], levels=[2]),
        )
    )
    assert uris(overlapped)[0] == "viking://resources/travel/t0.md"
    assert uris(overlapped) == [h.record.uri for h in hits][: len(uris(overlapped))]


class BrokenEmbedder:
    dimension = 384
    model_id = "broken"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise ValueError("embedding endpoint answered 500")


def test_an_embedder_failure_is_not_reported_as_a_bad_filter(container: Composition) -> None:
    container.retrieval.embedder = BrokenEmbedder()
    req = FindRequest(query="temples", target_uri=["viking://resources/travel"])
    with pytest.raises(ValueError, match="embedding endpoint") as info:
        container.retrieval.find(ME, req)
    assert not isinstance(info.value, InvalidFilter)


class CountingEmbedder:
    """Delegates to the real model and counts the texts it was asked to embed."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.dimension = 384
        self.model_id = "counting"
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return self.inner.embed(texts)  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize("search_type", ["hybrid", "semantic"])
def test_an_early_embedding_is_used_once_and_ranks_as_a_late_one(
    container: Composition, search_type: str
) -> None:
    req = FindRequest(
        query="temples in Kyoto", target_uri=["viking://resources/travel"], search_type=search_type
    )
    late = container.retrieval.find(ME, req)
    counting = CountingEmbedder(container.embedder)
    container.retrieval.embedder = counting
    pending = container.retrieval.embed_query_early(req)
    assert pending is not None
    early = container.retrieval.find(ME, req, pending=pending)
    assert counting.texts == ["temples in Kyoto"]  # the find did not embed it again
    assert uris(early) == uris(late)
    assert uris(early)[0] == "viking://resources/travel/t0.md"


@pytest.mark.parametrize(
    "req",
    [
        FindRequest(query="temples", search_type="keywords"),
        FindRequest(query="   "),
        FindRequest(query="   ", search_type="semantic"),
    ],
)
def test_no_early_embedding_when_the_request_will_not_use_it(
    container: Composition, req: FindRequest
) -> None:
    counting = CountingEmbedder(container.embedder)
    container.retrieval.embedder = counting
    assert container.retrieval.embed_query_early(req) is None
    assert counting.texts == []


def test_an_early_embedding_failure_surfaces_as_itself(container: Composition) -> None:
    container.retrieval.embedder = BrokenEmbedder()
    req = FindRequest(query="temples", target_uri=["viking://resources/travel"])
    pending = container.retrieval.embed_query_early(req)
    with pytest.raises(ValueError, match="embedding endpoint") as info:
        container.retrieval.find(ME, req, pending=pending)
    assert not isinstance(info.value, InvalidFilter)


def test_no_early_embedding_when_a_session_may_rewrite_the_query(container: Composition) -> None:
    container.retrieval.llm = object()  # type: ignore[assignment]
    container.retrieval.recent_messages = lambda identity, session, n: ["hello"]
    assert (
        container.retrieval.embed_query_early(FindRequest(query="temples", session_id="s1")) is None
    )
    assert container.retrieval.embed_query_early(FindRequest(query="temples")) is not None
