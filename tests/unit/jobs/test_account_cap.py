"""The worker Lambdas' fairness on SQS (moto) and DynamoDB (moto): every message goes in its
account's message group; a job of an account that holds all its running slots is put back
as a copy, without costing a receive, and runs once a slot is free; a job done or
dead-lettered leaves its account's count of jobs in flight."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from skald.adapters.aws.dynamo.account_jobs import DynamoAccountCounts
from skald.adapters.aws.local_stack import create_state_table, sqs_event_record
from skald.adapters.aws.sqs.jobqueue import EnqueueItem, SqsJobQueue
from skald.compose.composition import Composition
from skald.config import Settings
from skald.jobs import registry
from skald.jobs.lambda_workers import make_sqs_worker
from tests.support.compose import local_services
from tests.support.lambda_events import Ctx

QUEUE = "semantic"
KIND = "test.fair"
TABLE = "skald-state"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class Aws:
    sqs: Any
    url: str
    queue: SqsJobQueue
    counts: DynamoAccountCounts

    def receive(self) -> list[dict[str, Any]]:
        got = self.sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(got.get("Messages", []))

    def event(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        arn = "arn:aws:sqs:us-east-1:123456789012:skald-semantic"
        return {"Records": [sqs_event_record(m, arn) for m in messages]}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    moto = pytest.importorskip("moto")
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    with moto.mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        dynamo = boto3.client("dynamodb", region_name="us-east-1")
        create_state_table(dynamo, TABLE)
        url = sqs.create_queue(QueueName="skald-semantic")["QueueUrl"]
        dlq = sqs.create_queue(QueueName="skald-semantic-dlq")["QueueUrl"]
        counts = DynamoAccountCounts(dynamo, TABLE)
        queue = SqsJobQueue(
            sqs, {QUEUE: url}, dlq_urls={QUEUE: dlq}, accounts=counts, max_attempts=3
        )
        yield Aws(sqs, url, queue, counts)


class Worker:
    """The container (local services, cap 1, no deferral delay) with the SQS queue in front."""

    def __init__(self, inner: Composition, queue: SqsJobQueue) -> None:
        self.inner = inner
        self.queue = queue

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def handler(_services: Any, payload: dict[str, Any]) -> None:
        if payload.get("fail"):
            raise RuntimeError("boom")
        calls.append(payload)

    monkeypatch.setitem(registry.HANDLERS, KIND, handler)
    return calls


@pytest.fixture
def handler(aws: Aws, tmp_path: Path) -> Iterator[Any]:
    settings = Settings(
        backend="local",
        data_dir=tmp_path / "data",
        worker_account_concurrency=1,
        worker_defer_s=0,
    )
    c = local_services(settings)
    worker = Worker(c, aws.queue)
    yield make_sqs_worker(lambda: worker, max_attempts=3, queue=QUEUE)
    c.close()


def test_every_message_goes_in_its_accounts_group(aws: Aws) -> None:
    aws.queue.enqueue(QUEUE, KIND, {"account": "acme", "n": 1})
    aws.queue.enqueue(QUEUE, KIND, {"n": 2})  # a system job
    aws.queue.enqueue_batch(QUEUE, [EnqueueItem(KIND, {"account": "beta", "n": i}) for i in (3, 4)])
    groups = {json.loads(m["Body"])["n"]: m["Attributes"]["MessageGroupId"] for m in aws.receive()}
    assert groups == {1: "acme", 2: "_system", 3: "beta", 4: "beta"}
    assert (aws.queue.depth_of("acme"), aws.queue.depth_of("beta")) == (1, 2)


def test_a_job_over_its_accounts_cap_is_put_back_without_costing_a_receive(
    aws: Aws, handler: Any, ran: list[dict[str, Any]]
) -> None:
    assert aws.counts.take_slot("acme/semantic", "another-worker", 1, 300)  # acme is busy
    aws.queue.enqueue(QUEUE, KIND, {"account": "acme", "n": 1})
    aws.queue.enqueue(QUEUE, KIND, {"account": "beta", "n": 2})
    result = handler(aws.event(aws.receive()), Ctx())
    assert result["batchItemFailures"] == []  # both records done: beta's ran, acme's deferred
    assert [p["n"] for p in ran] == [2]
    [copy] = aws.receive()
    assert json.loads(copy["Body"]) == {"account": "acme", "n": 1}
    assert copy["Attributes"]["MessageGroupId"] == "acme"
    assert copy["MessageAttributes"]["attempts"]["StringValue"] == "0"  # not an attempt
    assert "counted" in copy["MessageAttributes"]  # still counted where it was
    assert aws.queue.depth_of("acme") == 1 and aws.queue.depth_of("beta") == 0
    # The other worker is done: the copy runs, and leaves the count and its slot.
    aws.counts.release_slot("acme/semantic", "another-worker")
    result = handler(aws.event([copy]), Ctx())
    assert result["batchItemFailures"] == [] and [p["n"] for p in ran] == [2, 1]
    assert aws.queue.depth_of("acme") == 0
    assert aws.counts.take_slot("acme/semantic", "a-third-worker", 1, 300)


def test_a_crashed_workers_slot_expires(aws: Aws, handler: Any, ran: list[dict[str, Any]]) -> None:
    assert aws.counts.take_slot("acme/semantic", "crashed", 1, 0.5)
    import time

    time.sleep(0.6)
    aws.queue.enqueue(QUEUE, KIND, {"account": "acme", "n": 1})
    assert handler(aws.event(aws.receive()), Ctx())["batchItemFailures"] == []
    assert [p["n"] for p in ran] == [1]


def test_a_dead_lettered_job_leaves_its_accounts_count(
    aws: Aws, handler: Any, ran: list[dict[str, Any]]
) -> None:
    aws.queue.enqueue(QUEUE, KIND, {"account": "acme", "fail": True})
    for receive in (1, 2, 3):
        [message] = aws.receive()
        assert int(message["Attributes"]["ApproximateReceiveCount"]) == receive
        result = handler(aws.event([message]), Ctx())
        assert len(result["batchItemFailures"]) == 1
        assert aws.queue.depth_of("acme") == (1 if receive < 3 else 0)
        aws.sqs.change_message_visibility(
            QueueUrl=aws.url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
