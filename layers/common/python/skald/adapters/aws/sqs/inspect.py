"""Observing the SQS job queues: approximate counts, and peeking at dead letters without
consuming them (received with a short visibility timeout, then made visible again)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.sqs.messages import (
    A_ERROR,
    A_FAILED_AT,
    REDRIVE_ERROR,
    SQS_MAX_BATCH,
    api_attrs,
    attempts_before,
    job_from,
    received_job,
)
from skald.ports import DeadLetter

log = logging.getLogger(__name__)

_PEEK_HIDE_S = 30
_PEEK_CAP = 1000  # dead letters examined by one dead_letters() call


def queue_counts(sqs: Any, url: str) -> dict[str, int]:
    """SQS's approximate message counts of one queue."""
    attrs = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesDelayed",
            "ApproximateNumberOfMessagesNotVisible",
        ],
    ).get("Attributes", {})
    return {name: int(value) for name, value in attrs.items()}


def peek_dead_letters(
    sqs: Any, dlq: str, queue: str, limit: int, default_kind: str
) -> list[DeadLetter]:
    """Newest first, at most `limit`, among the first 1000 messages of the DLQ (see
    jobqueue.py's notes on peeking)."""
    seen: dict[str, DeadLetter] = {}
    receipts: list[str] = []
    try:
        while len(seen) < _PEEK_CAP:
            response = sqs.receive_message(
                QueueUrl=dlq,
                MaxNumberOfMessages=SQS_MAX_BATCH,
                VisibilityTimeout=_PEEK_HIDE_S,
                MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                MessageAttributeNames=["All"],
            )
            messages = response.get("Messages", [])
            fresh = [m for m in messages if m["MessageId"] not in seen]
            if not fresh:
                break
            for message in fresh:
                receipts.append(message["ReceiptHandle"])
                seen[message["MessageId"]] = _dead_letter(queue, message, default_kind)
    finally:
        _unhide(sqs, dlq, receipts)
    letters = [d for d in seen.values() if d.job.queue == queue]
    letters.sort(key=lambda d: d.failed_at, reverse=True)
    return letters[:limit]


def _dead_letter(queue: str, message: dict[str, Any], default_kind: str) -> DeadLetter:
    attrs = api_attrs(message)
    system = message.get("Attributes", {})
    if A_ERROR in attrs:
        # Moved by this adapter: `attempts` holds the total deliveries.
        job = job_from(
            body=message.get("Body", ""),
            attrs=attrs,
            message_id=message["MessageId"],
            attempts=attempts_before(attrs),
            queue=queue,
            default_kind=default_kind,
        )
        failed_at = float(attrs.get(A_FAILED_AT, "0") or 0)
        return DeadLetter(job=job, error=attrs[A_ERROR], failed_at=failed_at)
    # Moved by a redrive policy: approximate attempts and time (our peeks count too).
    job = received_job(queue, message, default_kind)
    sent_ms = float(system.get("SentTimestamp", "0") or 0)
    return DeadLetter(job=job, error=REDRIVE_ERROR, failed_at=sent_ms / 1000.0)


def _unhide(sqs: Any, dlq: str, receipts: list[str]) -> None:
    for start in range(0, len(receipts), SQS_MAX_BATCH):
        chunk = receipts[start : start + SQS_MAX_BATCH]
        try:
            sqs.change_message_visibility_batch(
                QueueUrl=dlq,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": 0}
                    for i, r in enumerate(chunk)
                ],
            )
        except ClientError:
            # They reappear by themselves after _PEEK_HIDE_S.
            log.warning("could not make peeked dead letters visible again", exc_info=True)


def purge_dead_letters(
    sqs: Any,
    dlq: str,
    account_id: str,
    user_id: str | None,
    limit: int,
    drop_payload: Callable[[dict[str, Any]], None],
) -> int:
    """Deletes the dead letters of a removed account (or user) from `dlq`, among its first
    1000 messages, with their stored payloads (`drop_payload`); the others are made visible
    again. A body names its account and user, also when its payload was stored apart."""
    removed = 0
    keep: list[str] = []
    seen: set[str] = set()
    try:
        while removed < limit and len(seen) < _PEEK_CAP:
            response = sqs.receive_message(
                QueueUrl=dlq, MaxNumberOfMessages=SQS_MAX_BATCH, VisibilityTimeout=_PEEK_HIDE_S
            )
            fresh = [m for m in response.get("Messages", []) if m["MessageId"] not in seen]
            if not fresh:
                break
            for message in fresh:
                seen.add(message["MessageId"])
                body = _body(message)
                if body.get("account") != account_id or (
                    user_id is not None and body.get("user") != user_id
                ):
                    keep.append(message["ReceiptHandle"])
                    continue
                drop_payload(body)
                sqs.delete_message(QueueUrl=dlq, ReceiptHandle=message["ReceiptHandle"])
                removed += 1
    finally:
        _unhide(sqs, dlq, keep)
    return removed


def _body(message: dict[str, Any]) -> dict[str, Any]:
    try:
        body = json.loads(message.get("Body") or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
