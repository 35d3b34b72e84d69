"""The worker Lambdas: SQS batches (one worker's queue each) -> the job handlers.

Each SQS record carries one job: the payload JSON as body, message attributes `kind` (String),
`job_id` and an optional `dedup_key`. The auto-commit queue is fed by EventBridge Scheduler,
which cannot set message attributes, so that worker has a default kind.

Failure handling follows SQS redrive: a failing record is reported in `batchItemFailures`
(the others in the batch are acked) and comes back after the visibility timeout; on its last
receive (`ApproximateReceiveCount >= max_attempts`, the queue's `maxReceiveCount`) the job's
dead handler runs first, so its task reads `failed` with the reason before SQS moves the
message to the DLQ.

Idempotency: the job handlers are idempotent by design (a memory commit re-uses the plan
stored with its archive; a semantic job re-indexes whatever the content is now), so a
redelivered message costs time, not correctness. When SKALD_IDEMPOTENCY_TABLE is set, a
Powertools idempotency record on DynamoDB, keyed on (SQS messageId, kind), also skips the
re-run of a message that already succeeded (SQS at-least-once duplicates), and makes a
duplicate delivered while the first copy still runs fail fast and retry later. Without the
table the guard is skipped: one DynamoDB round trip less per job, same results.

Fairness (jobs/account_cap.py): a job of an account that already runs its share of the
queue's workers (SKALD_WORKER_ACCOUNT_CONCURRENCY, by default half of
SKALD_WORKER_MAX_CONCURRENCY) is put back for SKALD_WORKER_DEFER_S without costing a receive;
a job done or dead-lettered leaves its account's count of jobs in flight (admission's).

Large payloads: a body `{"$payload": {...}}` refers to a payload the queue adapter stored in
S3 (too large for a message). The queue resolves it before the handler runs, and deletes the
object once the job succeeded (the event source mapping then deletes the message); a failed
or dead-lettered job keeps it for its retry or a redrive. An object already gone means the
job was done (a duplicate delivery): the record succeeds without running.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from skald.catalog import JOB_AUTO_COMMIT, QUEUE_AUTOCOMMIT, current_kind
from skald.config import Settings
from skald.domain.ops.fairness import account_concurrency, job_account
from skald.jobs.account_cap import AccountCap
from skald.jobs.deadline import job_deadline, job_slice
from skald.jobs.registry import HANDLERS, job_died, run_job
from skald.ports import (
    AccountSettlement,
    DedupClaims,
    Job,
    JobQueue,
    PayloadStore,
    SettleCounts,
)


class WorkerServices(Protocol):
    """What the worker wrapper itself needs; the job handlers take the rest from the same
    object (a Composition)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def queue(self) -> JobQueue: ...


ServicesFactory = Callable[[], WorkerServices]
LambdaHandler = Callable[[dict[str, Any], Any], dict[str, Any]]
JobRunner = Callable[[str, str, dict[str, Any]], None]  # (message id, kind, payload)

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "skald-worker"
DEFAULT_NAMESPACE = "Skald"
UNKNOWN_KIND = "unknown"
IDEMPOTENCY_TTL_S = 6 * 3600  # longer than any realistic redelivery of a finished message
# Kept back from the invocation's remaining time when handing it to the jobs as their
# deadline: after a job stops, its continuation is queued, the batch answered (SQS deletes
# the done messages) and the metrics flushed before Lambda's timeout.
DEADLINE_SAFETY_S = 15.0

logger = Logger(service=SERVICE)


class PoisonMessage(ValueError):
    """A record that can never be processed (unreadable body, no kind)."""


def default_max_attempts() -> int:
    """SKALD_JOB_MAX_ATTEMPTS; must equal the queue's redrive maxReceiveCount."""
    return Settings().job_max_attempts


class _Once:
    """Builds the services on first use and keeps them for the life of the execution
    environment (a cold start pays for them once)."""

    def __init__(self, factory: ServicesFactory) -> None:
        self._factory = factory
        self._value: WorkerServices | None = None
        self._lock = threading.Lock()

    def __call__(self) -> WorkerServices:
        if self._value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._factory()
        return self._value


@dataclass
class _KindStats:
    processed: int = 0
    failed: int = 0
    durations_ms: list[float] = field(default_factory=list)


def _tracer() -> Any:
    """Powertools Tracer, or None when the X-Ray SDK is not installed. Tracing is off outside
    Lambda and with POWERTOOLS_TRACE_DISABLED=true."""
    try:
        from aws_lambda_powertools import Tracer

        return Tracer(service=SERVICE)
    except ImportError:
        return None


