"""Records every AWS API call the functions make, attributed to the function making it.

botocore: a fresh default boto3 session whose event emitter every client copies at creation
(`boto3.client(...)` anywhere in the product) carries a `before-parameter-build` hook, which
sees the service, the operation and the caller's parameters of each call before it is sent,
and an `after-call` hook, which notes the HTTP status of its answer (S3 answers a missing key
with 404 only to a caller allowed to list the bucket). Bedrock has no emulator: a
`before-call` hook answers its calls (a deterministic embedding, a short completion, a
minimal structured answer, rerank scores) after they are recorded.

Faults: `failing(...)` makes a function's calls of one operation fail (an error answer, as
the service would give it) while it is active, so the drive reaches the failure paths: a
job that fails and is retried, runs out of attempts, a send that does not go through.

OpenSearch: the opensearch-py transport is wrapped, so each HTTP request (method and path)
is recorded the way the domain authorizes it (es:ESHttp<Method> on domain/<name>/<path>).

Credentials: each call notes the access key it was signed with (a `before-sign` hook: the
client's own credentials, or the per-request ones a tenant-scoped call is given). AssumeRole
answers are remembered (the key they issued, the role and the session tags asked for), so a
call signed with a tenant's credentials is recorded with that session (`AwsCall.session`) and
judged against the tenant role with its tags; None is the function's own role.

Attribution: one function runs at a time (see harness.Deployment), so every call made while
`attribute(function)` is active, in any thread, is that function's.

Tenancy: each call also notes the tenant of the product's call context
(skald.domain.access.call_context) and, while an HTTP request of a key the drive knows is served,
that key's account (`serving`); OpenSearch requests keep their body and the ids of their answer.
test_iam_contract.py checks the tenant-scoping rule (tests/support/tenancy.py) over them.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, cast
from unittest import mock

import boto3
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.response import StreamingBody

from tests.support.tenancy_capture import answer_digest, slim_body


@dataclass(frozen=True)
class Session:
    """Credentials from AssumeRole: the role assumed and the session's tags."""

    role_arn: str
    tags: tuple[tuple[str, str], ...]

    def tag(self, key: str) -> str | None:
        return next((v for k, v in self.tags if k == key), None)


@dataclass(frozen=True)
class AwsCall:
    function: str
    phase: str  # "cold start", the route or job being served, "event source mapping", ...
    service: str  # botocore service name, or "es" for an OpenSearch HTTP request
    operation: str  # botocore operation name, or the HTTP method
    params: dict[str, Any]  # the caller's parameters ({"path": ...} for "es")
    region: str
    status: int = 0  # the HTTP status of the answer (0: none came, or not botocore)
    tenant: str | None = None  # the product's call context: the account the call is about
    caller: str | None = None  # the account of the API key of the HTTP request being served
    body: Any = None  # OpenSearch: the request body, without vectors
    answer: Any = None  # OpenSearch: the ids of the answer (tests/support/tenancy.py)
    session: Session | None = None  # the assumed-role credentials it went with (None: own)

    def describe(self) -> str:
        if self.service == "es":
            return f"OpenSearch {self.operation} {self.params.get('path')}"
        return f"{self.service}.{self.operation}"


@dataclass
class Fault:
    """Calls of `operation` by `function` answer `code` (`times` of them; None: all)."""

    function: str
    service: str  # botocore service name
    operation: str
    code: str
    status: int = 400
    times: int | None = None
    hits: int = 0

    def matches(self, function: str | None, service: str, operation: str) -> bool:
        return (function, service, operation) == (self.function, self.service, self.operation) and (
            self.times is None or self.hits < self.times
        )


_CALL_INDEX = "contract_call_index"  # where a call's record is found again after its answer


