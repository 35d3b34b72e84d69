"""Records every AWS API call the functions make, attributed to the function making it.

botocore: a fresh default boto3 session whose event emitter every client copies at creation
(`boto3.client(...)` anywhere in the product) carries a `before-parameter-build` hook, which
sees the service, the operation and the caller's parameters of each call before it is sent.
Bedrock has no emulator: a `before-call` hook answers its calls (a deterministic embedding,
a short completion, a minimal structured answer, rerank scores) after they are recorded.

OpenSearch: the opensearch-py transport is wrapped, so each HTTP request (method and path)
is recorded the way the domain authorizes it (es:ESHttp<Method> on domain/<name>/<path>).

Attribution: one function runs at a time (see harness.Deployment), so every call made while
`attribute(function)` is active, in any thread, is that function's.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import boto3
from botocore.awsrequest import AWSResponse
from botocore.response import StreamingBody


@dataclass(frozen=True)
class AwsCall:
    function: str
    phase: str  # "cold start", the route or job being served, "event source mapping", ...
    service: str  # botocore service name, or "es" for an OpenSearch HTTP request
    operation: str  # botocore operation name, or the HTTP method
    params: dict[str, Any]  # the caller's parameters ({"path": ...} for "es")
    region: str

    def describe(self) -> str:
        if self.service == "es":
            return f"OpenSearch {self.operation} {self.params.get('path')}"
        return f"{self.service}.{self.operation}"


class Recorder:
    def __init__(self) -> None:
        self.calls: list[AwsCall] = []
        self._function: str | None = None
        self._phase = ""
        self._lock = threading.Lock()
        self.embedding_dimension = 1024

    @contextmanager
    def attribute(self, function: str, phase: str) -> Iterator[None]:
        previous = (self._function, self._phase)
        self._function, self._phase = function, phase
        try:
            yield
        finally:
            self._function, self._phase = previous

    def _record(self, service: str, operation: str, params: dict[str, Any],
                region: str) -> None:
        if self._function is None:
            return  # the harness's own setup and bookkeeping
        with self._lock:
            self.calls.append(AwsCall(self._function, self._phase, service, operation,
                                      params, region))

    # -- hooks -----------------------------------------------------------------------------

    @contextmanager
    def installed(self, region: str) -> Iterator[None]:
        """While active: boto3's default session and the OpenSearch transport record."""
        from opensearchpy import Transport

        previous = boto3.DEFAULT_SESSION
        boto3.setup_default_session(region_name=region)
        session = boto3.DEFAULT_SESSION
        assert session is not None
        session.events.register("before-parameter-build", self._before_parameter_build)
        session.events.register("before-call.bedrock-runtime", self._bedrock)
        session.events.register("before-call.bedrock-agent-runtime", self._bedrock)
        original = Transport.perform_request
        recorder = self

        def perform_request(transport: Any, method: str, url: str, *args: Any,
                            **kwargs: Any) -> Any:
            recorder._record("es", method.upper(), {"path": url.split("?", 1)[0]}, region)
            return original(transport, method, url, *args, **kwargs)

        try:
            with mock.patch.object(Transport, "perform_request", perform_request):
                yield
        finally:
            boto3.DEFAULT_SESSION = previous

    def _before_parameter_build(self, params: dict[str, Any], model: Any, context: Any,
                                **_: Any) -> None:
        service = model.service_model.service_name
        region = (context or {}).get("client_region") or ""
        self._record(service, model.name, _copy(params), region)

    def _bedrock(self, model: Any, params: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        body = params.get("body")
        request = json.loads(body) if isinstance(body, (bytes, str)) and body else {}
        parsed = self._bedrock_answer(model.name, request, params)
        return AWSResponse("https://bedrock.invalid", 200, {}, None), parsed

    def _bedrock_answer(self, operation: str, request: dict[str, Any],
                        params: dict[str, Any]) -> dict[str, Any]:
        if operation == "InvokeModel":
            text = str(request.get("inputText", ""))
            dimension = int(request.get("dimensions") or self.embedding_dimension)
            data = json.dumps({"embedding": embed(text, dimension),
                               "inputTextTokenCount": len(text.split())}).encode()
            return {"body": StreamingBody(io.BytesIO(data), len(data)),
                    "contentType": "application/json"}
        if operation == "Converse":
            tools = ((request.get("toolConfig") or {}).get("tools")) or []
            if tools:
                spec = tools[0]["toolSpec"]
                content: list[dict[str, Any]] = [{"toolUse": {
                    "toolUseId": "t1", "name": spec["name"],
                    "input": minimal_instance(spec["inputSchema"]["json"])}}]
                stop = "tool_use"
            else:
                content, stop = [{"text": "A short summary written by the model."}], "end_turn"
            return {"output": {"message": {"role": "assistant", "content": content}},
                    "stopReason": stop, "usage": {"inputTokens": 10, "outputTokens": 10,
                                                  "totalTokens": 20},
                    "metrics": {"latencyMs": 1}}
        if operation == "Rerank":
            count = len(request.get("sources") or [])
            return {"results": [{"index": i, "relevanceScore": 1.0 / (i + 1)}
                                for i in range(count)]}
        raise AssertionError(f"no stand-in answer for bedrock {operation}")


def _copy(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        # Bodies are not needed to authorize a call; keep the record small.
        out[key] = "<body>" if key == "Body" else copy.deepcopy(value)
    return out


def embed(text: str, dimension: int) -> list[float]:
    """A deterministic unit vector from the words of `text` (hashed bag of words)."""
    vector = [0.0] * dimension
    for word in text.lower().split() or [""]:
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dimension] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def minimal_instance(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """The smallest value a JSON schema accepts (required properties only)."""
    defs = defs if defs is not None else {**schema.get("$defs", {}),
                                          **schema.get("definitions", {})}
    if "$ref" in schema:
        return minimal_instance(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return minimal_instance(schema[key][0], defs)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0]
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {name: minimal_instance(props[name], defs) for name in schema.get("required", [])}
    return {"array": [], "string": "", "integer": 0, "number": 0, "boolean": False,
            "null": None}.get(str(kind))
