"""Job payloads larger than one SQS message: SqsJobQueue stores them in S3 under `_jobs/` and
sends a reference (claim-check). On moto: the payload round-trips through enqueue, lease and
ack (the object is gone after the ack), a retry and a dead letter keep the reference, small
payloads never touch S3, and without a store a too-large payload fails before anything is
written. The Lambda event path resolves references the same way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest

from skald import catalog
from skald.adapters.aws.sqs.jobqueue import (
    EnqueueItem,
    InMemoryDedupRegistry,
    PayloadTooLarge,
    S3PayloadStore,
    SqsJobQueue,
    SqsSendError,
    sqs_records_to_jobs,
)
from skald.adapters.aws.sqs.payloads import (
    JOB_PAYLOAD_PREFIX,
    PAYLOAD_REF,
    PayloadMissing,
    payload_ref,
)
from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.jobs import registry
from skald.jobs.lambda_workers import make_sqs_worker
from skald.ports import DedupClaims, PayloadStore
from skald.services.fs.entries import FsChange
from tests.support.compose import given_services
from tests.support.lambda_events import Ctx

BUCKET = "skald-data"
QUEUE = "semantic"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def big_payload(files: int = 5000) -> dict[str, Any]:
    """A semantic payload listing `files` URIs of ~120 bytes: ~600 KB of JSON."""
    written = [
        f"viking://resources/repo/src/module_{i:05d}/" + "n" * 80 + ".py" for i in range(files)
    ]
    return {"task_id": "t-1", "account": "acme", "written": written}


class CountingS3:
    """An S3 client that counts the calls made through it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def call(**params: Any) -> Any:
            self.calls.append(name)
            return method(**params)

        return call


@dataclass
class Aws:
    s3: CountingS3
    sqs: Any
    url: str
    dlq: str

    def queue(self, *, store: bool = True, **kwargs: Any) -> SqsJobQueue:
        payloads = S3PayloadStore(self.s3, BUCKET, queues={QUEUE}) if store else None
        return SqsJobQueue(
            self.sqs,
            {QUEUE: self.url, "memory": self.url},
            dlq_urls={QUEUE: self.dlq},
            payloads=payloads,
            **kwargs,
        )

    def keys(self) -> list[str]:
        listed = self.s3.client.list_objects_v2(Bucket=BUCKET)
        return [o["Key"] for o in listed.get("Contents", [])]

    def bodies(self, url: str) -> list[str]:
        got = self.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0, MessageAttributeNames=["All"]
        )
        return [m["Body"] for m in got.get("Messages", [])]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    moto = pytest.importorskip("moto")
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="skald-semantic")["QueueUrl"]
        dlq = sqs.create_queue(QueueName="skald-semantic-dlq")["QueueUrl"]
        yield Aws(CountingS3(s3), sqs, url, dlq)


def test_a_large_payload_round_trips_and_its_object_goes_with_the_ack(aws: Aws) -> None:
    q = aws.queue()
    payload = big_payload()
    assert len(json.dumps(payload)) > 600_000
    job_id = q.enqueue(QUEUE, "semantic.process", payload)
    [key] = aws.keys()
    assert key == f"{JOB_PAYLOAD_PREFIX}{QUEUE}/{job_id}.json"
    [body] = aws.bodies(aws.url)
    # The reference, and the payload's short fields (whose job it is); not its file list.
    assert len(body) < 200 and json.loads(body) == {
        "task_id": "t-1",
        "account": "acme",
        PAYLOAD_REF: {"bucket": BUCKET, "key": key},
    }
    [lease] = q.lease(QUEUE)
    assert lease.job.job_id == job_id and lease.job.payload == payload
    assert aws.keys() == [key]  # kept while the job runs
    assert q.ack(lease)
    assert aws.keys() == []
    assert q.stats(QUEUE).processed == 0  # no counters configured: nothing else changes
    assert q.lease(QUEUE) == []


def test_small_payloads_never_touch_s3(aws: Aws) -> None:
    q = aws.queue()
    q.enqueue(QUEUE, "semantic.process", big_payload(files=100))
    q.enqueue_batch(QUEUE, [EnqueueItem("semantic.process", {"i": i}) for i in range(12)])
    leases = q.lease(QUEUE, max_jobs=20)
    assert len(leases) == 13
    for lease in leases:
        q.nack(lease, "once more") if lease is leases[0] else q.ack(lease)
    assert aws.s3.calls == []