def _flush_metrics(metrics: Metrics, stats: dict[str, _KindStats]) -> None:
    # One EMF document per kind: dimensions apply to a whole document.
    for kind, s in sorted(stats.items()):
        metrics.add_dimension(name="kind", value=kind)
        metrics.add_metric(name="JobsProcessed", unit=MetricUnit.Count, value=s.processed)
        metrics.add_metric(name="JobsFailed", unit=MetricUnit.Count, value=s.failed)
        for ms in s.durations_ms:
            metrics.add_metric(name="JobDuration", unit=MetricUnit.Milliseconds, value=ms)
        metrics.flush_metrics()


def _parse(record: SQSRecord, default_kind: str | None) -> tuple[str, dict[str, Any]]:
    try:
        body = json.loads(record.body)
    except (TypeError, ValueError) as exc:
        raise PoisonMessage(f"message {record.message_id}: body is not JSON") from exc
    if not isinstance(body, dict):
        raise PoisonMessage(f"message {record.message_id}: body is not a JSON object")
    kind = _attr(record, "kind")
    # Tolerate an envelope {"kind", "payload"} (a timer target that cannot set attributes).
    if kind is None and isinstance(body.get("payload"), dict) and isinstance(body.get("kind"), str):
        kind, body = body["kind"], body["payload"]
    kind = kind or default_kind
    if not kind:
        raise PoisonMessage(f"message {record.message_id}: no 'kind' message attribute")
    return current_kind(kind), body  # a kind of an earlier release runs as its new one


def _idempotent_runner(container: WorkerServices, table: str) -> tuple[JobRunner, Any]:
    """A runner that records each (messageId, kind) it completed in DynamoDB, and the
    Powertools config that must see the Lambda context of every invocation."""
    import boto3
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    client = boto3.client("dynamodb", endpoint_url=container.settings.aws_endpoint_url)
    persistence = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
    config = IdempotencyConfig(
        event_key_jmespath="[messageId, kind]",
        raise_on_no_idempotency_key=True,
        expires_after_seconds=IDEMPOTENCY_TTL_S,
    )

    def run_job_message(*, message: dict[str, Any]) -> dict[str, Any]:
        run_job(container, message["kind"], message["payload"])
        return {"done": True}

    run_once: Callable[..., Any] = idempotent_function(
        run_job_message,
        data_keyword_argument="message",
        persistence_store=persistence,
        config=config,
    )

    def runner(message_id: str, kind: str, payload: dict[str, Any]) -> None:
        run_once(message={"messageId": message_id, "kind": kind, "payload": payload})

    return runner, config


def _in_progress_elsewhere(exc: Exception) -> bool:
    # Another delivery of this very message is running: not a failure of the job itself.
    return type(exc).__name__ == "IdempotencyAlreadyInProgressError"


def make_sqs_worker(
    container_factory: ServicesFactory,
    *,
    max_attempts: int,
    default_kind: str | None = None,
    queue: str | None = None,
) -> LambdaHandler:
    """The handler of an SQS-triggered worker Lambda (ReportBatchItemFailures on). `queue`:
    the job queue it drains, for messages that do not name theirs (EventBridge Scheduler's)."""
    if max_attempts < 1:
        raise ValueError("max_attempts must be >= 1")
    worker = _SqsWorker(
        container_factory, max_attempts=max_attempts, default_kind=default_kind, queue=queue
    )
    handler: LambdaHandler = logger.inject_lambda_context(worker.handle, clear_state=True)
    if worker.tracer is not None:
        handler = worker.tracer.capture_lambda_handler(handler)
    return handler


class _SqsWorker:
    """A worker Lambda's state for the life of its execution environment: the services (built
    on first use), the job runner (idempotent when a table is configured), metrics, tracer."""

    def __init__(
        self,
        container_factory: ServicesFactory,
        *,
        max_attempts: int,
        default_kind: str | None,
        queue: str | None,
    ) -> None:
        self.container = _Once(container_factory)
        self.max_attempts = max_attempts
        self.default_kind = default_kind
        self.queue = queue
        # service="" keeps Powertools from adding a `service` dimension: alarms and dashboards
        # select these metrics by `kind` alone (the namespace already says Skald).
        self.metrics = Metrics(
            service="",
            namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or DEFAULT_NAMESPACE,
        )
        self.tracer = _tracer()
        self._guard: tuple[JobRunner, Any] | None = None  # built once, after the container

    def runner(self) -> JobRunner:
        c = self.container()
        table = c.settings.idempotency_table
        if not table:
            return lambda _mid, kind, payload: run_job(c, kind, payload)
        if self._guard is None:
            self._guard = _idempotent_runner(c, table)
        return self._guard[0]

    def account_cap(self, context: Any) -> AccountCap:
        """This invocation's slots: held at most until the invocation ends."""
        c = self.container()
        s = c.settings
        deadline = invocation_deadline(context)
        hold_s = 900.0 if deadline is None else deadline - time.monotonic() + DEADLINE_SAFETY_S
        return AccountCap(
            c.queue,
            account_concurrency(s.worker_account_concurrency, s.worker_max_concurrency),
            defer_s=s.worker_defer_s,
            hold_s=max(1.0, hold_s),
        )

    def handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        batch = _Batch(self, self.runner(), self.account_cap(context))
        if self._guard is not None and context is not None:
            self._guard[1].register_lambda_context(context)
        # raise_on_entire_batch_failure=False: a batch where every record failed is reported
        # record by record too, so each message keeps its own receive count.
        processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        try:
            slice_s = self.container().settings.job_slice_s
            with job_deadline(invocation_deadline(context)), job_slice(slice_s):
                return dict(
                    process_partial_response(
                        event=event,
                        record_handler=batch.handle_record,
                        processor=processor,
                        context=context,
                    )
                )
        finally:
            _flush_metrics(self.metrics, batch.stats)


