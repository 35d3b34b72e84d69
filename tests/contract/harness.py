"""The synthesised stack, emulated on one machine, with every AWS call recorded.

aws-local's machinery (`LocalAwsStack`: moto for S3, DynamoDB, SQS, Scheduler, Secrets
Manager and IAM; osmem-server for OpenSearch) provides the resources, plus what aws-local
itself does not need: the idempotency table, the root-key secret and the scheduler's role.
Every function then runs from its real entry point (`functions/...`), with the environment
the template gives it, pointed at the emulators:

- the API Gateway: a loopback HTTP server that routes each request through the template's
  REST API (resources, methods, authorizer, integrations), calls the authorizer with a
  REQUEST event and the integrated function with a proxy event carrying the authorizer's
  context (REST API payload 1.0, bodies base64 as binaryMediaTypes */* makes them);
- the SQS event source mappings: `settle()` receives from each queue with the worker's role,
  hands the batch to the worker, deletes what succeeded, until every queue is empty;
- EventBridge Scheduler: `fire_schedules()` delivers each pending schedule's input to its
  target queue as the scheduler's role, then drops the schedule.

And what an operator does by hand, not recorded: `redrive()` moves a dead-letter queue's
messages back to its queue; `interrupt_setup()` leaves the search index as a setup run that
stopped half-way would (the versioned index created, the alias not on it).

Functions run one at a time, so the recorder attributes each call to the right one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.util
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3

from skald import catalog
from skald.adapters.aws.local_stack import sqs_event_record
from tests.contract import seams
from tests.contract.apigateway import RestApi
from tests.contract.cfn import ACCOUNT, REGION, Template
from tests.contract.recorder import Recorder

STAGE = "prod"
API_ID = "skaldapi"
DUMMY_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
# Variables of the process, not of a function: replaced by each function's own set.
_OWNED_PREFIXES = ("SKALD_", "POWERTOOLS_", "AWS_LAMBDA_")


@dataclass
class Hit:
    function: str
    verb: str
    path: str  # the FastAPI route template
    status: int


class LambdaContext:
    def __init__(self, function: str, remaining_s: float = 300.0) -> None:
        self.remaining_s = remaining_s
        self.function_name = f"skald-{function}"
        self.function_version = "$LATEST"
        self.invoked_function_arn = (
            f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self.function_name}"
        )
        self.memory_limit_in_mb = 1024
        self.aws_request_id = uuid.uuid4().hex
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "contract"

    def get_remaining_time_in_millis(self) -> int:
        return int(self.remaining_s * 1000)


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith(_OWNED_PREFIXES)]:
        del os.environ[key]
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class FunctionHost:
    """One function: its handler module loaded on first use (the cold start)."""

    def __init__(self, key: str, env: dict[str, str], recorder: Recorder) -> None:
        self.key = key
        self.env = env
        self.recorder = recorder
        self.handler: Any = None
        self.remaining_s = 300.0  # what each invocation's context reports it has left

    def invoke(self, event: dict[str, Any], phase: str) -> Any:
        with environment(self.env):
            if self.handler is None:
                with self.recorder.attribute(self.key, "cold start: init"):
                    self.handler = self._load()
                phase = f"cold start: {phase}"  # what a first call builds lazily counts too
            with self.recorder.attribute(self.key, phase):
                return self.handler(event, LambdaContext(self.key, self.remaining_s))

    def _load(self) -> Any:
        seams.reset_process_caches()  # a real Lambda shares nothing with the other functions
        path, attribute = seams.entry_point(self.key)
        spec = importlib.util.spec_from_file_location(f"skald_contract_{self.key}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return getattr(module, attribute)


@dataclass
class Emulated:
    template: Template
    function_ids: dict[str, str]
    recorder: Recorder
    url: str
    root_key: str
    hits: list[Hit] = field(default_factory=list)
    principals: dict[str, str] = field(default_factory=dict)  # recorded name -> role id


class Deployment:
    def __init__(self, doc: dict[str, Any], function_ids: dict[str, str]) -> None:
        self.template = Template.of(doc)
        self.function_ids = dict(function_ids)
        self.recorder = Recorder()
        self.root_key = "contract-root-" + uuid.uuid4().hex
        self.hosts: dict[str, FunctionHost] = {}
        self.hits: list[Hit] = []
        self._lock = threading.RLock()
        self._pollers: dict[str, Any] = {}
        self._stack: Any = None
        self._server: Any = None
        self.url = ""
        # The API keys the drive made, and whose account each is (the recorder notes it on
        # the calls made while serving that key's requests).
        self.callers: dict[str, str] = {}

    # -- setup -----------------------------------------------------------------------------

    @contextmanager
    def running(self) -> Iterator[Emulated]:
        with environment(DUMMY_AWS):
            from skald.adapters.aws.local_stack import LocalAwsStack
            from skald.config import Settings

            self._stack = LocalAwsStack(Settings(backend="aws-local"))
            local = self._stack.start()
            try:
                self._admin = boto3.session.Session(region_name=REGION)
                self._endpoint = str(local.aws_endpoint_url)
                self._bind(local)
                with self.recorder.installed(REGION):
                    self._start_gateway()
                    try:
                        yield Emulated(
                            self.template,
                            self.function_ids,
                            self.recorder,
                            self.url,
                            self.root_key,
                            self.hits,
                            {"scheduler": self.scheduler_role},
                        )
                    finally:
                        self._server.shutdown()
            finally:
                self._stack.stop()

    def client(self, service: str) -> Any:
        """A bookkeeping client of the harness (not recorded: not the default session)."""
        return self._admin.client(service, endpoint_url=self._endpoint)  # type: ignore[call-overload]

    def _usage_plans(self) -> None:
        """The stack's usage plans, one per tier, named as the template names them: the
        functions that manage account keys find them by name (infra/edge.py)."""
        apigateway = self.client("apigateway")
        for _, plan in self.template.of_type("AWS::ApiGateway::UsagePlan"):
            apigateway.create_usage_plan(name=plan["Properties"]["UsagePlanName"])

    def _bind(self, local: Any) -> None:
        """Creates what aws-local lacks and binds the template's resources to the names."""
        dynamo = self.client("dynamodb")
        idempotency = "skald-idempotency"
        dynamo.create_table(
            TableName=idempotency,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        )
        secret = self.client("secretsmanager").create_secret(
            Name="skald-root-api-key", SecretString=self.root_key
        )["ARN"]
        role = self.client("iam").create_role(
            RoleName="skald-scheduler",
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": "sts:AssumeRole",
                            "Principal": {"Service": "scheduler.amazonaws.com"},
                        }
                    ],
                }
            ),
        )["Role"]["Arn"]
        self._usage_plans()
        urls = {q.name: local.queue_urls[q.name] for q in catalog.QUEUES}
        self.queue_urls = urls
        self.opensearch_endpoint = str(local.opensearch_endpoint)
        physical = {
            "SKALD_BUCKET": str(local.bucket),
            "SKALD_STATE_TABLE": str(local.state_table),
            "SKALD_IDEMPOTENCY_TABLE": idempotency,
            **{q.url_env: urls[q.name] for q in catalog.QUEUES},
            **{q.arn_env: _queue_arn(urls[q.name]) for q in catalog.QUEUES if q.arn_env},
            **{q.dlq_url_env: local.dlq_urls[q.name] for q in catalog.QUEUES},
            "SKALD_SCHEDULER_ROLE_ARN": role,
            "SKALD_ROOT_API_KEY_SECRET_ARN": secret,
        }
        for function_id in self.function_ids.values():
            variables = self.template.props(function_id)["Environment"]["Variables"]
            for name, expression in variables.items():
                if name in physical and isinstance(expression, dict):
                    self.template.bind(expression, physical[name])
        for key, function_id in self.function_ids.items():
            variables = self.template.props(function_id)["Environment"]["Variables"]
            env = {
                name: str(self.template.resolve(value))
                for name, value in variables.items()
                if name != "SKALD_OPENSEARCH_ENDPOINT"
            }
            env.update(DUMMY_AWS)
            env["SKALD_OPENSEARCH_ENDPOINT"] = self.opensearch_endpoint
            env["SKALD_AWS_ENDPOINT_URL"] = self._endpoint
            env["POWERTOOLS_TRACE_DISABLED"] = "true"
            # The drive is sequential: the sweeper may finish a half-done commit at once.
            env["SKALD_COMMIT_RECOVERY_GRACE_S"] = "0"
            env["AWS_LAMBDA_FUNCTION_NAME"] = f"skald-{key}"
            self.recorder.embedding_dimension = int(env.get("SKALD_EMBEDDING_DIMENSION", 1024))
            self.hosts[key] = FunctionHost(key, env, self.recorder)
        group = self.hosts["sessions"].env.get("SKALD_SCHEDULER_GROUP")
        assert group == "skald-idle-commit", f"aws-local creates skald-idle-commit, not {group}"
        self.scheduler_role = next(
            lid
            for lid, _ in self.template.of_type("AWS::IAM::Role")
            if self.template.attribute(lid, "Arn") == role
        )

    # -- API Gateway -------------------------------------------------------------------------

    def _start_gateway(self) -> None:
        from werkzeug.serving import make_server

        self.api = RestApi(self.template)
        self._routes = {
            f: [(r, _route_regex(r.path)) for r in seams.routes_of(f)] for f in seams.HTTP_FUNCTIONS
        }
        self._names = {lid: key for key, lid in self.function_ids.items()}
        self._server = make_server("127.0.0.1", 0, self._wsgi, threaded=False)
        self.url = f"http://127.0.0.1:{self._server.server_port}"

        def serve() -> None:
            asyncio.set_event_loop(asyncio.new_event_loop())  # Mangum runs on this loop
            self._server.serve_forever()

        threading.Thread(target=serve, name="contract-gateway", daemon=True).start()

    def _wsgi(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        from werkzeug.wrappers import Request

        request = Request(environ)
        status, headers, body = self.gateway(
            request.method,
            request.path,
            request.query_string.decode(),
            list(request.headers.items()),
            request.get_data(),
        )
        start_response(f"{status} X", headers)
        return [body]

    def gateway(
        self, verb: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        method = self.api.select(verb, path)
        if method is None:
            return _envelope(404, "NOT_FOUND", "Not Found")
        event = _proxy_event(verb, path, query, headers, body, method.path)
        if method.authorization == "CUSTOM":
            context = self._authorize(event, method.verb)
            if isinstance(context, tuple):
                return context
            event["requestContext"]["authorizer"] = context
        function = self._names.get(method.function or "")
        if function is None:
            return _envelope(500, "INTERNAL", f"no function for {method.logical_id}")
        route = self._route(function, verb, path)
        with self._lock, self.recorder.serving(self.callers.get(_api_key(headers) or "")):
            result = self.hosts[function].invoke(event, f"{verb} {route}")
        status = int(result["statusCode"])
        self.hits.append(Hit(function, verb, route, status))
        out_headers = [
            (k, v) for k, vs in (result.get("multiValueHeaders") or {}).items() for v in vs
        ] + list((result.get("headers") or {}).items())
        payload = result.get("body") or ""
        data = (
            base64.b64decode(payload) if result.get("isBase64Encoded") else payload.encode("utf-8")
        )
        return (
            status,
            [
                (k, v)
                for k, v in out_headers
                if k.lower() not in ("content-length", "transfer-encoding")
            ],
            data,
        )

    def _authorize(
        self, event: dict[str, Any], verb: str
    ) -> dict[str, str] | tuple[int, list[tuple[str, str]], bytes]:
        auth_event = {
            "type": "REQUEST",
            "methodArn": f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{API_ID}/{STAGE}/"
            f"{verb}{event['path']}",
            **{
                k: event[k]
                for k in (
                    "resource",
                    "path",
                    "httpMethod",
                    "headers",
                    "multiValueHeaders",
                    "queryStringParameters",
                    "multiValueQueryStringParameters",
                    "pathParameters",
                    "stageVariables",
                )
            },
            "requestContext": {
                k: v for k, v in event["requestContext"].items() if k != "authorizer"
            },
        }
        has_key = any(k.lower() in ("x-api-key", "authorization") for k in event["headers"])
        phase = "authorize " + ("a request with a key" if has_key else "a request without key")
        try:
            with self._lock:
                answer = self.hosts[seams.AUTHORIZER].invoke(auth_event, phase)
        except Exception as exc:  # API Gateway: "Unauthorized" is a 401, anything else a 500
            if str(exc) == "Unauthorized":
                return _envelope(401, "UNAUTHENTICATED", "Missing or invalid API key")
            return _envelope(500, "INTERNAL", "Authorizer failure")
        statements = answer["policyDocument"]["Statement"]
        if not any(s["Effect"] == "Allow" for s in statements):
            return _envelope(403, "PERMISSION_DENIED", "Access denied")
        return {
            **{k: str(v) for k, v in (answer.get("context") or {}).items()},
            "principalId": str(answer["principalId"]),
            "integrationLatency": "1",
        }

    def _route(self, function: str, verb: str, path: str) -> str:
        for route, regex in self._routes.get(function, []):
            if route.verb == verb and regex.fullmatch(path):
                return route.path
        return f"(no route) {path}"

    # -- event source mappings and schedules -------------------------------------------------

    @contextmanager
    def short_of_time(self, function: str, remaining_s: float) -> Iterator[None]:
        """While active, `function`'s invocations start with `remaining_s` left."""
        host = self.hosts[function]
        before, host.remaining_s = host.remaining_s, remaining_s
        try:
            yield
        finally:
            host.remaining_s = before

    def settle(self, timeout_s: float = 60.0) -> None:
        """Runs the workers until every job queue is empty (as the event source mappings
        would), failing when the queues do not drain in time."""
        sqs = self.client("sqs")
        deadline = time.monotonic() + timeout_s
        while True:
            moved = False
            for worker in seams.WORKERS:
                moved = self._poll(worker) or moved
            if moved:
                continue
            pending = {
                w: _pending(sqs, self.queue_urls[seams.worker_queue(w)]) for w in seams.WORKERS
            }
            if not any(pending.values()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"job queues did not drain: {pending}")
            time.sleep(0.2)

    def _poll(self, worker: str) -> bool:
        url = self.queue_urls[seams.worker_queue(worker)]
        host = self.hosts[worker]
        with environment(host.env), self.recorder.attribute(worker, "event source mapping"):
            if worker not in self._pollers:  # the mapping polls with the worker's role
                self._pollers[worker] = boto3.client("sqs", endpoint_url=self._endpoint)
            sqs = self._pollers[worker]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
                "QueueArn"
            ]
            messages = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
        if not messages:
            return False
        records = [sqs_event_record(m, arn) for m in messages]
        kinds = sorted({_kind_of(r) or seams.default_kind(worker) or "(no kind)" for r in records})
        with self._lock:
            result = host.invoke({"Records": records}, f"job {', '.join(kinds)}")
        failed = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])}
        done = [m for m in messages if m["MessageId"] not in failed]
        with environment(host.env), self.recorder.attribute(worker, "event source mapping"):
            if done:
                sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(done)
                    ],
                )
        retry = self.client("sqs")  # the visibility timeout expiring, sped up
        for m in messages:
            if m["MessageId"] in failed:
                retry.change_message_visibility(
                    QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )
        return True

    def redrive(self, queue: str) -> int:
        """Moves every message of `queue`'s DLQ back to it (the console's "redrive"), with
        its body and attributes; returns how many."""
        sqs = self.client("sqs")
        dlq = sqs.get_queue_url(QueueName=self.queue_urls[queue].rsplit("/", 1)[-1] + "-dlq")[
            "QueueUrl"
        ]
        moved = 0
        while True:
            messages = sqs.receive_message(
                QueueUrl=dlq, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
            ).get("Messages", [])
            if not messages:
                return moved
            for m in messages:
                attrs = {
                    k: {"DataType": v["DataType"], "StringValue": v["StringValue"]}
                    for k, v in (m.get("MessageAttributes") or {}).items()
                }
                sqs.send_message(
                    QueueUrl=self.queue_urls[queue],
                    MessageBody=m["Body"],
                    **({"MessageAttributes": attrs} if attrs else {}),
                )
                sqs.delete_message(QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"])
                moved += 1

    def interrupt_setup(self, alias: str) -> list[str]:
        """Takes `alias` off its index, which stays: what a first setup run leaves when it
        stops between creating the index and adding the alias. Returns the index names."""
        from opensearchpy import OpenSearch

        client = OpenSearch(hosts=[self.opensearch_endpoint])
        try:
            indexes = sorted(client.indices.get_alias(name=alias))
            client.indices.update_aliases(
                body={"actions": [{"remove": {"index": name, "alias": alias}} for name in indexes]}
            )
            return indexes
        finally:
            client.close()

    def fire_schedules(self, sessions: set[str] | None = None) -> int:
        """Delivers the pending one-shot schedules now (of `sessions` only, when given), as
        the scheduler's role; returns how many."""
        scheduler = self.client("scheduler")
        group = self.hosts["sessions"].env["SKALD_SCHEDULER_GROUP"]
        fired = 0
        for summary in scheduler.list_schedules(GroupName=group).get("Schedules", []):
            schedule = scheduler.get_schedule(Name=summary["Name"], GroupName=group)
            target = schedule["Target"]
            if (
                sessions is not None
                and json.loads(target.get("Input", "{}")).get("session_id") not in sessions
            ):
                continue
            queue = target["Arn"].rsplit(":", 1)[-1]
            url = next(u for u in self.queue_urls.values() if u.endswith("/" + queue))
            with (
                environment(DUMMY_AWS),
                self.recorder.attribute("scheduler", f"schedule {summary['Name']}"),
            ):
                boto3.client("sqs", endpoint_url=self._endpoint).send_message(
                    QueueUrl=url, MessageBody=target.get("Input", "{}")
                )
            scheduler.delete_schedule(Name=summary["Name"], GroupName=group)
            fired += 1
        return fired

    def fire_stack_schedules(self) -> int:
        """Delivers each schedule the template itself defines (the commit sweeper's rate
        schedule) once, as the scheduler's role would."""
        fired = 0
        for logical_id, _ in self.template.of_type("AWS::Scheduler::Schedule"):
            target = self.template.props(logical_id)["Target"]
            queue = str(self.template.resolve(target["Arn"])).rsplit(":", 1)[-1]
            url = next(u for u in self.queue_urls.values() if u.endswith("/" + queue))
            with (
                environment(DUMMY_AWS),
                self.recorder.attribute("scheduler", f"schedule {logical_id}"),
            ):
                boto3.client("sqs", endpoint_url=self._endpoint).send_message(
                    QueueUrl=url, MessageBody=str(self.template.resolve(target["Input"]))
                )
            fired += 1
        return fired


# -- helpers ---------------------------------------------------------------------------------


def _kind_of(record: dict[str, Any]) -> str | None:
    """A message's job kind: its `kind` attribute, or the {"kind", "payload"} envelope a
    schedule sends (Scheduler cannot set attributes)."""
    kind = (record["messageAttributes"].get("kind") or {}).get("stringValue")
    if kind:
        return str(kind)
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        body = json.loads(record["body"])
        if isinstance(body.get("payload"), dict) and isinstance(body.get("kind"), str):
            return str(body["kind"])
    return None


def _api_key(headers: list[tuple[str, str]]) -> str | None:
    for name, value in headers:
        if name.lower() == "x-api-key":
            return value
        if name.lower() == "authorization" and value[:7].lower() == "bearer ":
            return value[7:].strip()
    return None


def _queue_arn(url: str) -> str:
    account, name = url.rstrip("/").split("/")[-2:]
    return f"arn:aws:sqs:{REGION}:{account}:{name}"


def _pending(sqs: Any, url: str) -> int:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return sum(int(v) for v in attrs.values())


def _route_regex(template: str) -> re.Pattern[str]:
    pattern = re.sub(r"\{[^}:]+:path\}", "<<PATH>>", template)
    pattern = re.sub(r"\{[^}]+\}", "<<SEG>>", pattern)
    pattern = re.escape(pattern).replace("<<PATH>>", ".+").replace("<<SEG>>", "[^/]+")
    return re.compile(pattern)


def _envelope(status: int, code: str, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
    body = {"status": "error", "result": None, "error": {"code": code, "message": message}}
    return status, [("content-type", "application/json")], json.dumps(body).encode()


def _proxy_event(
    verb: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes, resource: str
) -> dict[str, Any]:
    from urllib.parse import parse_qsl

    multi_headers: dict[str, list[str]] = {}
    for key, value in headers:
        multi_headers.setdefault(key, []).append(value)
    multi_query: dict[str, list[str]] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        multi_query.setdefault(key, []).append(value)
    proxy = path[len(resource.split("{", 1)[0]) :] if "{" in resource else None
    request_id = uuid.uuid4().hex
    return {
        "resource": resource,
        "path": path,
        "httpMethod": verb,
        "headers": {k: v[-1] for k, v in multi_headers.items()},
        "multiValueHeaders": multi_headers,
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": proxy} if proxy else None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": resource,
            "httpMethod": verb,
            "path": f"/{STAGE}{path}",
            "stage": STAGE,
            "requestId": request_id,
            "extendedRequestId": request_id,
            "accountId": ACCOUNT,
            "apiId": API_ID,
            "protocol": "HTTP/1.1",
            "requestTimeEpoch": int(time.time() * 1000),
            "identity": {"sourceIp": "127.0.0.1", "userAgent": "contract"},
            "domainName": f"{API_ID}.execute-api.{REGION}.amazonaws.com",
        },
        # binaryMediaTypes */*: API Gateway hands every body over base64-encoded.
        "body": base64.b64encode(body).decode() if body else None,
        "isBase64Encoded": bool(body),
    }
