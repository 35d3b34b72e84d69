"""Bedrock model adapters: Titan text embeddings (v2), Converse chat, and Agent Runtime rerank.

Clients are passed in (built by the container, once per cold start) so tests can stub them and
the AWS backend decides region, endpoint and botocore config. These adapters do their own
bounded retries on throttling; build the clients with botocore's retries kept low
(e.g. `Config(retries={"max_attempts": 2, "mode": "standard"})`) so both layers don't multiply.
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from skald.domain.ops.usage import record
from skald.ports import ChatMessage

TITAN_V2 = "amazon.titan-embed-text-v2:0"
TITAN_V2_DIMENSIONS = (256, 512, 1024)
TITAN_MAX_CHARS = 50_000  # Titan v2 also caps at 8192 tokens: see _shrink_for_tokens
RERANK_MAX_CHARS = 32_000  # per query and per document (service model limit)
RERANK_MAX_SOURCES = 1000  # per request (service model limit)
STRUCTURED_TOOL = "emit_result"

# Transient by nature: worth another try after a pause. Everything else is the caller's bug or
# a configuration problem (AccessDenied, ResourceNotFound, Validation) and fails at once.
_RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "TooManyRequestsException",
        "ServiceUnavailableException",
        "ServiceUnavailable",
        "ServiceQuotaExceededException",
        "ModelNotReadyException",
        "InternalServerException",
        "ModelTimeoutException",
    }
)
_RETRYABLE_TRANSPORT = (
    EndpointConnectionError,
    ConnectTimeoutError,
    ReadTimeoutError,
    ConnectionClosedError,
)
_TOKEN_LIMIT = re.compile(r"max input tokens:\s*(\d+).*?token count:\s*(\d+)", re.I | re.S)


class BedrockModelError(RuntimeError):
    """A Bedrock call failed for good (after retries) or answered something unusable."""

    def __init__(self, message: str, *, code: str | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class BedrockTimeout(BedrockModelError, TimeoutError):
    """The call's deadline left no time for another attempt: a caller waiting for it under
    the same deadline sees a timeout whichever of the two ends first."""


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "") or "")


def _error_message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", "") or exc)


class _Retrier:
    """Bounded exponential backoff with jitter around one client call."""

    def __init__(
        self,
        what: str,
        *,
        max_retries: int,
        backoff_s: float,
        max_backoff_s: float,
        sleep: Callable[[float], None],
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.what = what
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.sleep = sleep

    def call(self, fn: Callable[..., Any], deadline: float | None = None, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            try:
                return fn(**kwargs)
            except ClientError as exc:
                code = _error_code(exc)
                if code not in _RETRYABLE_CODES or attempt >= self.max_retries:
                    raise BedrockModelError(
                        f"{self.what} failed ({code or 'error'}): {_error_message(exc)}",
                        code=code or None,
                        retryable=code in _RETRYABLE_CODES,
                    ) from exc
                cause: Exception = exc
            except _RETRYABLE_TRANSPORT as exc:
                if attempt >= self.max_retries:
                    raise BedrockModelError(
                        f"{self.what} unreachable: {exc}", retryable=True
                    ) from exc
                cause = exc
            except BotoCoreError as exc:  # e.g. parameter validation: retrying cannot help
                raise BedrockModelError(f"{self.what} failed: {exc}") from exc
            # Half fixed, half random: keeps a herd of workers from retrying in lockstep.
            delay = min(self.max_backoff_s, self.backoff_s * 2**attempt)
            delay = delay / 2 + random.uniform(0, delay / 2)
            if deadline is not None and time.monotonic() + delay > deadline:
                raise BedrockTimeout(
                    f"{self.what} out of time after {attempt + 1} attempt(s): {cause}",
                    retryable=True,
                ) from cause
            self.sleep(delay)
            attempt += 1


def _l2_normalise(raw: Any, dimension: int) -> list[float]:
    if not isinstance(raw, list) or len(raw) != dimension:
        got = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise BedrockModelError(f"expected a {dimension}-d embedding, got {got}")
    try:
        vec = [float(x) for x in raw]
    except (TypeError, ValueError) as exc:
        raise BedrockModelError("embedding holds non-numbers") from exc
    norm = math.sqrt(math.fsum(x * x for x in vec))
    if not math.isfinite(norm) or norm == 0.0:
        raise BedrockModelError("embedding has a zero or non-finite norm")
    return [x / norm for x in vec]


# --------------------------------------------------------------------------------------------
# Embeddings


class BedrockTitanEmbedder:
    """Embedder port over Titan Text Embeddings. Titan takes one text per InvokeModel call, so a
    batch fans out over a small thread pool (boto3 clients are thread-safe); order is kept."""

    def __init__(
        self,
        client: Any,
        *,
        model_id: str = TITAN_V2,
        dimension: int = 1024,
        normalize: bool = True,
        max_workers: int = 4,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        max_chars: int = TITAN_MAX_CHARS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # v1 (amazon.titan-embed-text-v1, G1) has a fixed 1536-d output and rejects the
        # `dimensions` / `normalize` fields.
        self._legacy = "titan-embed-text-v1" in model_id or "titan-embed-g1" in model_id
        if (
            not self._legacy
            and "titan-embed-text-v2" in model_id
            and dimension not in TITAN_V2_DIMENSIONS
        ):
            raise ValueError(f"Titan v2 dimension must be one of {TITAN_V2_DIMENSIONS}")
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        self._client = client
        self._model_id = model_id
        self._dimension = dimension
        self._normalize = normalize
        self._max_workers = max_workers
        self._max_chars = max_chars
        self._retry = _Retrier(
            "Bedrock InvokeModel",
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            sleep=sleep,
        )
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def model_id(self) -> str:
        return self._model_id

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a string")
        # Identical texts in one batch (empty sidecars, repeated headings) cost one call.
        unique = list(dict.fromkeys(texts))
        if len(unique) <= 1 or self._max_workers == 1:
            vectors = [self._embed_one(t) for t in unique]
        else:
            vectors = list(self._executor().map(self._embed_one, unique))
        by_text = dict(zip(unique, vectors, strict=True))
        return [by_text[t] for t in texts]

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self._max_workers, thread_name_prefix="titan-embed"
                )
            return self._pool

    def _body(self, text: str) -> str:
        body: dict[str, Any] = {"inputText": text}
        if not self._legacy:
            body["dimensions"] = self._dimension
            body["normalize"] = self._normalize
        return json.dumps(body, ensure_ascii=False)

    def _embed_one(self, text: str) -> list[float]:
        # Titan rejects an empty inputText; a single space embeds as "nothing".
        text = text[: self._max_chars] if text.strip() else " "
        for _ in range(4):  # the token cap is only known once Titan counted: shrink and retry
            try:
                resp = self._retry.call(
                    self._client.invoke_model,
                    modelId=self._model_id,
                    body=self._body(text),
                    contentType="application/json",
                    accept="application/json",
                )
            except BedrockModelError as exc:
                shorter = _shrink_for_tokens(text, exc)
                if shorter is None:
                    raise
                text = shorter
                continue
            try:
                payload = json.loads(resp["body"].read())
            except (KeyError, ValueError, AttributeError) as exc:
                raise BedrockModelError("Titan returned an unreadable body") from exc
            if not isinstance(payload, dict):
                raise BedrockModelError("Titan returned a non-object body")
            # normalize=True already asks Titan for unit vectors; normalising again is cheap
            # and makes the port's guarantee hold for v1 and for normalize=False too.
            return _l2_normalise(payload.get("embedding"), self._dimension)
        raise BedrockModelError("input still over Titan's token limit after truncation")


def _shrink_for_tokens(text: str, exc: BedrockModelError) -> str | None:
    """A shorter text when `exc` says the input had too many tokens; None otherwise."""
    message = str(exc)
    if exc.code != "ValidationException" or "token" not in message.lower() or len(text) < 2:
        return None
    match = _TOKEN_LIMIT.search(message)
    ratio = 0.5
    if match:
        limit, count = int(match.group(1)), int(match.group(2))
        if count > 0:
            ratio = min(0.9, 0.95 * limit / count)  # a margin: tokens are not spread evenly
    return text[: max(1, int(len(text) * ratio))]


# --------------------------------------------------------------------------------------------
# Chat


class BedrockConverseLLM:
    """LLM port over the Converse API: one request shape for every chat model on Bedrock."""

    def __init__(
        self,
        client: Any,
        *,
        model_id: str,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self.model_id = model_id
        self._retry = _Retrier(
            "Bedrock Converse",
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            sleep=sleep,
        )

    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        json_schema: dict[str, Any] | None = None,
        max_tokens: int = 1024,
        timeout_s: float = 30.0,
    ) -> str:
        request = self._request(messages, max_tokens)
        wrapped = False
        if json_schema is not None:
            schema, wrapped = _object_schema(json_schema)
            request["toolConfig"] = {
                "tools": [
                    {
                        "toolSpec": {
                            "name": STRUCTURED_TOOL,
                            "description": "Return the answer as this tool's input, following its "
                            "JSON schema exactly.",
                            "inputSchema": {"json": schema},
                        }
                    }
                ],
                "toolChoice": {"tool": {"name": STRUCTURED_TOOL}},
            }
        # The read timeout is the client's config; timeout_s bounds the retries as a whole.
        deadline = time.monotonic() + timeout_s
        resp = self._retry.call(self._client.converse, deadline=deadline, **request)
        used = resp.get("usage") or {}
        record(used.get("inputTokens"), used.get("outputTokens"))
        content = (((resp.get("output") or {}).get("message") or {}).get("content")) or []
        stop = resp.get("stopReason")
        if json_schema is None:
            return "".join(str(b["text"]) for b in content if "text" in b)
        return _structured(content, stop, wrapped)

    def _request(self, messages: Sequence[ChatMessage], max_tokens: int) -> dict[str, Any]:
        system = [{"text": m.content} for m in messages if m.role == "system" and m.content.strip()]
        turns: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "system" or not m.content.strip():
                continue  # Converse rejects blank text blocks
            if m.role not in ("user", "assistant"):
                raise ValueError(f"unsupported chat role '{m.role}'")
            blocks: list[dict[str, Any]] = [
                {"image": {"format": fmt, "source": {"bytes": data}}} for fmt, data in m.images
            ]
            blocks.append({"text": m.content})
            # Converse wants alternating roles: consecutive turns of one role become one turn.
            if turns and turns[-1]["role"] == m.role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": m.role, "content": blocks})
        if not turns:
            raise ValueError("a completion needs at least one user message")
        request: dict[str, Any] = {
            "modelId": self.model_id,
            "messages": turns,
            "inferenceConfig": {"maxTokens": max_tokens, "temperature": 0},
        }
        if system:
            request["system"] = system
        return request


def _object_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Tool inputs must be JSON objects: any other schema travels wrapped in {"result": ...}."""
    if schema.get("type") == "object":
        return schema, False
    return {"type": "object", "properties": {"result": schema}, "required": ["result"]}, True


