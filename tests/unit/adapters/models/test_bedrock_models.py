"""Bedrock adapters against real boto3 clients with botocore's Stubber: the Stubber checks each
request against the expected parameters AND the service model (the client validates params
before the stub answers), and validates every canned response against the output shape."""

from __future__ import annotations

import io
import json
import math
import threading
from collections.abc import Iterator
from typing import Any, Literal

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.response import StreamingBody
from botocore.stub import Stubber

from skald.adapters.models.bedrock import (
    STRUCTURED_TOOL,
    BedrockConverseLLM,
    BedrockModelError,
    BedrockReranker,
    BedrockTitanEmbedder,
)
from skald.domain.ops.usage import metering
from skald.ports import LLM, ChatMessage, Embedder, Reranker

REGION = "us-east-1"
RERANK_ARN = "arn:aws:bedrock:us-east-1::foundation-model/amazon.rerank-v1:0"
CLAUDE = "anthropic.claude-3-haiku-20240307-v1:0"


def client(service: Literal["bedrock-runtime", "bedrock-agent-runtime"]) -> Any:
    return boto3.client(
        service, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


@pytest.fixture
def runtime() -> Iterator[tuple[Any, Stubber]]:
    c = client("bedrock-runtime")
    with Stubber(c) as stub:
        yield c, stub
        stub.assert_no_pending_responses()


@pytest.fixture
def agent_runtime() -> Iterator[tuple[Any, Stubber]]:
    c = client("bedrock-agent-runtime")
    with Stubber(c) as stub:
        yield c, stub
        stub.assert_no_pending_responses()


class JsonBody:
    """Matches an InvokeModel body by its decoded JSON, not by its byte layout."""

    def __init__(self, expected: dict[str, Any]) -> None:
        self.expected = expected

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str | bytes) and json.loads(other) == self.expected

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        return f"JsonBody({self.expected!r})"


def titan_body(vector: list[float]) -> dict[str, Any]:
    raw = json.dumps({"embedding": vector, "inputTextTokenCount": 3}).encode()
    return {"body": StreamingBody(io.BytesIO(raw), len(raw)), "contentType": "application/json"}


def titan_params(text: str, dimension: int = 256) -> dict[str, Any]:
    return {
        "modelId": "amazon.titan-embed-text-v2:0",
        "contentType": "application/json",
        "accept": "application/json",
        "body": JsonBody({"inputText": text, "dimensions": dimension, "normalize": True}),
    }


def unit(n: int, hot: int, scale: float = 1.0) -> list[float]:
    v = [0.0] * n
    v[hot] = scale
    return v


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


# --------------------------------------------------------------------------------------------
# Titan embeddings