def test_a_retry_keeps_the_reference_and_uploads_nothing_again(aws: Aws) -> None:
    q = aws.queue(backoff_base_s=0)
    payload = big_payload()
    q.enqueue(QUEUE, "semantic.process", payload)
    [first] = q.lease(QUEUE)
    q.nack(first, "transient")
    [key] = aws.keys()
    assert aws.s3.calls.count("put_object") == 1
    [retry] = q.lease(QUEUE)
    assert retry.job.job_id == first.job.job_id and retry.job.attempts == 2
    assert retry.job.payload == payload
    assert aws.s3.calls.count("put_object") == 1 and aws.keys() == [key]
    assert q.ack(retry)
    assert aws.keys() == []


def test_a_dead_letter_keeps_its_payload_for_a_redrive(aws: Aws) -> None:
    q = aws.queue(max_attempts=1)
    payload = big_payload()
    job_id = q.enqueue(QUEUE, "semantic.process", payload)
    [lease] = q.lease(QUEUE)
    q.nack(lease, "broken for good")
    [key] = aws.keys()
    [dead] = q.dead_letters(QUEUE)
    # Listed with its reference and whose job it is (queue_status shows each account its
    # own dead letters), without reading the object.
    assert dead.job.job_id == job_id and payload_ref(dead.job.payload) is not None
    assert dead.job.payload["account"] == "acme" and "written" not in dead.job.payload
    assert aws.keys() == [key]
    # A redrive moves the message back as it is: the payload is still there to read.
    got = aws.sqs.receive_message(QueueUrl=aws.dlq, MessageAttributeNames=["All"])
    [message] = got["Messages"]
    attrs = {
        k: v for k, v in message["MessageAttributes"].items() if k not in ("error", "failed_at")
    }
    attrs["attempts"] = {"DataType": "Number", "StringValue": "0"}
    aws.sqs.send_message(QueueUrl=aws.url, MessageBody=message["Body"], MessageAttributes=attrs)
    aws.sqs.delete_message(QueueUrl=aws.dlq, ReceiptHandle=message["ReceiptHandle"])
    [redriven] = q.lease(QUEUE)
    assert redriven.job.job_id == job_id and redriven.job.payload == payload
    assert aws.keys() == [key]
    assert q.ack(redriven)
    assert aws.keys() == []


def test_a_lease_that_expires_to_the_dlq_keeps_the_payload(aws: Aws) -> None:
    q = aws.queue(max_attempts=1)
    q.enqueue(QUEUE, "semantic.process", big_payload())
    [lease] = q.lease(QUEUE, visibility_s=0)
    assert q.lease(QUEUE) == []  # delivered a second time: buried by lease() unread
    assert aws.s3.calls.count("get_object") == 1
    [dead] = q.dead_letters(QUEUE)
    assert payload_ref(dead.job.payload) is not None and len(aws.keys()) == 1
    assert dead.job.payload["account"] == "acme"
    assert not q.ack(lease)  # its receipt is stale: the object stays for the dead letter
    assert len(aws.keys()) == 1


def test_batch_enqueue_mixes_sizes(aws: Aws) -> None:
    q = aws.queue(dedup=InMemoryDedupRegistry())
    items = [
        EnqueueItem("semantic.process", big_payload(3000 + i) if i % 3 == 0 else {"i": i})
        for i in range(9)
    ]
    items.append(EnqueueItem("semantic.process", big_payload(10), dedup_key="k"))
    items.append(EnqueueItem("semantic.process", big_payload(3001), dedup_key="k"))  # absorbed
    ids = q.enqueue_batch(QUEUE, items)
    assert ids[-1] == ids[-2]
    assert sorted(aws.keys()) == sorted(f"_jobs/{QUEUE}/{ids[i]}.json" for i in (0, 3, 6))
    leases = q.lease(QUEUE, max_jobs=20)
    assert {lease.job.job_id: lease.job.payload for lease in leases} == {
        ids[i]: items[i].payload for i in range(10)
    }
    for lease in leases:
        assert q.ack(lease)
    assert aws.keys() == []