def _structured(content: list[dict[str, Any]], stop: Any, wrapped: bool) -> str:
    for block in content:
        use = block.get("toolUse")
        if isinstance(use, dict) and use.get("name") == STRUCTURED_TOOL:
            value = use.get("input")
            if wrapped:
                value = value.get("result") if isinstance(value, dict) else None
            return json.dumps(value, ensure_ascii=False)
    # Some models answer in text despite toolChoice: accept it when it is JSON.
    text = "".join(str(b["text"]) for b in content if "text" in b).strip()
    if text:
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            return text
    raise BedrockModelError(f"the model returned no structured output (stopReason={stop})")


# --------------------------------------------------------------------------------------------
# Rerank


class BedrockReranker:
    """Reranker port over the Bedrock Agent Runtime `rerank` API (Amazon / Cohere rerank)."""

    def __init__(
        self,
        client: Any,
        *,
        model_arn: str,
        region: str,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        # A bare model id ("amazon.rerank-v1:0") is accepted and expanded to its ARN.
        self.model_arn = (
            model_arn
            if model_arn.startswith("arn:")
            else f"arn:aws:bedrock:{region}::foundation-model/{model_arn}"
        )
        self._retry = _Retrier(
            "Bedrock Rerank",
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            sleep=sleep,
        )

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        scores = [0.0] * len(documents)
        # Blank documents cannot be sent (min length 1) and are irrelevant anyway: score 0.
        todo = [i for i, d in enumerate(documents) if d.strip()]
        if not todo or not query.strip():
            return scores
        for start in range(0, len(todo), RERANK_MAX_SOURCES):
            chunk = todo[start : start + RERANK_MAX_SOURCES]
            for index, score in self._rerank_chunk(query, [documents[i] for i in chunk]):
                if 0 <= index < len(chunk):
                    scores[chunk[index]] = score
        return scores

    def _rerank_chunk(self, query: str, docs: list[str]) -> list[tuple[int, float]]:
        request: dict[str, Any] = {
            "queries": [{"type": "TEXT", "textQuery": {"text": query[:RERANK_MAX_CHARS]}}],
            "sources": [
                {
                    "type": "INLINE",
                    "inlineDocumentSource": {
                        "type": "TEXT",
                        "textDocument": {"text": d[:RERANK_MAX_CHARS]},
                    },
                }
                for d in docs
            ],
            "rerankingConfiguration": {
                "type": "BEDROCK_RERANKING_MODEL",
                "bedrockRerankingConfiguration": {
                    "numberOfResults": len(docs),
                    "modelConfiguration": {"modelArn": self.model_arn},
                },
            },
        }
        out: list[tuple[int, float]] = []
        while True:
            resp = self._retry.call(self._client.rerank, **request)
            for item in resp.get("results") or []:
                try:
                    out.append((int(item["index"]), float(item["relevanceScore"])))
                except (KeyError, TypeError, ValueError) as exc:
                    raise BedrockModelError("malformed rerank result") from exc
            token = resp.get("nextToken")
            if not token:
                return out
            request["nextToken"] = token