def test_titan_request_shape_and_defensive_normalisation(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    stub.add_response("invoke_model", titan_body(unit(256, 0, 3.0)), titan_params("alpha"))
    raw = [0.5] * 256  # not unit length: the adapter normalises anyway
    stub.add_response("invoke_model", titan_body(raw), titan_params("beta"))
    emb = BedrockTitanEmbedder(c, dimension=256, max_workers=1)
    assert isinstance(emb, Embedder)
    assert emb.dimension == 256 and emb.model_id == "amazon.titan-embed-text-v2:0"
    out = emb.embed(["alpha", "beta", "alpha"])  # a repeated text costs no second call
    assert len(out) == 3 and out[0] == out[2]
    assert out[0] == unit(256, 0)
    assert all(abs(norm(v) - 1.0) < 1e-9 for v in out)
    assert out[1][0] == pytest.approx(1 / 16)


def test_titan_blank_text_is_sent_as_a_space(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    stub.add_response("invoke_model", titan_body(unit(256, 1)), titan_params(" "))
    assert BedrockTitanEmbedder(c, dimension=256).embed([""]) == [unit(256, 1)]
    assert BedrockTitanEmbedder(c, dimension=256).embed([]) == []


def test_titan_retries_throttling_with_backoff(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    stub.add_client_error(
        "invoke_model",
        "ThrottlingException",
        "Too many requests",
        http_status_code=429,
        expected_params=titan_params("x"),
    )
    stub.add_client_error(
        "invoke_model",
        "ServiceUnavailableException",
        "busy",
        http_status_code=503,
        expected_params=titan_params("x"),
    )
    stub.add_response("invoke_model", titan_body(unit(256, 2)), titan_params("x"))
    sleeps = Sleeps()
    emb = BedrockTitanEmbedder(c, dimension=256, backoff_s=0.5, sleep=sleeps)
    assert emb.embed(["x"]) == [unit(256, 2)]
    assert len(sleeps) == 2
    assert 0.25 <= sleeps[0] <= 0.5 and 0.5 <= sleeps[1] <= 1.0  # exponential, jittered


def test_titan_gives_up_after_bounded_retries(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    for _ in range(3):
        stub.add_client_error(
            "invoke_model", "ThrottlingException", "slow down", http_status_code=429
        )
    sleeps = Sleeps()
    emb = BedrockTitanEmbedder(c, dimension=256, max_retries=2, sleep=sleeps)
    with pytest.raises(BedrockModelError) as err:
        emb.embed(["x"])
    assert err.value.code == "ThrottlingException" and err.value.retryable
    assert len(sleeps) == 2


def test_titan_does_not_retry_access_denied(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    stub.add_client_error(
        "invoke_model", "AccessDeniedException", "no model access", http_status_code=403
    )
    sleeps = Sleeps()
    with pytest.raises(BedrockModelError, match="no model access") as err:
        BedrockTitanEmbedder(c, dimension=256, sleep=sleeps).embed(["x"])
    assert err.value.code == "AccessDeniedException" and not err.value.retryable
    assert sleeps == []


def test_titan_truncates_characters_then_tokens(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    text = "word " * 12_000  # 60k characters
    first = text[:50_000]
    stub.add_client_error(
        "invoke_model",
        "ValidationException",
        "400 Bad Request: Too many input tokens. Max input tokens: 8192, "
        "request input token count: 10000",
        http_status_code=400,
        expected_params=titan_params(first),
    )
    shorter = first[: int(50_000 * 0.95 * 8192 / 10000)]
    stub.add_response("invoke_model", titan_body(unit(256, 3)), titan_params(shorter))
    assert BedrockTitanEmbedder(c, dimension=256).embed([text]) == [unit(256, 3)]


def test_titan_other_validation_errors_fail(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    stub.add_client_error(
        "invoke_model", "ValidationException", "malformed input", http_status_code=400
    )
    with pytest.raises(BedrockModelError, match="malformed input"):
        BedrockTitanEmbedder(c, dimension=256).embed(["x"])


def test_titan_wrong_dimension_answer_fails(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    stub.add_response("invoke_model", titan_body([1.0] * 8), titan_params("x"))
    with pytest.raises(BedrockModelError, match="256-d"):
        BedrockTitanEmbedder(c, dimension=256).embed(["x"])


def test_titan_rejects_unsupported_dimension() -> None:
    with pytest.raises(ValueError):
        BedrockTitanEmbedder(client("bedrock-runtime"), dimension=384)


def test_titan_v1_omits_v2_fields(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    stub.add_response(
        "invoke_model",
        titan_body(unit(1536, 0)),
        {
            "modelId": "amazon.titan-embed-text-v1",
            "accept": "application/json",
            "contentType": "application/json",
            "body": JsonBody({"inputText": "x"}),
        },
    )
    emb = BedrockTitanEmbedder(c, model_id="amazon.titan-embed-text-v1", dimension=1536)
    assert emb.embed(["x"]) == [unit(1536, 0)]


def test_titan_parallel_batch_keeps_order() -> None:
    """A batch fans out over threads; answers come back in input order."""
    c = client("bedrock-runtime")
    seen: list[str] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def fake_bedrock(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        text = json.loads(params["body"])["inputText"]
        with lock:
            seen.append(text)
            threads.add(threading.current_thread().name)
        return AWSResponse("https://bedrock", 200, HTTPHeaders(), None), {
            **titan_body(unit(256, int(text.split()[1]), 2.0)),
            "ResponseMetadata": {},
        }

    # A before-call hook answers in place of the network after the client validated params.
    c.meta.events.register("before-call.bedrock-runtime.InvokeModel", fake_bedrock)
    emb = BedrockTitanEmbedder(c, dimension=256, max_workers=4)
    texts = [f"text {i}" for i in range(40)]
    try:
        out = emb.embed(texts)
    finally:
        emb.close()
    assert out == [unit(256, i) for i in range(40)]
    assert sorted(seen) == sorted(texts)
    assert all(name.startswith("titan-embed") for name in threads)


# --------------------------------------------------------------------------------------------
# Converse


def converse_response(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
        "metrics": {"latencyMs": 120},
    }


CHAT = [
    ChatMessage("system", "You are terse."),
    ChatMessage("user", "Hello"),
    ChatMessage("user", "Say hi back."),
    ChatMessage("assistant", "Hi."),
    ChatMessage("user", "Again?"),
    ChatMessage("system", "Answer in English."),
]


def converse_params(**extra: Any) -> dict[str, Any]:
    return {
        "modelId": CLAUDE,
        "system": [{"text": "You are terse."}, {"text": "Answer in English."}],
        "messages": [
            {"role": "user", "content": [{"text": "Hello"}, {"text": "Say hi back."}]},
            {"role": "assistant", "content": [{"text": "Hi."}]},
            {"role": "user", "content": [{"text": "Again?"}]},
        ],
        "inferenceConfig": {"maxTokens": 256, "temperature": 0},
        **extra,
    }


def test_converse_text_request_shape(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    stub.add_response(
        "converse", converse_response([{"text": "Hi "}, {"text": "again."}]), converse_params()
    )
    llm = BedrockConverseLLM(c, model_id=CLAUDE)
    assert isinstance(llm, LLM)
    with metering() as usage:
        assert llm.complete(CHAT, max_tokens=256) == "Hi again."
    assert usage.as_dict() == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def test_converse_sends_images_before_the_text(runtime: tuple[Any, Stubber]) -> None:
    """A caption request: the image block goes first in the user's turn (botocore's stubber
    checks the request against the Converse model, image bytes included)."""
    c, stub = runtime
    jpeg = b"\xff\xd8\xff\xe0 a tiny jpeg"
    stub.add_response(
        "converse",
        converse_response([{"text": "A cat."}]),
        {
            "modelId": CLAUDE,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"image": {"format": "jpeg", "source": {"bytes": jpeg}}},
                        {"text": "Describe this image."},
                    ],
                }
            ],
            "inferenceConfig": {"maxTokens": 200, "temperature": 0},
        },
    )
    llm = BedrockConverseLLM(c, model_id=CLAUDE)
    message = ChatMessage("user", "Describe this image.", images=(("jpeg", jpeg),))
    assert llm.complete([message], max_tokens=200) == "A cat."


def test_converse_structured_output_through_forced_tool_use(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    schema = {
        "type": "object",
        "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
        "required": ["facts"],
    }
    tool_config = {
        "tools": [
            {
                "toolSpec": {
                    "name": STRUCTURED_TOOL,
                    "description": pytest_any_str(),
                    "inputSchema": {"json": schema},
                }
            }
        ],
        "toolChoice": {"tool": {"name": STRUCTURED_TOOL}},
    }
    answer = {"facts": ["likes tea", "works at Acme"]}
    stub.add_response(
        "converse",
        converse_response(
            [{"toolUse": {"toolUseId": "tooluse_1", "name": STRUCTURED_TOOL, "input": answer}}],
            stop="tool_use",
        ),
        converse_params(toolConfig=tool_config),
    )
    out = BedrockConverseLLM(c, model_id=CLAUDE).complete(CHAT, json_schema=schema, max_tokens=256)
    assert json.loads(out) == answer


def test_converse_wraps_a_non_object_schema(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    schema = {"type": "array", "items": {"type": "string"}}
    wrapped = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
    stub.add_response(
        "converse",
        converse_response(
            [
                {"text": "Here you go."},
                {
                    "toolUse": {
                        "toolUseId": "t",
                        "name": STRUCTURED_TOOL,
                        "input": {"result": ["a"]},
                    }
                },
            ],
            stop="tool_use",
        ),
        {
            "modelId": CLAUDE,
            "messages": [{"role": "user", "content": [{"text": "list"}]}],
            "inferenceConfig": {"maxTokens": 1024, "temperature": 0},
            "toolConfig": {
                "tools": [
                    {
                        "toolSpec": {
                            "name": STRUCTURED_TOOL,
                            "description": pytest_any_str(),
                            "inputSchema": {"json": wrapped},
                        }
                    }
                ],
                "toolChoice": {"tool": {"name": STRUCTURED_TOOL}},
            },
        },
    )
    out = BedrockConverseLLM(c, model_id=CLAUDE).complete(
        [ChatMessage("user", "list")], json_schema=schema
    )
    assert json.loads(out) == ["a"]


def test_converse_structured_falls_back_to_json_text_else_fails(
    runtime: tuple[Any, Stubber],
) -> None:
    c, stub = runtime
    stub.add_response("converse", converse_response([{"text": '{"facts": []}'}]))
    stub.add_response("converse", converse_response([{"text": "I cannot."}]))
    llm = BedrockConverseLLM(c, model_id=CLAUDE)
    msgs = [ChatMessage("user", "x")]
    assert json.loads(llm.complete(msgs, json_schema={"type": "object"})) == {"facts": []}
    with pytest.raises(BedrockModelError, match="no structured output"):
        llm.complete(msgs, json_schema={"type": "object"})


def test_converse_retries_throttling_then_fails_clearly(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    stub.add_client_error("converse", "ThrottlingException", "slow", http_status_code=429)
    stub.add_response("converse", converse_response([{"text": "ok"}]))
    for _ in range(3):
        stub.add_client_error(
            "converse", "ServiceUnavailableException", "down", http_status_code=503
        )
    sleeps = Sleeps()
    llm = BedrockConverseLLM(c, model_id=CLAUDE, max_retries=2, sleep=sleeps)
    assert llm.complete([ChatMessage("user", "x")]) == "ok"
    with pytest.raises(BedrockModelError) as err:
        llm.complete([ChatMessage("user", "x")])
    assert err.value.code == "ServiceUnavailableException"
    assert len(sleeps) == 3


def test_converse_out_of_time_for_a_retry_is_a_timeout(runtime: tuple[Any, Stubber]) -> None:
    # timeout_s bounds the retries as a whole: a backoff that would end past it is not taken,
    # and the error is a TimeoutError, as a caller waiting under the same deadline sees it.
    c, stub = runtime
    stub.add_client_error("converse", "ThrottlingException", "slow", http_status_code=429)
    sleeps = Sleeps()
    llm = BedrockConverseLLM(c, model_id=CLAUDE, max_retries=5, sleep=sleeps)
    with pytest.raises(TimeoutError, match="out of time after 1 attempt"):
        llm.complete([ChatMessage("user", "x")], timeout_s=0.0)
    assert len(sleeps) == 0


def test_converse_validation_error_is_not_retried(runtime: tuple[Any, Stubber]) -> None:
    c, stub = runtime
    stub.add_client_error("converse", "ValidationException", "bad model id", http_status_code=400)
    sleeps = Sleeps()
    with pytest.raises(BedrockModelError, match="bad model id"):
        BedrockConverseLLM(c, model_id=CLAUDE, sleep=sleeps).complete([ChatMessage("user", "x")])
    assert sleeps == []


def test_converse_needs_a_user_turn() -> None:
    llm = BedrockConverseLLM(client("bedrock-runtime"), model_id=CLAUDE)
    with pytest.raises(ValueError):
        llm.complete([ChatMessage("system", "only rules")])


# --------------------------------------------------------------------------------------------
# Rerank


def rerank_params(query: str, docs: list[str], arn: str = RERANK_ARN) -> dict[str, Any]:
    return {
        "queries": [{"type": "TEXT", "textQuery": {"text": query}}],
        "sources": [
            {
                "type": "INLINE",
                "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": d}},
            }
            for d in docs
        ],
        "rerankingConfiguration": {
            "type": "BEDROCK_RERANKING_MODEL",
            "bedrockRerankingConfiguration": {
                "numberOfResults": len(docs),
                "modelConfiguration": {"modelArn": arn},
            },
        },
    }


def test_rerank_maps_results_back_to_input_order(agent_runtime: tuple[Any, Stubber]) -> None:
    c, stub = agent_runtime
    docs = ["tea", "coffee", "water"]
    stub.add_response(
        "rerank",
        {"results": [{"index": 2, "relevanceScore": 0.9}, {"index": 0, "relevanceScore": 0.4}]},
        rerank_params("drinks", docs),
    )
    rr = BedrockReranker(c, model_arn=RERANK_ARN, region=REGION)
    assert isinstance(rr, Reranker)
    assert rr.rerank("drinks", docs) == pytest.approx([0.4, 0.0, 0.9])


def test_rerank_skips_blank_documents_and_expands_a_model_id(
    agent_runtime: tuple[Any, Stubber],
) -> None:
    c, stub = agent_runtime
    arn = "arn:aws:bedrock:eu-central-1::foundation-model/amazon.rerank-v1:0"
    stub.add_response(
        "rerank",
        {"results": [{"index": 1, "relevanceScore": 0.7}, {"index": 0, "relevanceScore": 0.2}]},
        rerank_params("q", ["a", "b"], arn),
    )
    rr = BedrockReranker(c, model_arn="amazon.rerank-v1:0", region="eu-central-1")
    assert rr.model_arn == arn
    assert rr.rerank("q", ["a", "  ", "b"]) == pytest.approx([0.2, 0.0, 0.7])
    assert rr.rerank("q", []) == []


def test_rerank_follows_next_token(agent_runtime: tuple[Any, Stubber]) -> None:
    c, stub = agent_runtime
    stub.add_response(
        "rerank",
        {"results": [{"index": 1, "relevanceScore": 0.8}], "nextToken": "page2"},
        rerank_params("q", ["a", "b"]),
    )
    stub.add_response(
        "rerank",
        {"results": [{"index": 0, "relevanceScore": 0.1}]},
        {**rerank_params("q", ["a", "b"]), "nextToken": "page2"},
    )
    rr = BedrockReranker(c, model_arn=RERANK_ARN, region=REGION)
    assert rr.rerank("q", ["a", "b"]) == pytest.approx([0.1, 0.8])


def test_rerank_retries_throttling(agent_runtime: tuple[Any, Stubber]) -> None:
    c, stub = agent_runtime
    stub.add_client_error(
        "rerank",
        "ThrottlingException",
        "slow",
        http_status_code=429,
        expected_params=rerank_params("q", ["a"]),
    )
    stub.add_response(
        "rerank", {"results": [{"index": 0, "relevanceScore": 0.5}]}, rerank_params("q", ["a"])
    )
    sleeps = Sleeps()
    rr = BedrockReranker(c, model_arn=RERANK_ARN, region=REGION, sleep=sleeps)
    assert rr.rerank("q", ["a"]) == [0.5]
    assert len(sleeps) == 1


def pytest_any_str() -> Any:
    """Matches any non-empty string (the tool description is prose, not contract)."""

    class _AnyStr:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, str) and bool(other)

        def __ne__(self, other: object) -> bool:
            return not self.__eq__(other)

    return _AnyStr()
