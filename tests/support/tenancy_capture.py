"""Capturing every request the AWS adapters send, with the caller each was sent for (the rule
that judges them: tests/support/tenancy.py).

- botocore: a `before-parameter-build` hook on a session's event emitter (every client the
  session makes afterwards copies it) sees the service, the operation and the caller's
  parameters of each call before it is sent.
- OpenSearch: `Transport.perform_request` is wrapped, seeing the method, path and body of each
  request and its answer (the ids the rule's ledger learns).

Who the caller is comes from `binding()`, asked at each request: in-process suites bind it per
port call (`TenantBound`, below); a `skald serve` subprocess reads the product's
`call_context.tenant` (tests/support/tenancy_launcher.py). A request made while `binding()`
is None is not captured (the test's own bookkeeping).
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from tests.support.tenancy import (
    StoreRequest,
    api_of,
    blob_account,
    ndjson,
    plain,
    violations,
)


@dataclass(frozen=True)
class Binding:
    accounts: frozenset[str] | None  # None: bound to no account (control plane)
    within: tuple[str, ...] | None = None
    where: str = ""


class Capture:
    """Collects StoreRequests (and hands each to `sink`, when given)."""

    def __init__(
        self,
        binding: Callable[[], Binding | None],
        sink: Callable[[StoreRequest], None] | None = None,
    ) -> None:
        self.binding = binding
        self.sink = sink
        self.requests: list[StoreRequest] = []
        self._lock = threading.Lock()

    def record(
        self, service: str, operation: str, params: dict[str, Any], answer: Any = None
    ) -> None:
        bound = self.binding()
        if bound is None:
            return
        request = StoreRequest(
            service, operation, params, bound.accounts, bound.within, answer, bound.where
        )
        with self._lock:
            self.requests.append(request)
        if self.sink is not None:
            self.sink(request)

    def since(self, start: int) -> list[StoreRequest]:
        with self._lock:
            return self.requests[start:]

    # -- botocore ------------------------------------------------------------------------------

    def hook(self, events: Any) -> None:
        """Captures the calls of every client made from now on by the owner of `events` (a
        boto3 / botocore session's event emitter)."""
        events.register(
            "before-parameter-build",
            self._before_parameter_build,
            unique_id="skald-tenancy-capture",
        )

    def _before_parameter_build(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        if self.binding() is None:
            return
        kept = {k: "<body>" if k == "Body" else copy.deepcopy(v) for k, v in params.items()}
        self.record(service, model.name, kept)

    # -- OpenSearch ----------------------------------------------------------------------------

    def wrap_transport(self) -> Any:
        """A replacement for `opensearchpy.Transport.perform_request` that captures."""
        from opensearchpy import Transport

        original = Transport.perform_request
        capture = self

        def perform_request(
            transport: Any,
            method: str,
            url: str,
            params: Any = None,
            body: Any = None,
            *args: Any,
            **kwargs: Any,
        ) -> Any:
            answer = original(transport, method, url, params, body, *args, **kwargs)
            if capture.binding() is not None:
                path = url.split("?", 1)[0]
                capture.record(
                    "opensearch",
                    method.upper(),
                    {"path": path, "body": slim_body(path, body)},
                    answer_digest(path, answer),
                )
            return answer

        return perform_request

    @contextmanager
    def opensearch(self) -> Iterator[None]:
        from opensearchpy import Transport

        with mock.patch.object(Transport, "perform_request", self.wrap_transport()):
            yield


def answer_digest(path: str, answer: Any) -> Any:
    """What the ledger needs of an OpenSearch answer: the ids of search hits (with the account
    their source names, if it is there), the ids of bulk items."""
    if not isinstance(answer, dict):
        return None

    def hits(found: Any) -> list[list[Any]]:
        raw = ((found or {}).get("hits") or {}).get("hits") or []
        return [
            [h.get("_id"), (h.get("_source") or {}).get("account")]
            for h in raw
            if isinstance(h, dict)
        ]

    endpoint = api_of(path)
    if endpoint == "_search":
        return {"hits": hits(answer)}
    if endpoint == "_msearch":
        return {"responses": [hits(r) for r in answer.get("responses") or []]}
    if endpoint == "_bulk":
        return {
            "items": [
                [op, res.get("_id")]
                for item in answer.get("items") or []
                for op, res in item.items()
                if isinstance(res, dict)
            ]
        }
    return None


def slim(value: Any) -> Any:
    """`value` without vectors (long lists of numbers): the rule never looks at them."""
    if isinstance(value, dict):
        return {k: slim(v) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) > 8 and all(isinstance(v, int | float) for v in value):
            return "<vector>"
        return [slim(v) for v in value]
    return value


def slim_body(path: str, body: Any) -> Any:
    """An OpenSearch request body as JSON (an _msearch or _bulk body as the list of its
    lines), without vectors."""
    if api_of(path) in ("_msearch", "_bulk"):
        try:
            return slim(ndjson(body))
        except ValueError:
            return str(body)
    return slim(plain(body))


def failure_report(found: Sequence[str], limit: int = 20) -> str:
    shown = "\n".join(found[:limit])
    more = f"\n... and {len(found) - limit} more" if len(found) > limit else ""
    return f"{len(found)} store request(s) break the tenant-scoping rule:\n{shown}{more}"


# -- a subprocess's capture: JSON lines ---------------------------------------------------------


class JsonLines:
    """Appends each request to a file as one JSON line (flushed: the process may be killed)."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the process
        self._lock = threading.Lock()

    def __call__(self, request: StoreRequest) -> None:
        line = request.to_json()
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


def read_requests(path: Path) -> list[StoreRequest]:
    if not path.exists():
        return []
    return [
        StoreRequest.from_json(line)
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def check_capture_file(path: Path, *, tenants: int) -> None:
    """Fails the test when a request of the capture file breaks the rule, or when fewer than
    `tenants` accounts were seen calling (the capture would then not see the call's tenant,
    and every request would pass as a control-plane one)."""
    import pytest

    requests = read_requests(path)
    seen = {a for r in requests for a in r.accounts or ()}
    assert len(seen) >= tenants, f"{path}: {len(requests)} requests, tenants seen: {seen}"
    found = violations(requests)
    if found:
        pytest.fail(failure_report(found), pytrace=False)


# -- in-process suites: each port call binds its caller ----------------------------------------

BOUND: ContextVar[Binding | None] = ContextVar("skald_test_tenancy_binding", default=None)

_BLOB_KEY_ARGS = ("key", "prefix", "src", "dst")


def _account_of(value: Any) -> str | None:
    for attr in ("account_id", "account"):
        found = getattr(value, attr, None)
        if isinstance(found, str):
            return found
    if isinstance(value, dict) and isinstance(value.get("account"), str):
        return str(value["account"])
    payload = getattr(value, "payload", None)
    if isinstance(payload, dict) and isinstance(payload.get("account"), str):
        return str(payload["account"])
    return None


def port_binding(arguments: dict[str, Any], where: str) -> Binding:
    """The account(s) a port call is about: its `account` / `account_id` argument, else the
    account of the record, task, user, session, query or job payload it is given; None
    (control plane) when it names none."""
    for name in ("account", "account_id"):
        if isinstance(arguments.get(name), str):
            return Binding(frozenset({arguments[name]}), where=where)
    found: set[str] = set()
    for value in arguments.values():
        items = value if isinstance(value, list | tuple) else [value]
        found.update(a for a in map(_account_of, items) if a is not None)
    return Binding(frozenset(found) if found else None, where=where)


def blob_binding(arguments: dict[str, Any], where: str) -> Binding:
    """A blob-store call: the keys / prefixes it was given bound as `within` (the adapter never
    widens nor changes them), their accounts when every one has its `{account}/`."""
    keys = [str(arguments[n]) for n in _BLOB_KEY_ARGS if isinstance(arguments.get(n), str)]
    for name in ("keys", "items"):
        given = arguments.get(name)
        if isinstance(given, list | tuple):
            keys += [str(k if isinstance(k, str) else k[0]) for k in given]
    if not keys:
        return Binding(None, where=where)
    accounts = {blob_account(k) for k in keys}
    named = None if None in accounts else frozenset(a for a in accounts if a is not None)
    return Binding(named, tuple(keys), where)


class TenantBound:
    """An adapter whose every method call binds its caller (see port_binding / blob_binding)
    while it runs, generators included (their requests happen as they are consumed)."""

    def __init__(self, adapter: Any, *, blobs: bool = False) -> None:
        object.__setattr__(self, "_adapter", adapter)
        object.__setattr__(self, "_bind", blob_binding if blobs else port_binding)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._adapter, name)
        if not callable(value) or name.startswith("__"):
            return value
        try:
            signature: inspect.Signature | None = inspect.signature(value)
        except (TypeError, ValueError):
            signature = None
        label = f"{type(self._adapter).__name__}.{name}"

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:
            arguments: dict[str, Any] = {}
            if signature is not None:
                try:
                    arguments = dict(signature.bind(*args, **kwargs).arguments)
                except TypeError:
                    arguments = {}
            binding = self._bind(arguments, label)
            token = BOUND.set(binding)
            try:
                result = value(*args, **kwargs)
            finally:
                BOUND.reset(token)
            return _BoundGenerator(result, binding) if inspect.isgenerator(result) else result

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._adapter, name, value)

    def __enter__(self) -> TenantBound:
        self._adapter.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._adapter.__exit__(*exc)


class _BoundGenerator:
    def __init__(self, inner: Any, binding: Binding) -> None:
        self._inner = inner
        self._binding = binding

    def __iter__(self) -> _BoundGenerator:
        return self

    def _run(self, step: Callable[[], Any]) -> Any:
        token = BOUND.set(self._binding)
        try:
            return step()
        finally:
            BOUND.reset(token)

    def __next__(self) -> Any:
        return self._run(lambda: next(self._inner))

    def send(self, value: Any) -> Any:
        return self._run(lambda: self._inner.send(value))

    def close(self) -> None:
        self._run(self._inner.close)


def bound_capture() -> Capture:
    """A capture of what TenantBound adapters send."""
    return Capture(BOUND.get)


def dump(requests: Sequence[StoreRequest]) -> str:
    """The requests as JSON lines (to look at a capture)."""
    return "\n".join(json.dumps(json.loads(r.to_json()), sort_keys=True) for r in requests)