@dataclass
class _Delivery:
    """A record in hand: when its handling started, the queue whose counts it settles."""

    message_id: str
    queue: str | None
    started: float = field(default_factory=time.perf_counter)

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000


class _Batch:
    """One invocation's records: each one's job run, its outcome settled on the queue, logged,
    and counted and timed per kind (the metrics flushed once the batch is answered)."""

    def __init__(self, worker: _SqsWorker, run: JobRunner, cap: AccountCap) -> None:
        self.worker = worker
        self.run = run
        self.cap = cap
        self.stats: dict[str, _KindStats] = {}

    def handle_record(self, record: SQSRecord) -> None:
        attempt = _attempt(record)
        logger.set_correlation_id(None)
        logger.append_keys(message_id=record.message_id, attempt=attempt, kind=None, job_id=None)
        delivery = _Delivery(record.message_id, _attr(record, "queue") or self.worker.queue)
        kind, body = self._read(record, delivery)
        job_id = _attr(record, "job_id") or record.message_id
        # Before a stored payload is fetched: a reference keeps the payload's account.
        if not self.cap.admit(delivery.queue, body, record.raw_event):
            return  # put back for later, as not tried: this record is done
        try:
            payload = _open_payload(self.worker.container(), body)
            if payload is None:
                logger.warning(
                    "job payload gone: the job was done already", extra={"job_id": job_id}
                )
                return
            job = Job(
                job_id,
                _attr(record, "queue") or "",
                kind,
                payload,
                attempt,
                _attr(record, "dedup_key"),
            )
            self._run(record, delivery, job, body)
        finally:
            self.cap.release()

    def _run(self, record: SQSRecord, delivery: _Delivery, job: Job, body: dict[str, Any]) -> None:
        kind, payload = job.kind, job.payload
        self._start(job)
        # A poison message must not mint metric dimensions of its own.
        stats = self.stats.setdefault(kind if kind in HANDLERS else UNKNOWN_KIND, _KindStats())
        try:
            self.run(record.message_id, kind, payload)
        except Exception as exc:
            self._failed(delivery, job, stats, exc)
            if job.attempts >= self.worker.max_attempts:
                _settle_account(self.worker.container(), job, record)
            raise
        self._done(delivery, stats, body)
        _settle_account(self.worker.container(), job, record)

    def _read(self, record: SQSRecord, delivery: _Delivery) -> tuple[str, dict[str, Any]]:
        """The record's job kind and body; an unreadable one is counted, logged and raised."""
        try:
            return _parse(record, self.worker.default_kind)
        except PoisonMessage:
            self.stats.setdefault(UNKNOWN_KIND, _KindStats()).failed += 1
            logger.exception("unreadable job message")
            _count_settled(self.worker.container(), delivery.queue, "failed_attempts")
            raise

    def _start(self, job: Job) -> None:
        task_id = job.payload.get("task_id")
        logger.set_correlation_id(str(task_id) if task_id else None)
        logger.append_keys(kind=job.kind, job_id=job.job_id)
        _release_dedup(self.worker.container(), job)
        if self.worker.tracer is not None:
            self.worker.tracer.put_annotation(key="kind", value=job.kind)

    def _failed(self, delivery: _Delivery, job: Job, stats: _KindStats, exc: Exception) -> None:
        """Runs inside the job's `except`: dead-letters the job on its last receive (its dead
        handler first), else leaves it to SQS's retry."""
        stats.failed += 1
        stats.durations_ms.append(delivery.elapsed_ms())
        reason = f"{type(exc).__name__}: {exc}"
        if job.attempts >= self.worker.max_attempts and not _in_progress_elsewhere(exc):
            logger.exception("job failed for good; dead-lettering", extra={"reason": reason})
            _mark_dead(self.worker.container(), job.kind, job.payload, reason)
        else:
            logger.warning("job failed; SQS will retry", exc_info=True, extra={"reason": reason})
        _count_settled(self.worker.container(), delivery.queue, "failed_attempts")

    def _done(self, delivery: _Delivery, stats: _KindStats, body: dict[str, Any]) -> None:
        _count_settled(self.worker.container(), delivery.queue, "processed")
        stats.processed += 1
        stats.durations_ms.append(delivery.elapsed_ms())
        _payload_done(self.worker.container(), body)
        logger.info("job done")


