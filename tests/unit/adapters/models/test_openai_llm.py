"""The OpenAI-compatible LLM adapter: retries on throttling and server errors, never past the
call's `timeout_s` (a caller that gave up at its deadline must leave no retry running behind
it: an abandoned context rewrite used to send two more requests)."""

from __future__ import annotations

import time

import httpx
import pytest

from skald.adapters.models.openai_llm import LLMError, LLMTimeout, OpenAICompatibleLLM
from skald.ports import ChatMessage

MESSAGES = [ChatMessage("user", "hello")]


def answer(text: str) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"message": {"content": text}}]})


def llm(handler: httpx.MockTransport, retries: int = 2) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM("http://llm.test/v1", "m", max_retries=retries, transport=handler)


def test_a_throttled_call_is_retried_and_answers() -> None:
    calls: list[float] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        return httpx.Response(429) if len(calls) < 3 else answer("done")

    assert llm(httpx.MockTransport(handle)).complete(MESSAGES, timeout_s=10) == "done"
    assert len(calls) == 3


def test_a_refused_call_is_not_retried() -> None:
    calls: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(400, text="bad request")

    with pytest.raises(LLMError, match="HTTP 400"):
        llm(httpx.MockTransport(handle)).complete(MESSAGES, timeout_s=10)
    assert len(calls) == 1


def test_retries_stop_at_the_calls_deadline() -> None:
    # Each attempt times out after 0.3 s, or sooner when its read timeout says so (as a real
    # transport would); with a 0.7 s budget the first backoff (0.25 s) leaves room for a
    # second attempt, the next one (0.5 s) does not.
    timeouts: list[float] = []

    def handle(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"]["read"])
        time.sleep(min(0.3, timeouts[-1]))
        raise httpx.ReadTimeout("no answer", request=request)

    started = time.monotonic()
    # a timeout, as a caller waiting under the same deadline would see its own wait end
    with pytest.raises(TimeoutError, match="within 0.7s") as raised:
        llm(httpx.MockTransport(handle), retries=5).complete(MESSAGES, timeout_s=0.7)
    assert isinstance(raised.value, LLMTimeout)
    elapsed = time.monotonic() - started
    assert len(timeouts) == 2, timeouts
    assert elapsed < 0.7 + 0.2
    # each attempt is given what is left of the budget, not the whole budget again
    assert timeouts[0] == pytest.approx(0.7, abs=0.05)
    assert timeouts[1] < 0.2


def test_server_errors_until_the_retries_end_are_a_failure_not_a_timeout() -> None:
    calls: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(503)

    with pytest.raises(LLMError, match="after retries") as raised:
        llm(httpx.MockTransport(handle), retries=1).complete(MESSAGES, timeout_s=10)
    assert not isinstance(raised.value, TimeoutError) and len(calls) == 2
