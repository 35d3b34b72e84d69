"""The job queue's SQS messages: limits, message attributes (kind, job id, logical queue,
dedup key, attempts), batch entry sizes, FIFO group ids, SQS error codes, and jobs decoded
from received messages and from the records of a Lambda SQS event."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from skald.ports import Job, Lease

SQS_MAX_DELAY_S = 900
SQS_MAX_VISIBILITY_S = 43_200
SQS_MAX_BATCH = 10
_STALE_CODES = {"ReceiptHandleIsInvalid", "InvalidParameterValue", "MessageNotInflight"}

A_KIND, A_JOB_ID, A_QUEUE, A_DEDUP, A_ATTEMPTS = "kind", "job_id", "queue", "dedup_key", "attempts"
A_ERROR, A_FAILED_AT = "error", "failed_at"
REDRIVE_ERROR = "dead-lettered by the queue's redrive policy"


@dataclass(frozen=True)
class EnqueueItem:
    kind: str
    payload: dict[str, Any]
    dedup_key: str | None = None
    delay_s: float = 0.0


def error_code(exc: ClientError) -> str:
    # JSON-protocol SQS may answer "AWS.SimpleQueueService.MessageNotInflight".
    return str(exc.response.get("Error", {}).get("Code", "")).rsplit(".", 1)[-1]


def is_stale(exc: ClientError) -> bool:
    return error_code(exc) in _STALE_CODES


def is_fifo(url: str) -> bool:
    return url.endswith(".fifo")


def whole_seconds(value: float, upper: int) -> int:
    """SQS takes whole seconds: round up, so a wait is never shorter than asked."""
    return max(0, min(upper, math.ceil(value)))


def clean_attribute(text: str) -> str:
    """Replaces characters SQS refuses in message attributes (XML 1.0's forbidden set)."""
    out = []
    for ch in text:
        cp = ord(ch)
        ok = (
            cp in (0x9, 0xA, 0xD)
            or 0x20 <= cp <= 0xD7FF
            or 0xE000 <= cp <= 0xFFFD
            or (0x10000 <= cp <= 0x10FFFF)
        )
        out.append(ch if ok else "\ufffd")
    return "".join(out)


def group_id(dedup_key: str | None, job_id: str) -> str:
    if dedup_key is None:
        return job_id
    return "k-" + hashlib.sha256(dedup_key.encode()).hexdigest()[:40]


def string_attribute(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def number_attribute(value: float | int) -> dict[str, str]:
    return {"DataType": "Number", "StringValue": repr(value)}


def message_attributes(
    job_id: str, queue: str, kind: str, dedup_key: str | None, attempts: int
) -> dict[str, dict[str, str]]:
    attrs = {
        A_JOB_ID: string_attribute(job_id),
        A_QUEUE: string_attribute(queue),
        A_ATTEMPTS: number_attribute(attempts),
    }
    if kind:  # SQS refuses empty values; only a foreign message (no kind) can lack one
        attrs[A_KIND] = string_attribute(kind)
    if dedup_key is not None:
        attrs[A_DEDUP] = string_attribute(dedup_key)
    return attrs


def batch_entry_size(entry: dict[str, Any]) -> int:
    size = len(entry["MessageBody"].encode())
    for name, value in entry.get("MessageAttributes", {}).items():
        size += len(name.encode()) + len(value["DataType"]) + len(value["StringValue"].encode())
    return size


def parse_body(body: str) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except ValueError:
        return {"body": body}
    return payload if isinstance(payload, dict) else {"body": payload}


def checked(item: EnqueueItem) -> EnqueueItem:
    if not item.kind:
        raise ValueError("job kind must be non-empty")
    if item.dedup_key == "":
        raise ValueError("dedup_key must be non-empty (or None)")  # SQS refuses empty values
    return item


def attempts_before(attrs: dict[str, str]) -> int:
    try:
        return int(float(attrs.get(A_ATTEMPTS, "0")))
    except ValueError:
        return 0


def job_from(
    *,
    body: str,
    attrs: dict[str, str],
    message_id: str,
    attempts: int,
    queue: str,
    default_kind: str,
) -> Job:
    """A Job from a message's parts; messages not sent by this adapter (e.g. EventBridge
    Scheduler deliveries: body only) get the message id and the queue's default kind."""
    return Job(
        job_id=attrs.get(A_JOB_ID) or message_id,
        queue=attrs.get(A_QUEUE) or queue,
        kind=attrs.get(A_KIND) or default_kind,
        payload=parse_body(body),
        attempts=attempts,
        dedup_key=attrs.get(A_DEDUP),
    )


def api_attrs(message: dict[str, Any]) -> dict[str, str]:
    return {
        name: str(value.get("StringValue", ""))
        for name, value in message.get("MessageAttributes", {}).items()
    }


def received_job(queue: str, message: dict[str, Any], default_kind: str) -> Job:
    """The job of a message received from `queue` (ReceiveMessage)."""
    attrs = api_attrs(message)
    received = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
    job = job_from(
        body=message.get("Body", ""),
        attrs=attrs,
        message_id=message["MessageId"],
        attempts=attempts_before(attrs) + max(1, received),
        queue=queue,
        default_kind=default_kind,
    )
    # The queue it was received from is authoritative: settling uses its URL.
    return replace(job, queue=queue)


# --------------------------------------------------------------------------------------------
# Lambda event source mapping


def _lambda_attrs(record: dict[str, Any]) -> dict[str, str]:
    return {
        name: str(value.get("stringValue", ""))
        for name, value in (record.get("messageAttributes") or {}).items()
    }


def sqs_record_to_lease(
    record: dict[str, Any], *, queue: str | None = None, default_kind: str = ""
) -> Lease:
    """A Lease from one record of a Lambda SQS event (receipt = the record's receiptHandle).

    The job's queue is the logical queue name the message carries, else `queue`, else the SQS
    queue name from the event source ARN."""
    arn = str(record.get("eventSourceARN", ""))
    fallback = queue or arn.rsplit(":", 1)[-1]
    attrs = _lambda_attrs(record)
    received = int((record.get("attributes") or {}).get("ApproximateReceiveCount", "1"))
    job = job_from(
        body=str(record.get("body", "")),
        attrs=attrs,
        message_id=str(record["messageId"]),
        attempts=attempts_before(attrs) + max(1, received),
        queue=fallback,
        default_kind=default_kind,
    )
    return Lease(job=job, receipt=str(record.get("receiptHandle", "")))


def sqs_records_to_jobs(
    event: dict[str, Any], *, queue: str | None = None, default_kind: str = ""
) -> list[tuple[str, Job]]:
    """(messageId, Job) for every SQS record of a Lambda event, in order. The messageId is
    what a partial batch response (batchItemFailures) names. Records without Skald's message
    attributes (EventBridge Scheduler deliveries) get `default_kind` and the messageId as id."""
    out: list[tuple[str, Job]] = []
    for record in event.get("Records") or []:
        if record.get("eventSource", "aws:sqs") != "aws:sqs":
            continue
        lease = sqs_record_to_lease(record, queue=queue, default_kind=default_kind)
        out.append((str(record["messageId"]), lease.job))
    return out
