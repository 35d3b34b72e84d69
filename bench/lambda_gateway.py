"""The deployed request path on one machine, each function in its own process.

- `Host`: one Lambda execution environment (bench/lambda_host.py) of one catalogue function,
  invoked one event at a time; it records each invocation's wall and CPU time and the
  process's peak resident set (VmHWM) after it.
- `Gateway`: an HTTP server standing in for API Gateway (REST API, payload 1.0): the REQUEST
  authorizer runs on every call that is not a public GET (the gateway's authorizer cache is
  off in the stack), the path goes to the function `catalog.route_owner` names, with the
  authorizer's context in `requestContext.authorizer`; bodies above Lambda's 6 MB get 413.
  openviking-sdk talks to it like to a deployed stack.
- SQS pollers, one per queue, hand batches of real SQS messages (moto) to the worker hosts as
  event source mappings do, deleting what succeeded.

Samples carry the current `phase` (a route family or a job kind): `recycle()` ends every host,
so each phase starts with fresh execution environments and its peak is its own.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from skald import catalog
from skald.adapters.aws.local_stack import REGION, sqs_event_record

HOST = Path(__file__).resolve().parent / "lambda_host.py"
API_GATEWAY_TIMEOUT_S = 29.0
MAX_PAYLOAD_BYTES = 6 * 1024 * 1024  # Lambda's synchronous payload limit (API Gateway: 10 MB)


@dataclass
class Sample:
    function: str
    phase: str
    label: str  # route (METHOD /path family) or job kind
    ms: float
    cpu_ms: float
    hwm_kb: int  # VmHWM of the process after this invocation
    error: str | None = None
    status: int | None = None  # HTTP functions: the response's status code


@dataclass
class Init:
    function: str
    phase: str
    ms: float
    cpu_ms: float
    hwm_kb: int


@dataclass
class Record:
    samples: list[Sample] = field(default_factory=list)
    inits: list[Init] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, item: Sample | Init) -> None:
        with self.lock:
            (self.samples if isinstance(item, Sample) else self.inits).append(item)  # type: ignore[arg-type]

    def as_json(self) -> dict[str, Any]:
        return {
            "samples": [asdict(s) for s in self.samples],
            "inits": [asdict(i) for i in self.inits],
        }


class Host:
    def __init__(
        self, name: str, env: dict[str, str], log: IO[str], record: Record, phase: str
    ) -> None:
        self.name, self.record, self.phase = name, record, phase
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, str(HOST), name, str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            pass_fds=(write_fd,),
            env=env,
            text=True,
        )
        os.close(write_fd)
        self.replies = os.fdopen(read_fd)
        self.lock = threading.Lock()
        first = self._reply()
        record.add(Init(name, phase, first["init_ms"], first["init_cpu_ms"], first["VmHWM"]))

    def _reply(self) -> dict[str, Any]:
        line = self.replies.readline()
        if not line:
            raise RuntimeError(
                f"host {self.name} exited (code {self.proc.poll()}); see the sizing log"
            )
        reply: dict[str, Any] = json.loads(line)
        return reply

    def invoke(self, event: dict[str, Any], label: str) -> dict[str, Any]:
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"event": event}) + "\n")
            self.proc.stdin.flush()
            reply = self._reply()
        result = reply["result"]
        status = result.get("statusCode") if isinstance(result, dict) else None
        self.record.add(
            Sample(
                self.name,
                self.phase,
                label,
                reply["ms"],
                reply["cpu_ms"],
                reply["VmHWM"],
                reply["error"],
                status,
            )
        )
        return reply

    def close(self) -> None:
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.replies.close()


class Hosts:
    """At most one warm environment per function; created on first use."""

    def __init__(self, env_of: Any, log: IO[str], record: Record) -> None:
        self.env_of, self.log, self.record = env_of, log, record
        self.phase = "start"
        self._hosts: dict[str, Host] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Host:
        with self._lock:
            host = self._hosts.get(name)
            if host is None:
                host = self._hosts[name] = Host(
                    name, self.env_of(name), self.log, self.record, self.phase
                )
            return host

    def recycle(self, phase: str) -> None:
        with self._lock:
            hosts, self._hosts = list(self._hosts.values()), {}
            self.phase = phase
        for host in hosts:
            host.close()


def route_label(method: str, path: str) -> str:
    """`GET /api/v1/fs/ls` -> `GET /api/v1/fs/ls` (ids in session paths folded)."""
    parts = path.rstrip("/").split("/")
    if len(parts) > 4 and parts[3] == "sessions":
        parts[4] = "{id}"
    if len(parts) > 6 and parts[3] == "sessions" and parts[5] == "archives":
        parts[6] = "{archive}"
    if len(parts) > 4 and parts[3] == "tasks":
        parts[4] = "{id}"
    return f"{method} {'/'.join(parts) or '/'}"


class Gateway:
    def __init__(self, hosts: Hosts) -> None:
        self.hosts = hosts
        self.over_limit: list[str] = []  # requests API Gateway would have cut at 29 s
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                gateway.serve(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()

    def serve(self, req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else b""
        parts = urlsplit(req.path)
        method, path = req.command, parts.path
        if len(body) > MAX_PAYLOAD_BYTES:
            return _answer(req, 413, {"message": "Request Too Long"})
        fn = catalog.route_owner(path)
        if fn is None:
            return _answer(req, 403, {"message": "Missing Authentication Token"})
        headers = dict(req.headers.items())
        multi: dict[str, list[str]] = {}
        for k, v in req.headers.items():
            multi.setdefault(k, []).append(v)
        authorizer: dict[str, Any] = {}
        if not (method in ("GET", "HEAD") and catalog.is_public(path)):
            authorized = self._authorize(method, path, headers, multi)
            if authorized is None:
                return _answer(req, 401, {"message": "Unauthorized"})
            authorizer = authorized
        proxy = _proxy_event(method, path, parts.query, headers, multi, authorizer, body)
        label = route_label(method, path)
        reply = self.hosts.get(fn.name).invoke(proxy, label)
        if reply["ms"] > API_GATEWAY_TIMEOUT_S * 1000:
            self.over_limit.append(f"{fn.name} {label}: {reply['ms'] / 1000:.1f} s")
        result = reply["result"]
        if reply["error"] or not isinstance(result, dict):
            return _answer(req, 502, {"message": "Internal server error"})
        _send_result(req, result, head=method == "HEAD")
        return None

    def _authorize(
        self, method: str, path: str, headers: dict[str, str], multi: dict[str, list[str]]
    ) -> dict[str, Any] | None:
        """The authorizer context the request carries on, or None when it is refused."""
        event = {
            "type": "REQUEST",
            "httpMethod": method,
            "path": path,
            "methodArn": f"arn:aws:execute-api:{REGION}:000000000000:sizing/prod/{method}{path}",
            "headers": headers,
            "multiValueHeaders": multi,
        }
        reply = self.hosts.get("authorizer").invoke(event, "authorize")
        if reply["error"] or not reply["result"]:
            return None
        return {
            **reply["result"].get("context", {}),
            "principalId": reply["result"].get("principalId"),
        }


def _proxy_event(
    method: str,
    path: str,
    query_string: str,
    headers: dict[str, str],
    multi: dict[str, list[str]],
    authorizer: dict[str, Any],
    body: bytes,
) -> dict[str, Any]:
    """API Gateway's proxy integration event for the request."""
    query = parse_qs(query_string, keep_blank_values=True)
    try:
        text, b64 = body.decode(), False
    except UnicodeDecodeError:
        text, b64 = base64.b64encode(body).decode(), True
    return {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": multi,
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": path,
            "httpMethod": method,
            "path": path,
            "stage": "prod",
            "requestId": f"r{time.monotonic_ns()}",
            "identity": {"sourceIp": "127.0.0.1"},
            "authorizer": authorizer,
        },
        "body": text if body else None,
        "isBase64Encoded": b64,
    }