def _attempt(record: SQSRecord) -> int:
    # `attempts` counts deliveries of earlier copies (a queue adapter's nack re-sends)
    return _int(_attr(record, "attempts")) + max(
        1, _int(record.attributes.approximate_receive_count)
    )


def invocation_deadline(context: Any) -> float | None:
    """The jobs' deadline (a time.monotonic() value): the invocation's remaining time less
    DEADLINE_SAFETY_S; None without a Lambda context (no limit)."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    return time.monotonic() + float(remaining()) / 1000 - DEADLINE_SAFETY_S


def _attr(record: SQSRecord, name: str) -> str | None:
    attr = record.message_attributes[name]
    return attr.string_value if attr is not None else None


def _int(value: str | None) -> int:
    try:
        return int(float(value or 0))
    except ValueError:
        return 0


def _release_dedup(container: WorkerServices, job: Job) -> None:
    """A queue adapter that keeps dedup claims until a job starts (the SQS one) is told so;
    lease() does it for pulled jobs, an event source mapping bypasses lease()."""
    queue = container.queue
    if job.dedup_key is None or not isinstance(queue, DedupClaims):
        return
    try:
        queue.mark_started(job)
    except Exception:  # a stale claim only absorbs enqueues until its TTL: never fatal
        logger.exception("could not release the dedup claim")


def _count_settled(container: WorkerServices, queue: str | None, outcome: str) -> None:
    """Counts a job's outcome on a queue adapter that keeps the counts itself (SettleCounts;
    the event source mapping bypasses ack and nack). Before the mapping deletes or releases
    the message: a wait that sees the message gone sees the count moved. Never fatal."""
    q = container.queue
    if queue is None or not isinstance(q, SettleCounts):
        return
    try:
        q.count_settled(queue, outcome)
    except Exception:
        logger.exception("could not count the job as %s", outcome)


def _settle_account(container: WorkerServices, job: Job, record: SQSRecord) -> None:
    """A job done or dead-lettered leaves its account's count (the mark the queue put on its
    message says where it was counted). Never fatal: a lost count heals (sqs/account_counts)."""
    q, account = container.queue, job_account(job.payload)
    if account is None or not isinstance(q, AccountSettlement):
        return
    try:
        q.account_settled(account, _attr(record, "counted"))
    except Exception:
        logger.exception("could not settle the job in its account's count")


def _open_payload(container: WorkerServices, body: dict[str, Any]) -> dict[str, Any] | None:
    """The job's payload: `body`, or the stored payload it refers to (a queue adapter with a
    payload store resolves it; other adapters never send references); None when that is
    gone."""
    queue = container.queue
    return queue.open_payload(body) if isinstance(queue, PayloadStore) else body


def _payload_done(container: WorkerServices, body: dict[str, Any]) -> None:
    queue = container.queue
    if isinstance(queue, PayloadStore):
        queue.payload_done(body)  # best effort inside: the lifecycle rule removes what it misses


def _mark_dead(container: WorkerServices, kind: str, payload: dict[str, Any], reason: str) -> None:
    try:
        job_died(container, kind, payload, reason)
    except Exception:  # the message still goes to the DLQ; do not mask the job's own error
        logger.exception("dead handler failed")


def make_auto_commit_handler(
    container_factory: ServicesFactory, *, max_attempts: int | None = None
) -> LambdaHandler:
    """The auto-commit worker: SQS records from the queue EventBridge Scheduler targets, or a
    direct invocation `{"account", "user", "session_id"}` (tests, manual runs)."""
    attempts = max_attempts if max_attempts is not None else default_max_attempts()
    container = _Once(container_factory)
    sqs = make_sqs_worker(
        container, max_attempts=attempts, default_kind=JOB_AUTO_COMMIT, queue=QUEUE_AUTOCOMMIT
    )

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if "Records" in event:
            return sqs(event, context)
        missing = [k for k in ("account", "user", "session_id") if not event.get(k)]
        if missing:
            raise ValueError(f"direct auto-commit invocation lacks {', '.join(missing)}")
        payload = {"role": "user", **event}
        logger.info("auto-commit invoked directly", extra={"session_id": event["session_id"]})
        run_job(container(), JOB_AUTO_COMMIT, payload)
        return {"status": "ok", "session_id": event["session_id"]}

    return handler
