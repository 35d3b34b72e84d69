"""LLM port over any OpenAI-compatible /chat/completions endpoint."""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from typing import Any

import httpx

from skald.domain.ops.usage import record
from skald.ports import ChatMessage


class LLMError(RuntimeError):
    pass


class LLMTimeout(LLMError, TimeoutError):
    """The call's `timeout_s` ran out, retries included: a caller that waits for the call
    under the same deadline sees a timeout whichever of the two ends first."""


def _message(m: ChatMessage) -> dict[str, Any]:
    if not m.images:
        return {"role": m.role, "content": m.content}
    parts: list[dict[str, Any]] = [{"type": "text", "text": m.content}]
    for fmt, data in m.images:
        url = f"data:image/{fmt};base64,{base64.b64encode(data).decode()}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": m.role, "content": parts}


def _completion_text(resp: httpx.Response) -> str:
    """The answer's text; its token usage is recorded."""
    try:
        data = resp.json()
        text = str(data["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise LLMError(f"malformed chat completion: {exc}") from exc
    used = data.get("usage") if isinstance(data, dict) else None
    if isinstance(used, dict):
        record(used.get("prompt_tokens"), used.get("completion_tokens"))
    return text


class OpenAICompatibleLLM:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_retries = max_retries
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers, transport=transport)

    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        json_schema: dict[str, Any] | None = None,
        max_tokens: int = 1024,
        timeout_s: float = 30.0,
    ) -> str:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": 0,
            "messages": [_message(m) for m in messages],
        }
        if json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "skald_output", "schema": json_schema, "strict": False},
            }
        # timeout_s bounds the call as a whole, retries included (as the Bedrock adapter's
        # does): a caller that gave up at its deadline leaves no retry running behind it.
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            try:
                resp = self._client.post(
                    f"{self.base_url}/chat/completions",
                    json=body,
                    timeout=max(deadline - time.monotonic(), 0.001),
                )
            except httpx.HTTPError as exc:
                last = exc
            else:
                if resp.status_code == 200:
                    return _completion_text(resp)
                if resp.status_code not in (429, 500, 502, 503, 504):
                    raise LLMError(
                        f"chat completion failed: HTTP {resp.status_code} {resp.text[:200]}"
                    )
                last = LLMError(f"HTTP {resp.status_code}")
            if attempt < self.max_retries:
                delay = min(2.0, 0.25 * 2**attempt)
                if time.monotonic() + delay >= deadline:
                    raise LLMTimeout(f"chat completion failed within {timeout_s:g}s: {last}")
                time.sleep(delay)
        if isinstance(last, httpx.TimeoutException):
            raise LLMTimeout(f"chat completion failed within {timeout_s:g}s: {last}")
        raise LLMError(f"chat completion failed after retries: {last}")

    def close(self) -> None:
        self._client.close()
