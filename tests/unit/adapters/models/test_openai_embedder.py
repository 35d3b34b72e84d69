"""OpenAI-compatible embedder against a fake /embeddings endpoint (httpx.MockTransport)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import httpx
import pytest

from skald.adapters.models.openai_embedder import EmbeddingError, OpenAICompatibleEmbedder
from skald.ports import Embedder

DIM = 4
Handler = Callable[[httpx.Request], httpx.Response]


def fake_vector(text: str) -> list[float]:
    # Not normalised on purpose: the embedder must normalise.
    return [float(len(text)) + 1, 2.0, 0.0, float(text.count("a"))]


class FakeServer:
    """Answers like OpenAI, optionally failing the first `failures` calls with `status`."""

    def __init__(
        self,
        failures: int = 0,
        status: int = 503,
        headers: dict[str, str] | None = None,
        shuffle: bool = False,
    ) -> None:
        self.failures = failures
        self.status = status
        self.headers = headers or {}
        self.shuffle = shuffle
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.failures > 0:
            self.failures -= 1
            return httpx.Response(self.status, headers=self.headers, json={"error": "busy"})
        body = json.loads(request.content)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(t)}
            for i, t in enumerate(body["input"])
        ]
        if self.shuffle:
            data.reverse()
        return httpx.Response(200, json={"object": "list", "data": data, "model": body["model"]})


def make(server: Handler, **kw: object) -> tuple[OpenAICompatibleEmbedder, list[float]]:
    sleeps: list[float] = []
    e = OpenAICompatibleEmbedder(
        "http://fake/v1/",
        "text-embedding-x",
        "sk-test",
        dimension=DIM,
        transport=httpx.MockTransport(server),
        sleep=sleeps.append,
        **kw,  # type: ignore[arg-type]
    )
    return e, sleeps


def test_embeds_in_batches_in_order_normalised() -> None:
    server = FakeServer(shuffle=True)
    e, _ = make(server, batch_size=2)
    assert isinstance(e, Embedder)
    assert e.dimension == DIM and e.model_id == "text-embedding-x"
    texts = ["a", "banana", "", "cc", "aaaa"]
    vectors = e.embed(texts)
    assert len(server.requests) == 3
    req = server.requests[0]
    assert str(req.url) == "http://fake/v1/embeddings"
    assert req.headers["authorization"] == "Bearer sk-test"
    assert json.loads(req.content) == {"model": "text-embedding-x", "input": ["a", "banana"]}
    assert json.loads(server.requests[1].content)["input"] == [" ", "cc"]  # no empty input
    for text, vec in zip(texts, vectors, strict=True):
        raw = fake_vector(text or " ")
        norm = math.sqrt(sum(x * x for x in raw))
        assert vec == pytest.approx([x / norm for x in raw])
    assert e.embed([]) == []


def test_retries_429_and_5xx_then_succeeds() -> None:
    server = FakeServer(failures=2, status=429, headers={"Retry-After": "2"})
    e, sleeps = make(server, max_retries=3)
    assert len(e.embed(["x"])) == 1
    assert sleeps == [2.0, 2.0]
    server = FakeServer(failures=2, status=502)
    e, sleeps = make(server, max_retries=3, retry_backoff_s=0.1)
    e.embed(["x"])
    assert sleeps == pytest.approx([0.1, 0.2])


def test_retries_are_bounded() -> None:
    server = FakeServer(failures=10, status=503)
    e, sleeps = make(server, max_retries=2)
    with pytest.raises(EmbeddingError, match="503"):
        e.embed(["x"])
    assert len(server.requests) == 3 and len(sleeps) == 2


def test_client_errors_are_not_retried() -> None:
    server = FakeServer(failures=1, status=401)
    e, sleeps = make(server)
    with pytest.raises(EmbeddingError, match="401"):
        e.embed(["x"])
    assert len(server.requests) == 1 and sleeps == []


def test_network_errors_are_retried() -> None:
    calls = {"n": 0}

    def flaky(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            raise httpx.ConnectError("refused", request=request)
        return FakeServer()(request)

    e, sleeps = make(flaky)
    assert len(e.embed(["x"])) == 1 and len(sleeps) == 1


@pytest.mark.parametrize(
    "answer",
    [
        {"data": [{"index": 0, "embedding": [1.0, 2.0]}]},  # wrong dimension
        {"data": []},  # missing vectors
        {"data": [{"index": 0, "embedding": [0.0, 0.0, 0.0, 0.0]}]},  # zero vector
        {"data": [{"index": 5, "embedding": [1.0, 0.0, 0.0, 0.0]}]},  # bad index
        {"nothing": True},
    ],
)
def test_unusable_answers_raise(answer: dict[str, object]) -> None:
    e, _ = make(lambda request: httpx.Response(200, json=answer))
    with pytest.raises(EmbeddingError):
        e.embed(["x"])