class RefusingReferences:
    """SQS that refuses (sender fault) every batch entry carrying a payload reference."""

    def __init__(self, sqs: Any) -> None:
        self.sqs = sqs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sqs, name)

    def send_message_batch(
        self,
        QueueUrl: str,
        Entries: list[dict[str, Any]],  # noqa: N803
    ) -> dict[str, Any]:
        refused = [e for e in Entries if PAYLOAD_REF in e["MessageBody"]]
        sent = self.sqs.send_message_batch(
            QueueUrl=QueueUrl, Entries=[e for e in Entries if e not in refused]
        )
        return {
            **sent,
            "Failed": [
                {"Id": e["Id"], "SenderFault": True, "Code": "Refused", "Message": "no"}
                for e in refused
            ],
        }


def test_a_batch_entry_sqs_refuses_leaves_no_payload_behind(aws: Aws) -> None:
    q = SqsJobQueue(
        RefusingReferences(aws.sqs), {QUEUE: aws.url}, payloads=S3PayloadStore(aws.s3, BUCKET)
    )
    with pytest.raises(SqsSendError, match="1 of 2 jobs not enqueued"):
        q.enqueue_batch(
            QUEUE,
            [
                EnqueueItem("semantic.process", big_payload()),
                EnqueueItem("semantic.process", {"i": 1}),
            ],
        )
    assert aws.s3.calls.count("put_object") == 1 and aws.keys() == []
    assert [json.loads(b) for b in aws.bodies(aws.url)] == [{"i": 1}]


def test_without_a_store_a_too_large_payload_fails_before_anything_is_written(aws: Aws) -> None:
    dedup = InMemoryDedupRegistry()
    q = aws.queue(store=False, dedup=dedup)
    with pytest.raises(PayloadTooLarge, match="no payload store"):
        q.enqueue(QUEUE, "semantic.process", big_payload(), dedup_key="k")
    with pytest.raises(PayloadTooLarge):
        q.enqueue_batch(
            QUEUE,
            [
                EnqueueItem("semantic.process", {"i": 1}),
                EnqueueItem("semantic.process", big_payload()),
            ],
        )
    assert aws.bodies(aws.url) == [] and aws.s3.calls == []
    small = q.enqueue(QUEUE, "semantic.process", {"i": 2}, dedup_key="k")  # no claim left
    assert [lease.job.job_id for lease in q.lease(QUEUE)] == [small]
    # A store that does not serve the queue changes nothing for it.
    q = aws.queue()
    with pytest.raises(PayloadTooLarge):
        q.enqueue("memory", "session.extract_memories", big_payload())
    assert aws.keys() == []


def test_a_message_whose_payload_is_gone_was_done(aws: Aws) -> None:
    q = aws.queue()
    q.enqueue(QUEUE, "semantic.process", big_payload())
    [key] = aws.keys()
    aws.s3.client.delete_object(Bucket=BUCKET, Key=key)  # a duplicate after the ack
    assert q.lease(QUEUE) == []
    assert aws.bodies(aws.url) == []  # dropped, not retried


def test_a_reference_outside_the_store_is_not_read(aws: Aws) -> None:
    q = aws.queue()
    foreign = {PAYLOAD_REF: {"bucket": "someone-else", "key": "_jobs/semantic/x.json"}}
    aws.sqs.send_message(QueueUrl=aws.url, MessageBody=json.dumps(foreign))
    [lease] = q.lease(QUEUE)
    assert lease.job.payload == foreign and aws.s3.calls == []


# -- the Lambda event path ----------------------------------------------------------------------


def lambda_records(aws: Aws) -> list[dict[str, Any]]:
    got = aws.sqs.receive_message(
        QueueUrl=aws.url,
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        AttributeNames=["All"],
    )
    return [
        {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m.get("Attributes", {}),
            "messageAttributes": {
                k: {"stringValue": v["StringValue"], "dataType": v["DataType"]}
                for k, v in m.get("MessageAttributes", {}).items()
            },
            "md5OfBody": m.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:skald-semantic",
            "awsRegion": "us-east-1",
        }
        for m in got.get("Messages", [])
    ]


