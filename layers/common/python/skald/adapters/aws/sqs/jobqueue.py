"""JobQueue on Amazon SQS: one SQS queue per logical queue, plus an optional DLQ each.

The message codec lives in messages.py, the counters and dedup registry in counters.py,
dead-letter peeks and purges in inspect.py (their public names are importable from here),
batched sends in batches.py.

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
* Payloads too large for one message (body + attributes over 256 KiB) go to S3 when a
  payload store (payloads.S3PayloadStore) serves the queue: the message carries a
  reference, lease() resolves it, ack deletes the object, nack's retry copy and the DLQ copy
  keep the reference (nothing is uploaded twice, a redrive still finds it). The object is
  uploaded after the dedup claim, just before the send; without a store such a payload
  raises PayloadTooLarge before anything is written. The reference of a leased job is kept
  in memory, by receipt, until it is settled (the lease and its settling happen in one
  process).
* Fairness (fair_share.py): a standard queue's messages go in their account's message group
  (SQS fair queues); each account's jobs not done yet are counted beside the queue
  (`accounts`, DynamoDB in a deployment) for per-account admission, and the worker Lambdas
  cap the jobs of one account running at once with its slots there.
* IAM: sqs:SendMessage, ReceiveMessage, DeleteMessage, ChangeMessageVisibility,
  GetQueueAttributes on the queues and their DLQs (and the payload store's, see there).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.sqs.account_counts import AccountCounts
from skald.adapters.aws.sqs.batches import Prepared, batch_chunks, send_batch
from skald.adapters.aws.sqs.counters import (
    DedupRegistry,
    InMemoryDedupRegistry,
    InMemoryJobCounters,
    JobCounters,
)
from skald.adapters.aws.sqs.fair_share import A_COUNTED, FairQueue, FairShare
from skald.adapters.aws.sqs.inspect import peek_dead_letters, purge_dead_letters, queue_counts
from skald.adapters.aws.sqs.messages import (
    A_ATTEMPTS,
    A_DEDUP,
    A_ERROR,
    A_FAILED_AT,
    A_JOB_ID,
    A_KIND,
    A_QUEUE,
    REDRIVE_ERROR,
    SQS_MAX_BATCH,
    SQS_MAX_DELAY_S,
    SQS_MAX_VISIBILITY_S,
    EnqueueItem,
    api_attrs,
    checked,
    clean_attribute,
    group_id,
    is_fifo,
    is_stale,
    message_attributes,
    number_attribute,
    received_job,
    sqs_record_to_lease,
    sqs_records_to_jobs,
    string_attribute,
    whole_seconds,
)
from skald.adapters.aws.sqs.payloads import (
    ClaimCheck,
    LargePayloads,
    PayloadMissing,
    PayloadRef,
    PayloadTooLarge,
    S3PayloadStore,
)
from skald.domain.ops.fairness import job_account
from skald.ports import DeadLetter, Job, Lease, QueueStats

log = logging.getLogger(__name__)

_HOLD_S = 30  # visibility set by the receipt probe of ack/nack, just before they settle
_ERROR_MAX_CHARS = 8000
_SETTLE_OUTCOMES = frozenset({"processed", "failed_attempts"})


def _mark(entry: dict[str, Any]) -> str | None:
    attr = entry["MessageAttributes"].get(A_COUNTED)
    return None if attr is None else str(attr["StringValue"])


__all__ = [
    "A_ATTEMPTS",
    "A_DEDUP",
    "A_ERROR",
    "A_FAILED_AT",
    "A_JOB_ID",
    "A_KIND",
    "A_QUEUE",
    "REDRIVE_ERROR",
    "SQS_MAX_BATCH",
    "SQS_MAX_DELAY_S",
    "SQS_MAX_VISIBILITY_S",
    "DedupRegistry",
    "EnqueueItem",
    "InMemoryDedupRegistry",
    "InMemoryJobCounters",
    "JobCounters",
    "PayloadMissing",
    "PayloadTooLarge",
    "S3PayloadStore",
    "SqsJobQueue",
    "SqsSendError",
    "sqs_record_to_lease",
    "sqs_records_to_jobs",
]


class SqsSendError(RuntimeError):
    """SQS refused some messages of a batch, even after retries."""


class SqsJobQueue(FairQueue, LargePayloads):
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
        payloads: S3PayloadStore | None = None,
        accounts: AccountCounts | None = None,
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
        self._payloads = payloads
        self._claims = ClaimCheck(payloads)
        self._fair = FairShare(accounts, clock)

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
        item = checked(EnqueueItem(kind, payload, dedup_key, delay_s))
        job_id = uuid.uuid4().hex
        mark = self._fair.mark_for(item.payload)
        entry = self._entry(url, queue, item, job_id, counted=mark)  # may raise: before claiming
        holder = self._claim(queue, item, job_id)
        if holder != job_id:
            return holder
        try:
            self._claims.offload(queue, job_id, entry, item.payload)
            self._sqs.send_message(QueueUrl=url, **entry)
        except BaseException:
            # An uploaded payload stays: a send that failed after SQS took the message would
            # otherwise lose the job. The lifecycle rule removes it if it was not sent.
            self._release(queue, item.dedup_key, job_id)
            raise
        self._fair.queued([(item.payload, mark)])
        return job_id

    def enqueue_batch(self, queue: str, items: Iterable[EnqueueItem]) -> list[str]:
        """enqueue() for many jobs with SendMessageBatch (10 a request); returns the job ids in
        order. Entries SQS fails for a transient reason are retried; raises SqsSendError when
        some still fail (those jobs were not enqueued; the others were)."""
        url = self._url(queue)
        ids: list[str] = []
        pending: list[Prepared] = []
        prepared: list[Prepared] = []
        for item in items:  # every entry is built (and validated) before anything is claimed
            job_id = uuid.uuid4().hex
            mark = self._fair.mark_for(item.payload)
            entry = self._entry(url, queue, checked(item), job_id, counted=mark)
            prepared.append((item, job_id, entry))
        for item, job_id, entry in prepared:
            ids.append(holder := self._claim(queue, item, job_id))
            if holder == job_id:
                pending.append((item, job_id, entry))
        refs = self._offload_all(queue, pending)
        failed: list[tuple[EnqueueItem, str, str]] = []
        for chunk in batch_chunks(pending):
            failed.extend(send_batch(self._sqs, url, chunk))
        lost = {job_id for _, job_id, _ in failed}
        self._fair.queued(
            (item.payload, _mark(entry)) for item, job_id, entry in pending if job_id not in lost
        )
        if failed:
            for item, job_id, _ in failed:
                self._release(queue, item.dedup_key, job_id)
            # SQS reported these entries as not sent: their payloads serve no message.
            self._claims.drop(refs[job_id] for _, job_id, _ in failed if job_id in refs)
            reasons = "; ".join(sorted({reason for _, _, reason in failed}))
            raise SqsSendError(f"{len(failed)} of {len(ids)} jobs not enqueued: {reasons}")
        return ids

    def _offload_all(self, queue: str, pending: list[Prepared]) -> dict[str, PayloadRef]:
        refs: dict[str, PayloadRef] = {}
        try:
            for item, job_id, entry in pending:
                if (ref := self._claims.offload(queue, job_id, entry, item.payload)) is not None:
                    refs[job_id] = ref
        except BaseException:
            for item, job_id, _ in pending:
                self._release(queue, item.dedup_key, job_id)
            self._claims.drop(refs.values())  # a failed offload: nothing was sent
            raise
        return refs

    def _claim(self, queue: str, item: EnqueueItem, job_id: str) -> str:
        """`job_id` when it is a new job to send, else the id of the pending job absorbing it."""
        if item.dedup_key is None or self._dedup is None:
            return job_id
        ttl = self._dedup_ttl_s + max(0.0, item.delay_s)
        return self._dedup.claim(queue, item.dedup_key, job_id, ttl)

    def _release(self, queue: str, dedup_key: str | None, job_id: str) -> None:
        if dedup_key is not None and self._dedup is not None:
            self._dedup.release(queue, dedup_key, job_id)

    def _entry(
        self,
        url: str,
        queue: str,
        item: EnqueueItem,
        job_id: str,
        prior_attempts: int = 0,
        body: str | None = None,
        counted: str | None = None,
    ) -> dict[str, Any]:
        """SendMessage parameters (without QueueUrl) for one job; `body` replaces the
        payload's JSON (a retry copy keeps its payload reference). Raises PayloadTooLarge
        when the message cannot be sent and no payload store takes the payload."""
        entry: dict[str, Any] = {
            # ASCII-only: always valid for SQS
            "MessageBody": json.dumps(item.payload) if body is None else body,
            "MessageAttributes": message_attributes(
                job_id, queue, item.kind, item.dedup_key, prior_attempts
            ),
        }
        self._claims.must_offload(queue, entry)
        if is_fifo(url):
            if item.delay_s > 0:
                raise ValueError("FIFO queues have no per-message delay")
            entry["MessageGroupId"] = group_id(item.dedup_key, job_id)
            entry["MessageDeduplicationId"] = f"{job_id}-{prior_attempts}"
        else:
            self._fair.dress(entry, item.payload, counted)
            if item.delay_s > 0:
                entry["DelaySeconds"] = whole_seconds(item.delay_s, SQS_MAX_DELAY_S)
        return entry

    # ---------------------------------------------------------------------------------------
    # lease and settle

    def lease(self, queue: str, *, max_jobs: int = 1, visibility_s: float = 60.0) -> list[Lease]:
        url = self._urls.get(queue)
        if url is None or max_jobs < 1:
            return []
        visibility = whole_seconds(visibility_s, SQS_MAX_VISIBILITY_S)
        default_kind = self._default_kinds.get(queue, "")
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
                lease = Lease(
                    job=received_job(queue, message, default_kind), receipt=message["ReceiptHandle"]
                )
                # Buried before its payload is read: the DLQ copy keeps the reference.
                if self.dead_letter_if_exhausted(lease):
                    continue
                opened = self._open(url, lease)
                if opened is None:
                    continue
                self._fair.remember(lease.receipt, api_attrs(message).get(A_COUNTED))
                self.mark_started(opened.job)
                leases.append(opened)
        return leases

    def count_settled(self, queue: str, outcome: str) -> None:
        """A job run by a worker an event source mapping feeds (SettleCounts)."""
        if outcome not in _SETTLE_OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}: one of {sorted(_SETTLE_OUTCOMES)}")
        if queue not in self._urls:
            raise KeyError(f"no SQS queue configured for job queue '{queue}'")
        self._count(queue, outcome)

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
        self._bury(url, lease, f"lease expired after {deliveries} deliveries", attempts=deliveries)
        return True

    def _hold(self, url: str, receipt: str, seconds: int = _HOLD_S) -> bool:
        """ChangeMessageVisibility: False when the receipt is stale (see the module notes)."""
        try:
            self._sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=seconds
            )
        except ClientError as exc:
            if is_stale(exc):
                return False
            raise
        return True

    def _delete(self, url: str, receipt: str) -> bool:
        try:
            self._sqs.delete_message(QueueUrl=url, ReceiptHandle=receipt)
        except ClientError as exc:
            if is_stale(exc):
                return False
            raise
        return True

    def ack(self, lease: Lease) -> bool:
        url = self._urls.get(lease.job.queue)
        ref = self._claims.forget(lease.receipt)
        if url is None or not self._hold(url, lease.receipt):
            return False
        if not self._delete(url, lease.receipt):
            return False  # stale: the payload stays for whoever holds the job now
        self._count(lease.job.queue, "processed")
        self._fair.settled(job_account(lease.job.payload), self._fair.forget(lease.receipt))
        if ref is not None:
            self._claims.drop([ref])  # after the message: a crash leaves only an orphan
        return True

    def nack(self, lease: Lease, error: str) -> None:
        job = lease.job
        url = self._urls.get(job.queue)
        ref = self._claims.forget(lease.receipt)
        if url is None:
            return
        exhausted = job.attempts >= self._max_attempts
        delay = self.backoff_s(job.attempts)
        if is_fifo(url) and not exhausted:
            # The retry waits in flight: FIFO queues have no per-message delay.
            if self._hold(url, lease.receipt, whole_seconds(delay, SQS_MAX_VISIBILITY_S)):
                self._count(job.queue, "failed_attempts")
            return
        if not self._hold(url, lease.receipt):
            return  # stale: someone else holds the job now
        self._count(job.queue, "failed_attempts")
        if exhausted:
            self._bury(url, lease, error, attempts=job.attempts, ref=ref)
            return
        mark = self._fair.forget(lease.receipt)
        self._fair.remember(lease.receipt, mark)  # until the copy is sent
        item = EnqueueItem(job.kind, job.payload, job.dedup_key, min(delay, SQS_MAX_DELAY_S))
        entry = self._entry(
            url,
            job.queue,
            item,
            job.job_id,
            prior_attempts=job.attempts,
            body=ref.body(job.payload) if ref is not None else None,
            counted=mark,
        )
        self._sqs.send_message(QueueUrl=url, **entry)
        self._fair.forget(lease.receipt)
        self._delete(url, lease.receipt)

    def extend(self, lease: Lease, visibility_s: float) -> bool:
        url = self._urls.get(lease.job.queue)
        if url is None:
            return False
        return self._hold(url, lease.receipt, whole_seconds(visibility_s, SQS_MAX_VISIBILITY_S))

    def _bury(
        self, url: str, lease: Lease, error: str, *, attempts: int, ref: PayloadRef | None = None
    ) -> None:
        """Moves a job to its queue's DLQ (send, then delete: a crash in between duplicates).
        A payload in the store stays there, referred to by the dead letter."""
        job = lease.job
        error = clean_attribute(error[:_ERROR_MAX_CHARS]) or "(no error message)"
        dlq = self._dlqs.get(job.queue)
        if dlq is None:
            log.error(
                "no DLQ configured for queue %s: dropping job %s (%s) after %d attempts: %s",
                job.queue,
                job.job_id,
                job.kind,
                attempts,
                error,
            )
        else:
            attrs = message_attributes(job.job_id, job.queue, job.kind, job.dedup_key, attempts)
            attrs[A_ERROR] = string_attribute(error)
            attrs[A_FAILED_AT] = number_attribute(self._clock())
            params: dict[str, Any] = {
                "QueueUrl": dlq,
                "MessageBody": (
                    ref.body(job.payload) if ref is not None else json.dumps(job.payload)
                ),
                "MessageAttributes": attrs,
            }
            if is_fifo(dlq):
                params["MessageGroupId"] = group_id(job.dedup_key, job.job_id)
                params["MessageDeduplicationId"] = f"{job.job_id}-dead"
            else:
                FairShare.dress(params, job.payload, None)
            self._sqs.send_message(**params)
        self._delete(url, lease.receipt)
        self._fair.settled(job_account(job.payload), self._fair.forget(lease.receipt))

    # ---------------------------------------------------------------------------------------
    # observation

    def stats(self, queue: str) -> QueueStats:
        pending = inflight = dead = 0
        url = self._urls.get(queue)
        if url is not None:
            counts = queue_counts(self._sqs, url)
            pending = counts.get("ApproximateNumberOfMessages", 0) + counts.get(
                "ApproximateNumberOfMessagesDelayed", 0
            )
            inflight = counts.get("ApproximateNumberOfMessagesNotVisible", 0)
        dlq = self._dlqs.get(queue)
        if dlq is not None:
            dead = sum(queue_counts(self._sqs, dlq).values())  # peeked dead letters are not visible
        counters = self._counters.get(queue) if self._counters is not None else {}
        return QueueStats(
            pending=pending,
            inflight=inflight,
            processed=int(counters.get("processed", 0)),
            failed_attempts=int(counters.get("failed_attempts", 0)),
            dead=dead,
        )

    def depth(self, queue: str) -> int:
        url = self._urls.get(queue)
        if url is None:
            return 0
        counts = queue_counts(self._sqs, url)
        return sum(counts.values())  # visible, delayed and in flight

    def purge_tenant(
        self, account_id: str, user_id: str | None = None, *, limit: int = 1000
    ) -> int:
        """Dead letters only: SQS cannot delete a waiting message unseen; workers drop those.
        A whole account's counts go too."""
        if user_id is None:
            self._fair.drop(account_id)
        removed = 0
        for dlq in self._dlqs.values():
            if removed >= limit:
                break
            removed += purge_dead_letters(
                self._sqs, dlq, account_id, user_id, limit - removed, self.payload_done
            )
        return removed

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadLetter]:
        """Newest first, at most `limit`, among the first 1000 messages of the DLQ."""
        dlq = self._dlqs.get(queue)
        if dlq is None or limit <= 0:
            return []
        return peek_dead_letters(self._sqs, dlq, queue, limit, self._default_kinds.get(queue, ""))
