"""sqs_records_to_jobs / sqs_record_to_lease: Lambda SQS events -> Jobs, as the worker Lambdas
receive them from an event source mapping. Records are built the way Lambda shapes them
(camelCase keys, string values), from the very message parameters SqsJobQueue sends."""

from __future__ import annotations

import json
from typing import Any

from skald.adapters.aws.sqs.jobqueue import (
    SqsJobQueue,
    sqs_record_to_lease,
    sqs_records_to_jobs,
)
from skald.ports import Job, Lease

ARN = "arn:aws:sqs:us-east-1:123456789012:skald-semantic"
URL = "https://sqs.us-east-1.amazonaws.com/123456789012/skald-semantic"


def record_from_send(
    entry: dict[str, Any], *, message_id: str = "m-1", receive_count: int = 1, receipt: str = "rh-1"
) -> dict[str, Any]:
    """The Lambda record of a message sent with SendMessage parameters `entry`."""
    attrs = {
        name: {
            "stringValue": value["StringValue"],
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": value["DataType"],
        }
        for name, value in entry.get("MessageAttributes", {}).items()
    }
    return {
        "messageId": message_id,
        "receiptHandle": receipt,
        "body": entry["MessageBody"],
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": "1767225600000",
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": "1767225600001",
        },
        "messageAttributes": attrs,
        "md5OfBody": "ignored",
        "eventSource": "aws:sqs",
        "eventSourceARN": ARN,
        "awsRegion": "us-east-1",
    }


class RecordingSqs:
    """Just enough of an SQS client for enqueue(): remembers what was sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_message(self, **params: Any) -> dict[str, Any]:
        self.sent.append(params)
        return {"MessageId": f"m-{len(self.sent)}"}


def sent_entry(
    kind: str, payload: dict[str, Any], dedup_key: str | None = None
) -> tuple[str, dict[str, Any]]:
    """(job id, SendMessage parameters) of one enqueue by the adapter."""
    sqs = RecordingSqs()
    job_id = SqsJobQueue(sqs, {"semantic": URL}).enqueue(
        "semantic", kind, payload, dedup_key=dedup_key
    )
    (params,) = sqs.sent
    assert params.pop("QueueUrl") == URL
    return job_id, params


def test_jobs_from_messages_sent_by_the_adapter() -> None:
    payload = {"uri": "viking://resources/日本", "n": [1, {"deep": None}], "ok": True}
    id1, entry1 = sent_entry("semantic.process", payload)
    id2, entry2 = sent_entry("session.extract_memories", {"s": 1}, dedup_key="acme/a/s1")
    first = record_from_send(entry1, message_id="m-1")
    second = record_from_send(entry2, message_id="m-2", receive_count=3)
    jobs = sqs_records_to_jobs({"Records": [first, second]})
    assert jobs == [
        (
            "m-1",
            Job(
                job_id=id1,
                queue="semantic",
                kind="semantic.process",
                payload=payload,
                attempts=1,
                dedup_key=None,
            ),
        ),
        (
            "m-2",
            Job(
                job_id=id2,
                queue="semantic",
                kind="session.extract_memories",
                payload={"s": 1},
                attempts=3,
                dedup_key="acme/a/s1",
            ),
        ),
    ]
    assert id1 != id2


def test_attempts_carry_over_a_requeued_retry() -> None:
    # nack re-sends the job with `attempts` = deliveries so far; SQS counts from 1 again
    job_id, entry = sent_entry("k", {})
    entry["MessageAttributes"]["attempts"] = {"DataType": "Number", "StringValue": "2"}
    ((_, job),) = sqs_records_to_jobs({"Records": [record_from_send(entry, receive_count=1)]})
    assert job.job_id == job_id and job.attempts == 3


def test_scheduler_delivery_without_attributes() -> None:
    # EventBridge Scheduler's SQS target: the payload as body, no message attributes
    record = record_from_send(
        {"MessageBody": json.dumps({"session_id": "s1"})}, message_id="sched-1"
    )
    record["messageAttributes"] = {}
    ((message_id, job),) = sqs_records_to_jobs(
        {"Records": [record]}, default_kind="session.auto_commit"
    )
    assert message_id == "sched-1"
    assert job == Job(
        job_id="sched-1",
        queue="skald-semantic",
        kind="session.auto_commit",
        payload={"session_id": "s1"},
        attempts=1,
        dedup_key=None,
    )
    # the logical queue name can be given when the message does not carry it
    ((_, named),) = sqs_records_to_jobs({"Records": [record]}, queue="autocommit")
    assert named.queue == "autocommit" and named.kind == ""


def test_odd_bodies_and_foreign_records() -> None:
    text = record_from_send({"MessageBody": "not json"}, message_id="t")
    listed = record_from_send({"MessageBody": "[1, 2]"}, message_id="l")
    foreign = {"eventSource": "aws:s3", "messageId": "x"}
    jobs = sqs_records_to_jobs({"Records": [text, foreign, listed]})
    assert [(mid, job.payload) for mid, job in jobs] == [
        ("t", {"body": "not json"}),
        ("l", {"body": [1, 2]}),
    ]
    assert sqs_records_to_jobs({}) == []
    assert sqs_records_to_jobs({"Records": []}) == []


def test_record_to_lease_keeps_the_receipt() -> None:
    job_id, entry = sent_entry("k", {"a": 1}, dedup_key="d")
    lease = sqs_record_to_lease(record_from_send(entry, receipt="AQEB-receipt", receive_count=2))
    assert lease == Lease(
        job=Job(
            job_id=job_id, queue="semantic", kind="k", payload={"a": 1}, attempts=2, dedup_key="d"
        ),
        receipt="AQEB-receipt",
    )
