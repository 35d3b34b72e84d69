"""Embedder for any OpenAI-compatible `/embeddings` endpoint (OpenAI, vLLM, Ollama, LiteLLM...)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

_RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
_MAX_RETRY_AFTER_S = 30.0


class EmbeddingError(RuntimeError):
    """The endpoint failed or answered something unusable (the API maps it to EMBEDDING_FAILED)."""


class OpenAICompatibleEmbedder:
    """Implements the Embedder port over HTTP. Safe to share between threads (one httpx.Client)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        dimension: int,
        timeout_s: float = 30.0,
        batch_size: int = 64,
        max_retries: int = 3,
        retry_backoff_s: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if dimension < 1:
            raise ValueError("dimension must be >= 1")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        self._dimension = dimension
        self._batch_size = batch_size
        self._max_retries = max_retries
        self._backoff_s = retry_backoff_s
        self._sleep = sleep
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers, transport=transport)

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def model_id(self) -> str:
        return self._model

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a string")
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            out.extend(self._embed_batch(list(texts[start : start + self._batch_size])))
        return out

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        # OpenAI rejects empty strings; a single space embeds as "nothing" on every server.
        payload = {"model": self._model, "input": [t if t else " " for t in batch]}
        body = self._post(payload)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or len(data) != len(batch):
            raise EmbeddingError(
                f"embeddings endpoint returned {len(data) if isinstance(data, list) else 'no'} "
                f"vectors for {len(batch)} inputs"
            )
        vectors: list[list[float] | None] = [None] * len(batch)
        for pos, item in enumerate(data):
            if not isinstance(item, dict):
                raise EmbeddingError("malformed embeddings response item")
            index = item.get("index", pos)
            if not isinstance(index, int) or not 0 <= index < len(batch):
                raise EmbeddingError(f"embeddings response has a bad index {index!r}")
            vectors[index] = self._normalise(item.get("embedding"))
        if any(v is None for v in vectors):
            raise EmbeddingError("embeddings response misses some inputs")
        return [v for v in vectors if v is not None]

    def _normalise(self, raw: Any) -> list[float]:
        if not isinstance(raw, list) or len(raw) != self._dimension:
            got = len(raw) if isinstance(raw, list) else type(raw).__name__
            raise EmbeddingError(f"expected a {self._dimension}-d vector, got {got}")
        try:
            vec = [float(x) for x in raw]
        except (TypeError, ValueError) as exc:
            raise EmbeddingError("embedding holds non-numbers") from exc
        norm = math.sqrt(sum(x * x for x in vec))
        if not math.isfinite(norm) or norm == 0.0:
            raise EmbeddingError("embedding has a zero or non-finite norm")
        return [x / norm for x in vec]

    def _post(self, payload: dict[str, Any]) -> Any:
        attempt = 0
        while True:
            delay: float | None = None
            try:
                resp = self._client.post(self._url, json=payload)
            except httpx.TransportError as exc:  # connect/read errors and timeouts
                if attempt >= self._max_retries:
                    raise EmbeddingError(f"embeddings endpoint unreachable: {exc}") from exc
            else:
                if resp.status_code < 300:
                    try:
                        return resp.json()
                    except ValueError as exc:
                        raise EmbeddingError("embeddings endpoint returned invalid JSON") from exc
                if resp.status_code not in _RETRY_STATUSES or attempt >= self._max_retries:
                    raise EmbeddingError(
                        f"embeddings endpoint answered HTTP {resp.status_code}: {resp.text[:300]}"
                    )
                delay = _retry_after(resp)
            if delay is None:
                delay = self._backoff_s * (2**attempt)
            self._sleep(delay)
            attempt += 1


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER_S)