class Recorder:
    def __init__(self) -> None:
        self.calls: list[AwsCall] = []
        self._function: str | None = None
        self._phase = ""
        self._caller: str | None = None
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._sessions: dict[str, Session] = {}  # access key id -> the session it belongs to
        self.embedding_dimension = 1024

    @contextmanager
    def attribute(self, function: str, phase: str) -> Iterator[None]:
        previous = (self._function, self._phase)
        self._function, self._phase = function, phase
        try:
            yield
        finally:
            self._function, self._phase = previous

    @contextmanager
    def serving(self, account: str | None) -> Iterator[None]:
        """While active, calls are made serving an HTTP request of `account`'s key."""
        previous, self._caller = self._caller, account
        try:
            yield
        finally:
            self._caller = previous

    @contextmanager
    def failing(
        self,
        function: str,
        service: str,
        operation: str,
        code: str,
        *,
        status: int = 400,
        times: int | None = None,
    ) -> Iterator[Fault]:
        """While active, `function`'s calls of `service`.`operation` fail with `code`."""
        fault = Fault(function, service, operation, code, status, times)
        with self._lock:
            self._faults.append(fault)
        try:
            yield fault
        finally:
            with self._lock:
                self._faults.remove(fault)

    def _record(
        self, service: str, operation: str, params: dict[str, Any], region: str, body: Any = None
    ) -> int | None:
        from skald.domain.access.call_context import current_tenant

        if self._function is None:
            return None  # the harness's own setup and bookkeeping
        with self._lock:
            self.calls.append(
                AwsCall(
                    self._function,
                    self._phase,
                    service,
                    operation,
                    params,
                    region,
                    tenant=current_tenant(),
                    caller=self._caller,
                    body=body,
                )
            )
            return len(self.calls) - 1

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
        # A before-call handler may answer in the service's place (botocore uses the first
        # response a handler returns); the stubs type handlers as returning None.
        session.events.register("before-call", cast(Callable[..., None], self._before_call))
        session.events.register("before-sign", self._before_sign)
        session.events.register("after-call", self._after_call)
        original = Transport.perform_request
        recorder = self

        def perform_request(
            transport: Any, method: str, url: str, *args: Any, **kwargs: Any
        ) -> Any:
            path = url.split("?", 1)[0]
            body = kwargs.get("body", args[1] if len(args) > 1 else None)
            index = recorder._record(
                "es", method.upper(), {"path": path}, region, body=slim_body(path, body)
            )
            answer = original(transport, method, url, *args, **kwargs)
            if index is not None:
                with recorder._lock:
                    recorder.calls[index] = replace(
                        recorder.calls[index], answer=answer_digest(path, answer)
                    )
            return answer

        try:
            with mock.patch.object(Transport, "perform_request", perform_request):
                yield
        finally:
            boto3.DEFAULT_SESSION = previous

    def _before_parameter_build(
        self, params: dict[str, Any], model: Any, context: Any, **_: Any
    ) -> None:
        service = model.service_model.service_name
        region = (context or {}).get("client_region") or ""
        index = self._record(service, model.name, _copy(params), region)
        if index is not None and context is not None:
            context[_CALL_INDEX] = index

    def _after_call(
        self,
        http_response: Any,
        parsed: Any = None,
        model: Any = None,
        context: Any = None,
        **_: Any,
    ) -> None:
        index = (context or {}).get(_CALL_INDEX)
        if index is not None and http_response is not None:
            with self._lock:
                self.calls[index] = replace(
                    self.calls[index], status=int(http_response.status_code)
                )
        if (
            model is not None
            and model.name == "AssumeRole"
            and index is not None
            and isinstance(parsed, dict)
            and "Credentials" in parsed
        ):
            with self._lock:
                asked = self.calls[index].params
                self._sessions[parsed["Credentials"]["AccessKeyId"]] = Session(
                    str(asked["RoleArn"]),
                    tuple((t["Key"], t["Value"]) for t in asked.get("Tags") or []),
                )

    def _before_sign(self, request: Any, request_signer: Any, **_: Any) -> None:
        index = request.context.get(_CALL_INDEX)
        if index is None:
            return
        credentials = (request.context.get("signing") or {}).get(
            "request_credentials"
        ) or request_signer._credentials
        key = credentials.get_frozen_credentials().access_key
        with self._lock:
            session = self._sessions.get(key)
            self.calls[index] = replace(self.calls[index], session=session)

    def _before_call(
        self, model: Any, params: Any, **_: Any
    ) -> tuple[AWSResponse, dict[str, Any]] | None:
        service = model.service_model.service_name
        with self._lock:
            fault = next(
                (f for f in self._faults if f.matches(self._function, service, model.name)), None
            )
            if fault is not None:
                fault.hits += 1
        if fault is not None:
            return AWSResponse("https://fault.invalid", fault.status, HTTPHeaders(), None), {
                "Error": {"Code": fault.code, "Message": "injected by the contract drive"},
                "ResponseMetadata": {"HTTPStatusCode": fault.status},
            }
        if service in ("bedrock-runtime", "bedrock-agent-runtime"):
            return self._bedrock(model, params)
        return None

    def _bedrock(self, model: Any, params: Any) -> tuple[AWSResponse, dict[str, Any]]:
        body = params.get("body")
        request = json.loads(body) if isinstance(body, (bytes, str)) and body else {}
        parsed = self._bedrock_answer(model.name, request, params)
        return AWSResponse("https://bedrock.invalid", 200, HTTPHeaders(), None), parsed

    def _bedrock_answer(
        self, operation: str, request: dict[str, Any], params: dict[str, Any]
    ) -> dict[str, Any]:
        if operation == "InvokeModel":
            text = str(request.get("inputText", ""))
            dimension = int(request.get("dimensions") or self.embedding_dimension)
            data = json.dumps(
                {"embedding": embed(text, dimension), "inputTextTokenCount": len(text.split())}
            ).encode()
            return {
                "body": StreamingBody(io.BytesIO(data), len(data)),
                "contentType": "application/json",
            }
        if operation == "Converse":
            tools = ((request.get("toolConfig") or {}).get("tools")) or []
            if tools:
                spec = tools[0]["toolSpec"]
                content: list[dict[str, Any]] = [
                    {
                        "toolUse": {
                            "toolUseId": "t1",
                            "name": spec["name"],
                            "input": minimal_instance(spec["inputSchema"]["json"]),
                        }
                    }
                ]
                stop = "tool_use"
            else:
                content, stop = [{"text": "A short summary written by the model."}], "end_turn"
            return {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": stop,
                "usage": {"inputTokens": 10, "outputTokens": 10, "totalTokens": 20},
                "metrics": {"latencyMs": 1},
            }
        if operation == "Rerank":
            count = len(request.get("sources") or [])
            return {
                "results": [{"index": i, "relevanceScore": 1.0 / (i + 1)} for i in range(count)]
            }
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
    defs = (
        defs if defs is not None else {**schema.get("$defs", {}), **schema.get("definitions", {})}
    )
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
    return {
        "array": [],
        "string": "",
        "integer": 0,
        "number": 0,
        "boolean": False,
        "null": None,
    }.get(str(kind))
