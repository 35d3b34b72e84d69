"""JobQueue on Amazon SQS: one SQS queue per logical queue, plus an optional DLQ each.

Design notes (the integrator should know these):

* Message body = the payload as JSON; message attributes carry `kind`, `job_id`, `queue` (the
  logical name), `dedup_key` and `attempts` (deliveries of earlier copies, see nack). The job
  id is ours (a uuid), not the SQS MessageId, because a retry is a new message.
* lease = ReceiveMessage; the receipt is the ReceiptHandle; attempts = `attempts` attribute +
  ApproximateReceiveCount. A message delivered more than `max_attempts` times (its leases
  expired) is moved to the DLQ by lease() itself (send + delete), whether or not a redrive
  policy would have done it.
* ack/nack/extend first ChangeMessageVisibility with the receipt: SQS rejects an expired or
  superseded receipt there ("The receipt handle has expired"), whereas DeleteMessage with an
  old receipt may succeed. That makes a stale receipt return False / do nothing, and keeps the
  `processed` counter exact, at the cost of one more request per ack. (moto accepts every
  receipt a message ever had, so this is verified only against botocore's Stubber.)
* nack on a standard queue sends a copy with DelaySeconds = backoff (so it counts as pending,
  "delayed", not in flight) and `attempts` carried over, then deletes the original. SQS caps
  DelaySeconds at 900 s: a longer backoff is cut to 900 s there. A crash between the two calls
  duplicates the job (at-least-once), never loses it. FIFO queues have no per-message delay:
  there nack is ChangeMessageVisibility(backoff), so the waiting retry shows as in flight.
  After `max_attempts`, nack sends the job to the DLQ with the error and failure time as
  attributes, then deletes it. Without a DLQ url for the queue the job is logged and dropped.
* Dedup while pending needs shared, strongly consistent state SQS does not have. Pass a
  `DedupRegistry` (InMemoryDedupRegistry in one process; a DynamoDB one for Lambdas): enqueue
  claims (queue, dedup_key) for the new job id and returns the claimed id when one exists;
  the first delivery releases the claim (lease() does it; a Lambda fed by an event source
  mapping must call mark_started). Claims expire after `dedup_ttl_s` (+ the delay), so a
  worker that never releases costs at most that long of absorbed enqueues, and a backlog older
  than that only costs duplicates. Without a registry every enqueue sends a message: jobs are
  processed at least once anyway, so duplicates cost work, never correctness.
  FIFO queues: MessageDeduplicationId = job id (retried sends are idempotent, distinct
  enqueues never absorbed: SQS's 5-minute dedup would also absorb into a running job, which
  the port forbids) and MessageGroupId = a hash of dedup_key (jobs for one key run one at a
  time) or the job id; enqueue with delay_s > 0 raises ValueError on FIFO queues.
* Standard queues are at-least-once and only roughly ordered: a job can, rarely, be delivered
  twice or out of order. Statistics are SQS's approximate counts.
* stats: pending = ApproximateNumberOfMessages + ...Delayed, inflight = ...NotVisible, dead =
  all messages of the DLQ; processed / failed_attempts come from `counters` (0 without one).
* dead_letters peeks: it receives the DLQ with a short visibility timeout (hiding what it has
  seen, so it can page past 10 messages), then puts every message back with
  ChangeMessageVisibility 0. VisibilityTimeout=0 alone would serve the same first messages on
  every receive. Messages moved by a redrive policy carry no error attribute. On a FIFO DLQ
  a hidden message also hides the rest of its message group, so a peek may miss some.
* IAM: sqs:SendMessage, ReceiveMessage, DeleteMessage, ChangeMessageVisibility,
  GetQueueAttributes on the queues and their DLQs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from botocore.exceptions import ClientError

from skald.ports import DeadLetter, Job, Lease, QueueStats

log = logging.getLogger(__name__)

SQS_MAX_DELAY_S = 900
SQS_MAX_VISIBILITY_S = 43_200
SQS_MAX_BATCH = 10
_BATCH_BYTES = 256 * 1024  # conservative: the historical SendMessageBatch limit
_BATCH_RETRIES = 4
_HOLD_S = 30  # visibility set by the receipt probe of ack/nack, just before they settle
_PEEK_HIDE_S = 30
_PEEK_CAP = 1000  # dead letters examined by one dead_letters() call
_ERROR_MAX_CHARS = 8000
_STALE_CODES = {"ReceiptHandleIsInvalid", "InvalidParameterValue", "MessageNotInflight"}

A_KIND, A_JOB_ID, A_QUEUE, A_DEDUP, A_ATTEMPTS = "kind", "job_id", "queue", "dedup_key", "attempts"
A_ERROR, A_FAILED_AT = "error", "failed_at"
REDRIVE_ERROR = "dead-lettered by the queue's redrive policy"


# --------------------------------------------------------------------------------------------
# collaborators


@runtime_checkable
class JobCounters(Protocol):
    """Durable per-queue counters ("processed", "failed_attempts", ...)."""

    def incr(self, queue: str, name: str, by: int = 1) -> None: ...

    def get(self, queue: str) -> dict[str, int]: ...


class InMemoryJobCounters:
    """JobCounters for tests and single-process use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[str, int]] = defaultdict(dict)

    def incr(self, queue: str, name: str, by: int = 1) -> None:
        with self._lock:
            row = self._values[queue]
            row[name] = row.get(name, 0) + by

    def get(self, queue: str) -> dict[str, int]:
        with self._lock:
            return dict(self._values.get(queue, {}))