def _send_result(req: BaseHTTPRequestHandler, result: dict[str, Any], *, head: bool) -> None:
    """The function's proxy result as the HTTP answer (its own Content-Length left out)."""
    raw = result.get("body") or ""
    payload = base64.b64decode(raw) if result.get("isBase64Encoded") else raw.encode()
    req.send_response(int(result.get("statusCode", 200)))
    sent = set()
    for k, values in (result.get("multiValueHeaders") or {}).items():
        for v in values:
            if k.lower() != "content-length":
                req.send_header(k, v)
        sent.add(k.lower())
    for k, v in (result.get("headers") or {}).items():
        if k.lower() not in sent and k.lower() != "content-length":
            req.send_header(k, v)
    req.send_header("Content-Length", str(len(payload)))
    req.end_headers()
    if not head:
        req.wfile.write(payload)


def _answer(req: BaseHTTPRequestHandler, status: int, doc: dict[str, Any]) -> None:
    payload = json.dumps(doc).encode()
    req.send_response(status)
    req.send_header("Content-Type", "application/json")
    req.send_header("Content-Length", str(len(payload)))
    req.end_headers()
    req.wfile.write(payload)


class Pollers:
    """Event source mappings: each queue's batches go to its worker's host."""

    def __init__(self, hosts: Hosts, sqs: Any, urls: dict[str, str]) -> None:
        self.hosts, self.sqs = hosts, sqs
        self._stop = threading.Event()
        self.busy: dict[str, bool] = {}
        self._threads = [
            threading.Thread(target=self._poll, args=(q, urls[q.name]), daemon=True)
            for q in catalog.QUEUES
        ]
        for t in self._threads:
            t.start()

    def _poll(self, queue: catalog.Queue, url: str) -> None:
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        while not self._stop.is_set():
            try:
                got = self.sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=queue.batch_size,
                    WaitTimeSeconds=1,
                    AttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
                messages = got.get("Messages", [])
                if not messages:
                    continue
                self.busy[queue.name] = True
                event = {"Records": [sqs_event_record(m, arn) for m in messages]}
                kinds = sorted(
                    {
                        (m.get("MessageAttributes") or {}).get("kind", {}).get("StringValue")
                        or queue.default_kind
                        or "?"
                        for m in messages
                    }
                )
                reply = self.hosts.get(queue.worker).invoke(event, "+".join(kinds))
                result = reply["result"] or {}
                failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
                for m in messages:
                    if m["MessageId"] in failed or reply["error"]:
                        self.sqs.change_message_visibility(
                            QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=1
                        )
                    else:
                        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            except Exception as exc:  # the poller outlives a failed batch, as an ESM would
                print(f"poller {queue.name}: {exc}", file=sys.stderr)
                self._stop.wait(1.0)
            finally:
                self.busy[queue.name] = False

    def idle(self, urls: dict[str, str]) -> bool:
        """No message waiting or in flight, and no batch running."""
        if any(self.busy.values()):
            return False
        for url in urls.values():
            attrs = self.sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )["Attributes"]
            if int(attrs["ApproximateNumberOfMessages"]) or int(
                attrs["ApproximateNumberOfMessagesNotVisible"]
            ):
                return False
        return True

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