def test_the_lambda_event_path_resolves_references(aws: Aws, tmp_path: Path) -> None:
    q = aws.queue()
    # What the worker asks of a queue it is handed jobs from: the SQS adapter offers both,
    # the embedded queue (whose worker leases its jobs) neither.
    assert isinstance(q, PayloadStore) and isinstance(q, DedupClaims)
    local = SqliteJobQueue(tmp_path / "queue.db")
    assert not isinstance(local, PayloadStore) and not isinstance(local, DedupClaims)
    local.close()
    payload = big_payload()
    big = q.enqueue(QUEUE, "semantic.process", payload)
    small = q.enqueue(QUEUE, "semantic.process", {"i": 1})
    records = lambda_records(aws)
    jobs = {job.job_id: job for _, job in sqs_records_to_jobs({"Records": records})}
    # The event carries the reference (and the payload's short fields); the queue opens it.
    assert payload_ref(jobs[big].payload) is not None
    assert jobs[big].payload["account"] == "acme" and jobs[big].payload["task_id"] == "t-1"
    assert q.open_payload(jobs[big].payload) == payload
    assert q.open_payload(jobs[small].payload) == {"i": 1}
    # The worker's side: the queue opens the body, then drops the object once done.
    [record] = [r for r in records if payload_ref(json.loads(r["body"])) is not None]
    body = json.loads(record["body"])
    assert q.open_payload(body) == payload
    q.payload_done(body)
    assert aws.keys() == [] and q.open_payload(body) is None
    ref = payload_ref(body)
    assert ref is not None
    with pytest.raises(PayloadMissing):
        S3PayloadStore(aws.s3, BUCKET).get(ref)


def test_the_worker_lambda_runs_the_stored_payload_and_deletes_it_when_done(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "SkaldTest")
    monkeypatch.delenv("SKALD_IDEMPOTENCY_TABLE", raising=False)
    seen: list[dict[str, Any]] = []
    outcomes: list[Exception | None] = [RuntimeError("first try fails"), None]

    def handle(_services: Any, payload: dict[str, Any]) -> None:
        seen.append(payload)
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    monkeypatch.setitem(registry.HANDLERS, "test.big", handle)
    q = aws.queue()
    services = SimpleNamespace(settings=Settings(backend="local", data_dir=tmp_path), queue=q)
    handler = make_sqs_worker(lambda: services, max_attempts=3)
    payload = big_payload()
    q.enqueue(QUEUE, "test.big", payload)
    [key] = aws.keys()

    def deliver() -> tuple[list[dict[str, Any]], list[str]]:
        records = lambda_records(aws)
        result = handler({"Records": records}, Ctx())
        return records, [f["itemIdentifier"] for f in result["batchItemFailures"]]

    records, failed = deliver()
    assert failed == [records[0]["messageId"]] and seen == [payload]
    assert aws.keys() == [key]  # kept for the retry
    aws.sqs.change_message_visibility(
        QueueUrl=aws.url, ReceiptHandle=records[0]["receiptHandle"], VisibilityTimeout=0
    )
    records, failed = deliver()
    assert failed == [] and seen == [payload, payload]
    assert aws.keys() == []  # done: the object goes; the mapping deletes the message
    # The same message delivered once more (SQS at-least-once) is done without running.
    aws.sqs.change_message_visibility(
        QueueUrl=aws.url, ReceiptHandle=records[0]["receiptHandle"], VisibilityTimeout=0
    )
    records, failed = deliver()
    assert failed == [] and len(seen) == 2


def test_a_processing_that_cannot_be_queued_fails_its_task(aws: Aws, tmp_path: Path) -> None:
    """Without a payload store a folder too large for one message is refused before anything
    is sent, and its task says so instead of waiting forever."""
    me = Identity("acme", "ann", "user")
    c, _ = given_services(
        Settings(backend="local", data_dir=tmp_path / "data"),
        **{catalog.QUEUE: aws.queue(store=False)},
    )
    try:
        change = FsChange(me.account_id, me.user_id, written=big_payload()["written"])
        with pytest.raises(PayloadTooLarge):
            c.scheduler.submit(me, change, task_type="add_resource")
        tasks, _ = c.tasks.list(
            me,
            task_type="add_resource",
            status=None,
            resource_id=None,
            include_internal=False,
            limit=10,
            cursor=None,
        )
        assert [(t.status, "could not be queued" in (t.error or "")) for t in tasks] == [
            ("failed", True)
        ]
        assert aws.bodies(aws.url) == []
    finally:
        c.close()
