"""Models: the embedder, the language model, the reranker, and the clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Embedder(Protocol):
    @property
    def dimension(self) -> int: ...

    @property
    def model_id(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """L2-normalised vectors, one per text."""
        ...


@dataclass(frozen=True)
class ChatMessage:
    role: str  # system | user | assistant
    content: str
    # (format, bytes) of images for a vision-capable model; format: png | jpeg | gif | webp
    images: tuple[tuple[str, bytes], ...] = ()


@runtime_checkable
class LLM(Protocol):
    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        json_schema: dict[str, Any] | None = None,
        max_tokens: int = 1024,
        timeout_s: float = 30.0,
    ) -> str:
        """The assistant's text. With `json_schema`, a JSON document conforming to it.
        `timeout_s` bounds the whole call, the adapter's retries included."""
        ...


@runtime_checkable
class Reranker(Protocol):
    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """A relevance score per document, same order."""
        ...


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float: ...