@runtime_checkable
class DedupRegistry(Protocol):
    """Which never-delivered job currently holds each (queue, dedup_key)."""

    def claim(self, queue: str, key: str, job_id: str, ttl_s: float) -> str:
        """Atomically: the job id holding (queue, key) if a live claim exists, else registers
        `job_id` for `ttl_s` seconds and returns it."""
        ...

    def release(self, queue: str, key: str, job_id: str) -> None:
        """Drops the claim on (queue, key) if `job_id` still holds it."""
        ...


class InMemoryDedupRegistry:
    """DedupRegistry for tests and single-process use."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], tuple[str, float]] = {}
        self._clock = clock

    def claim(self, queue: str, key: str, job_id: str, ttl_s: float) -> str:
        now = self._clock()
        with self._lock:
            held = self._claims.get((queue, key))
            if held is not None and held[1] > now:
                return held[0]
            self._claims[(queue, key)] = (job_id, now + ttl_s)
            return job_id

    def release(self, queue: str, key: str, job_id: str) -> None:
        with self._lock:
            held = self._claims.get((queue, key))
            if held is not None and held[0] == job_id:
                del self._claims[(queue, key)]


@dataclass(frozen=True)
class EnqueueItem:
    kind: str
    payload: dict[str, Any]
    dedup_key: str | None = None
    delay_s: float = 0.0


class SqsSendError(RuntimeError):
    """SQS refused some messages of a batch, even after retries."""


# --------------------------------------------------------------------------------------------
# helpers


def _error_code(exc: ClientError) -> str:
    # JSON-protocol SQS may answer "AWS.SimpleQueueService.MessageNotInflight".
    return str(exc.response.get("Error", {}).get("Code", "")).rsplit(".", 1)[-1]


def _is_stale(exc: ClientError) -> bool:
    return _error_code(exc) in _STALE_CODES


def _is_fifo(url: str) -> bool:
    return url.endswith(".fifo")


def _seconds(value: float, upper: int) -> int:
    """SQS takes whole seconds: round up, so a wait is never shorter than asked."""
    return max(0, min(upper, math.ceil(value)))


def _clean(text: str) -> str:
    """Replaces characters SQS refuses in message attributes (XML 1.0's forbidden set)."""
    out = []
    for ch in text:
        cp = ord(ch)
        ok = cp in (0x9, 0xA, 0xD) or 0x20 <= cp <= 0xD7FF or 0xE000 <= cp <= 0xFFFD or (
            0x10000 <= cp <= 0x10FFFF
        )
        out.append(ch if ok else "\ufffd")
    return "".join(out)


def _group_id(dedup_key: str | None, job_id: str) -> str:
    if dedup_key is None:
        return job_id
    return "k-" + hashlib.sha256(dedup_key.encode()).hexdigest()[:40]


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def _number(value: float | int) -> dict[str, str]:
    return {"DataType": "Number", "StringValue": repr(value)}


def _attributes(job_id: str, queue: str, kind: str, dedup_key: str | None,
                attempts: int) -> dict[str, dict[str, str]]:
    attrs = {
        A_JOB_ID: _string(job_id),
        A_QUEUE: _string(queue),
        A_ATTEMPTS: _number(attempts),
    }
    if kind:  # SQS refuses empty values; only a foreign message (no kind) can lack one
        attrs[A_KIND] = _string(kind)
    if dedup_key is not None:
        attrs[A_DEDUP] = _string(dedup_key)
    return attrs


def _entry_size(entry: dict[str, Any]) -> int:
    size = len(entry["MessageBody"].encode())
    for name, value in entry.get("MessageAttributes", {}).items():
        size += len(name.encode()) + len(value["DataType"]) + len(value["StringValue"].encode())
    return size


def _parse_body(body: str) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except ValueError:
        return {"body": body}
    return payload if isinstance(payload, dict) else {"body": payload}


def _checked(item: EnqueueItem) -> EnqueueItem:
    if not item.kind:
        raise ValueError("job kind must be non-empty")
    if item.dedup_key == "":
        raise ValueError("dedup_key must be non-empty (or None)")  # SQS refuses empty values
    return item


def _prior_attempts(attrs: dict[str, str]) -> int:
    try:
        return int(float(attrs.get(A_ATTEMPTS, "0")))
    except ValueError:
        return 0


def _job_from(
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
        payload=_parse_body(body),
        attempts=attempts,
        dedup_key=attrs.get(A_DEDUP),
    )


def _api_attrs(message: dict[str, Any]) -> dict[str, str]:
    return {
        name: str(value.get("StringValue", ""))
        for name, value in message.get("MessageAttributes", {}).items()
    }


# --------------------------------------------------------------------------------------------


class SqsJobQueue:
    """JobQueue on SQS. Thread-safe (boto3 clients are); see the module notes."""

    def __init__(
        self,
        sqs_client: Any,
        queue_urls: dict[str, str],
        *,
        counters: JobCounters | None = None,
        max_attempts: int = 5,
        dlq_urls: dict[str, str] | None = None,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 900.0,
        dedup: DedupRegistry | None = None,
        dedup_ttl_s: float = 300.0,
        default_kinds: dict[str, str] | None = None,
        wait_time_s: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self._sqs = sqs_client
        self._urls = dict(queue_urls)
        self._dlqs = dict(dlq_urls or {})
        self._counters = counters
        self._max_attempts = max_attempts
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._dedup = dedup
        self._dedup_ttl_s = dedup_ttl_s
        self._default_kinds = dict(default_kinds or {})
        self._wait_time_s = max(0, min(20, wait_time_s))
        self._clock = clock

    @property
    def max_attempts(self) -> int:
        return self._max_attempts

    def backoff_s(self, attempts: int) -> float:
        """Delay before the retry that follows failed delivery number `attempts` (1-based)."""
        exponent = max(0, attempts - 1)
        if exponent > 60:
            return self._backoff_max_s
        return float(min(self._backoff_max_s, self._backoff_base_s * 2**exponent))

    def _url(self, queue: str) -> str:
        try:
            return self._urls[queue]
        except KeyError:
            raise KeyError(f"no SQS queue configured for job queue '{queue}'") from None

    def _count(self, queue: str, name: str) -> None:
        if self._counters is not None:
            self._counters.incr(queue, name, 1)

    # ---------------------------------------------------------------------------------------
    # enqueue

    def enqueue(
        self,
        queue: str,
        kind: str,
        payload: dict[str, Any],
        *,
        dedup_key: str | None = None,
        delay_s: float = 0.0,
    ) -> str:
        url = self._url(queue)
        item = _checked(EnqueueItem(kind, payload, dedup_key, delay_s))
        job_id = uuid.uuid4().hex
        entry = self._entry(url, queue, item, job_id)  # may raise: before claiming
        holder = self._claim(queue, item, job_id)
        if holder != job_id:
            return holder
        try:
            self._sqs.send_message(QueueUrl=url, **entry)
        except BaseException:
            self._release(queue, item.dedup_key, job_id)
            raise
        return job_id

    def enqueue_batch(self, queue: str, items: Iterable[EnqueueItem]) -> list[str]:
        """enqueue() for many jobs with SendMessageBatch (10 a request); returns the job ids in
        order. Entries SQS fails for a transient reason are retried; raises SqsSendError when
        some still fail (those jobs were not enqueued; the others were)."""
        url = self._url(queue)
        ids: list[str] = []
        pending: list[tuple[EnqueueItem, str, dict[str, Any]]] = []
        prepared: list[tuple[EnqueueItem, str, dict[str, Any]]] = []
        for item in items:  # every entry is built (and validated) before anything is claimed
            job_id = uuid.uuid4().hex
            prepared.append((item, job_id, self._entry(url, queue, _checked(item), job_id)))
        for item, job_id, entry in prepared:
            holder = self._claim(queue, item, job_id)
            ids.append(holder)
            if holder == job_id:
                pending.append((item, job_id, entry))
        failed: list[tuple[EnqueueItem, str, str]] = []
        for chunk in self._chunks(pending):
            failed.extend(self._send_chunk(url, chunk))
        if failed:
            for item, job_id, _ in failed:
                self._release(queue, item.dedup_key, job_id)
            reasons = "; ".join(sorted({reason for _, _, reason in failed}))
            raise SqsSendError(f"{len(failed)} of {len(ids)} jobs not enqueued: {reasons}")
        return ids

    @staticmethod
    def _chunks(
        entries: Sequence[tuple[EnqueueItem, str, dict[str, Any]]],
    ) -> Iterable[list[tuple[EnqueueItem, str, dict[str, Any]]]]:
        chunk: list[tuple[EnqueueItem, str, dict[str, Any]]] = []
        size = 0
        for entry in entries:
            entry_size = _entry_size(entry[2])
            if chunk and (len(chunk) == SQS_MAX_BATCH or size + entry_size > _BATCH_BYTES):
                yield chunk
                chunk, size = [], 0
            chunk.append(entry)
            size += entry_size
        if chunk:
            yield chunk

    def _send_chunk(
        self, url: str, chunk: list[tuple[EnqueueItem, str, dict[str, Any]]]
    ) -> list[tuple[EnqueueItem, str, str]]:
        """Sends one batch, retrying transient entry failures; returns what still failed."""
        todo = {job_id: (item, entry) for item, job_id, entry in chunk}
        failed: list[tuple[EnqueueItem, str, str]] = []
        for attempt in range(_BATCH_RETRIES):
            if attempt:
                time.sleep(0.05 * 2**attempt)
            response = self._sqs.send_message_batch(
                QueueUrl=url,
                Entries=[{"Id": job_id, **entry} for job_id, (_, entry) in todo.items()],
            )
            retry: dict[str, tuple[EnqueueItem, dict[str, Any]]] = {}
            for failure in response.get("Failed", []):
                job_id = failure["Id"]
                reason = f"{failure.get('Code', '?')}: {failure.get('Message', '')}"
                if failure.get("SenderFault"):
                    failed.append((todo[job_id][0], job_id, reason))  # retrying cannot help
                else:
                    retry[job_id] = todo[job_id]
            todo = retry
            if not todo:
                return failed
        failed.extend((item, job_id, "still failing after retries")
                      for job_id, (item, _) in todo.items())
        return failed

    def _claim(self, queue: str, item: EnqueueItem, job_id: str) -> str:
        """`job_id` when it is a new job to send, else the id of the pending job absorbing it."""
        if item.dedup_key is None or self._dedup is None:
            return job_id
        ttl = self._dedup_ttl_s + max(0.0, item.delay_s)
        return self._dedup.claim(queue, item.dedup_key, job_id, ttl)

    def _release(self, queue: str, dedup_key: str | None, job_id: str) -> None:
        if dedup_key is not None and self._dedup is not None:
            self._dedup.release(queue, dedup_key, job_id)

    def _entry(self, url: str, queue: str, item: EnqueueItem, job_id: str,
               prior_attempts: int = 0) -> dict[str, Any]:
        """SendMessage parameters (without QueueUrl) for one job."""
        entry: dict[str, Any] = {
            "MessageBody": json.dumps(item.payload),  # ASCII-only: always valid for SQS
            "MessageAttributes": _attributes(job_id, queue, item.kind, item.dedup_key,
                                             prior_attempts),
        }
        if _is_fifo(url):
            if item.delay_s > 0:
                raise ValueError("FIFO queues have no per-message delay")
            entry["MessageGroupId"] = _group_id(item.dedup_key, job_id)
            entry["MessageDeduplicationId"] = f"{job_id}-{prior_attempts}"
        elif item.delay_s > 0:
            entry["DelaySeconds"] = _seconds(item.delay_s, SQS_MAX_DELAY_S)
        return entry

    # ---------------------------------------------------------------------------------------
    # lease and settle

    def lease(self, queue: str, *, max_jobs: int = 1, visibility_s: float = 60.0) -> list[Lease]:
        url = self._urls.get(queue)
        if url is None or max_jobs < 1:
            return []
        visibility = _seconds(visibility_s, SQS_MAX_VISIBILITY_S)
        leases: list[Lease] = []
        while len(leases) < max_jobs:
            response = self._sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=min(SQS_MAX_BATCH, max_jobs - len(leases)),
                VisibilityTimeout=visibility,
                WaitTimeSeconds=self._wait_time_s,
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
                MessageAttributeNames=["All"],
            )
            messages = response.get("Messages", [])
            if not messages:
                break
            for message in messages:
                lease = Lease(job=self._job(queue, message), receipt=message["ReceiptHandle"])
                if self.dead_letter_if_exhausted(lease):
                    continue
                self.mark_started(lease.job)
                leases.append(lease)
        return leases

    def _job(self, queue: str, message: dict[str, Any]) -> Job:
        attrs = _api_attrs(message)
        received = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        job = _job_from(
            body=message.get("Body", ""),
            attrs=attrs,
            message_id=message["MessageId"],
            attempts=_prior_attempts(attrs) + max(1, received),
            queue=queue,
            default_kind=self._default_kinds.get(queue, ""),
        )
        # The queue it was received from is authoritative: settling uses its URL.
        return replace(job, queue=queue)

    def mark_started(self, job: Job) -> None:
        """Releases the job's dedup claim: from now on an enqueue with its key makes a new job.
        lease() calls it; a worker fed by a Lambda event source mapping must call it too."""
        self._release(job.queue, job.dedup_key, job.job_id)

    def dead_letter_if_exhausted(self, lease: Lease) -> bool:
        """Dead-letters a job delivered more than max_attempts times (its leases expired);
        True when it did. lease() calls it; Lambda workers may too."""
        if lease.job.attempts <= self._max_attempts:
            return False
        url = self._urls.get(lease.job.queue)
        if url is None:
            return False
        deliveries = lease.job.attempts - 1
        self._bury(url, lease, f"lease expired after {deliveries} deliveries",
                   attempts=deliveries)
        return True

    def _hold(self, url: str, receipt: str, seconds: int = _HOLD_S) -> bool:
        """ChangeMessageVisibility: False when the receipt is stale (see the module notes)."""
        try:
            self._sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=seconds
            )
        except ClientError as exc:
            if _is_stale(exc):
                return False
            raise
        return True

    def _delete(self, url: str, receipt: str) -> bool:
        try:
            self._sqs.delete_message(QueueUrl=url, ReceiptHandle=receipt)
        except ClientError as exc:
            if _is_stale(exc):
                return False
            raise
        return True

    def ack(self, lease: Lease) -> bool:
        url = self._urls.get(lease.job.queue)
        if url is None or not self._hold(url, lease.receipt):
            return False
        if not self._delete(url, lease.receipt):
            return False
        self._count(lease.job.queue, "processed")
        return True

    def nack(self, lease: Lease, error: str) -> None:
        job = lease.job
        url = self._urls.get(job.queue)
        if url is None:
            return
        exhausted = job.attempts >= self._max_attempts
        delay = self.backoff_s(job.attempts)
        if _is_fifo(url) and not exhausted:
            # The retry waits in flight: FIFO queues have no per-message delay.
            if self._hold(url, lease.receipt, _seconds(delay, SQS_MAX_VISIBILITY_S)):
                self._count(job.queue, "failed_attempts")
            return
        if not self._hold(url, lease.receipt):
            return  # stale: someone else holds the job now
        self._count(job.queue, "failed_attempts")
        if exhausted:
            self._bury(url, lease, error, attempts=job.attempts)
            return
        item = EnqueueItem(job.kind, job.payload, job.dedup_key, min(delay, SQS_MAX_DELAY_S))
        entry = self._entry(url, job.queue, item, job.job_id, prior_attempts=job.attempts)
        self._sqs.send_message(QueueUrl=url, **entry)
        self._delete(url, lease.receipt)

    def extend(self, lease: Lease, visibility_s: float) -> bool:
        url = self._urls.get(lease.job.queue)
        if url is None:
            return False
        return self._hold(url, lease.receipt, _seconds(visibility_s, SQS_MAX_VISIBILITY_S))

    def _bury(self, url: str, lease: Lease, error: str, *, attempts: int) -> None:
        """Moves a job to its queue's DLQ (send, then delete: a crash in between duplicates)."""
        job = lease.job
        error = _clean(error[:_ERROR_MAX_CHARS]) or "(no error message)"
        dlq = self._dlqs.get(job.queue)
        if dlq is None:
            log.error("no DLQ configured for queue %s: dropping job %s (%s) after %d attempts:"
                      " %s", job.queue, job.job_id, job.kind, attempts, error)
        else:
            attrs = _attributes(job.job_id, job.queue, job.kind, job.dedup_key, attempts)
            attrs[A_ERROR] = _string(error)
            attrs[A_FAILED_AT] = _number(self._clock())
            params: dict[str, Any] = {
                "QueueUrl": dlq, "MessageBody": json.dumps(job.payload),
                "MessageAttributes": attrs,
            }
            if _is_fifo(dlq):
                params["MessageGroupId"] = _group_id(job.dedup_key, job.job_id)
                params["MessageDeduplicationId"] = f"{job.job_id}-dead"
            self._sqs.send_message(**params)
        self._delete(url, lease.receipt)

    # ---------------------------------------------------------------------------------------
    # observation

    def _counts(self, url: str) -> dict[str, int]:
        attrs = self._sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesDelayed",
                "ApproximateNumberOfMessagesNotVisible",
            ],
        ).get("Attributes", {})
        return {name: int(value) for name, value in attrs.items()}

    def stats(self, queue: str) -> QueueStats:
        pending = inflight = dead = 0
        url = self._urls.get(queue)
        if url is not None:
            counts = self._counts(url)
            pending = counts.get("ApproximateNumberOfMessages", 0) + counts.get(
                "ApproximateNumberOfMessagesDelayed", 0
            )
            inflight = counts.get("ApproximateNumberOfMessagesNotVisible", 0)
        dlq = self._dlqs.get(queue)
        if dlq is not None:
            dead = sum(self._counts(dlq).values())  # peeked dead letters are not visible
        counters = self._counters.get(queue) if self._counters is not None else {}
        return QueueStats(
            pending=pending,
            inflight=inflight,
            processed=int(counters.get("processed", 0)),
            failed_attempts=int(counters.get("failed_attempts", 0)),
            dead=dead,
        )

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadLetter]:
        """Newest first, at most `limit`, among the first 1000 messages of the DLQ."""
        dlq = self._dlqs.get(queue)
        if dlq is None or limit <= 0:
            return []
        seen: dict[str, DeadLetter] = {}
        receipts: list[str] = []
        try:
            while len(seen) < _PEEK_CAP:
                response = self._sqs.receive_message(
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
                    seen[message["MessageId"]] = self._dead_letter(queue, message)
        finally:
            self._unhide(dlq, receipts)
        letters = [d for d in seen.values() if d.job.queue == queue]
        letters.sort(key=lambda d: d.failed_at, reverse=True)
        return letters[:limit]

    def _dead_letter(self, queue: str, message: dict[str, Any]) -> DeadLetter:
        attrs = _api_attrs(message)
        system = message.get("Attributes", {})
        if A_ERROR in attrs:
            # Moved by this adapter: `attempts` holds the total deliveries.
            job = _job_from(body=message.get("Body", ""), attrs=attrs,
                            message_id=message["MessageId"], attempts=_prior_attempts(attrs),
                            queue=queue, default_kind=self._default_kinds.get(queue, ""))
            failed_at = float(attrs.get(A_FAILED_AT, "0") or 0)
            return DeadLetter(job=job, error=attrs[A_ERROR], failed_at=failed_at)
        # Moved by a redrive policy: approximate attempts and time (our peeks count too).
        job = self._job(queue, message)
        sent_ms = float(system.get("SentTimestamp", "0") or 0)
        return DeadLetter(job=job, error=REDRIVE_ERROR, failed_at=sent_ms / 1000.0)

    def _unhide(self, dlq: str, receipts: list[str]) -> None:
        for start in range(0, len(receipts), SQS_MAX_BATCH):
            chunk = receipts[start:start + SQS_MAX_BATCH]
            try:
                self._sqs.change_message_visibility_batch(
                    QueueUrl=dlq,
                    Entries=[{"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": 0}
                             for i, r in enumerate(chunk)],
                )
            except ClientError:
                # They reappear by themselves after _PEEK_HIDE_S.
                log.warning("could not make peeked dead letters visible again", exc_info=True)


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
    job = _job_from(
        body=str(record.get("body", "")),
        attrs=attrs,
        message_id=str(record["messageId"]),
        attempts=_prior_attempts(attrs) + max(1, received),
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
