"""Worker Lambda handlers over a LOCAL container: SQS events built by hand, as Lambda's event
source mapping delivers them (one record per job, partial batch responses)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from skald.compose.composition import Composition
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.paths.uri import parse_uri
from skald.jobs import lambda_workers, registry
from skald.jobs.lambda_workers import make_auto_commit_handler, make_sqs_worker
from skald.ports import Job
from skald.services.faults import CrashPoint, Faults
from skald.services.ingest.processing import JOB_SEMANTIC, QUEUE_MEMORY, QUEUE_SEMANTIC
from skald.services.sessions.service import JOB_AUTO_COMMIT, JOB_MEMORY, NewMessage
from tests.support.compose import local_services
from tests.support.lambda_events import Ctx

ALICE = Identity("acme", "alice", "user")
MAX_ATTEMPTS = 3
CTX = Ctx()


@pytest.fixture(autouse=True)
def lambda_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "SkaldTest")
    monkeypatch.delenv("SKALD_IDEMPOTENCY_TABLE", raising=False)


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Composition]:
    c = local_services(Settings(backend="local", data_dir=tmp_path / "data"))
    yield c
    c.close()


def record(
    payload: dict[str, Any] | str,
    kind: str | None,
    *,
    receive_count: int = 1,
    message_id: str | None = None,
    job_id: str = "job-1",
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    body = payload if isinstance(payload, str) else json.dumps(payload)
    attrs: dict[str, Any] = {
        name: {
            "stringValue": value,
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "Number" if name == "attempts" else "String",
        }
        for name, value in {"job_id": job_id, **(extra or {})}.items()
    }
    if kind is not None:
        attrs["kind"] = {
            "stringValue": kind,
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "String",
        }
    return {
        "messageId": message_id or str(uuid.uuid4()),
        "receiptHandle": "AQEB" + uuid.uuid4().hex,
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": "1767225600000",
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": "1767225600001",
        },
        "messageAttributes": attrs,
        "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:skald-jobs",
        "awsRegion": "us-east-1",
    }


def sqs_event(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}


def failures(result: dict[str, Any]) -> list[str]:
    return [f["itemIdentifier"] for f in result["batchItemFailures"]]


def only_job(c: Composition, queue: str) -> Job:
    leases = c.queue.lease(queue, max_jobs=10)
    assert len(leases) == 1, leases
    return leases[0].job


def write_file(c: Composition, path: str, text: str) -> tuple[str, Job]:
    res = c.content.write(
        ALICE,
        parse_uri(path, user_id="alice"),
        text,
        mode="replace",
        wait=False,
        processing_mode="semantic_and_vectors",
        tags=None,
        tag_mode="replace",
    )
    return res.task_id, only_job(c, QUEUE_SEMANTIC)


def committed_session(c: Composition, sid: str = "chat1") -> tuple[str, Job]:
    c.sessions.create(ALICE, sid)
    c.sessions.add_messages(
        ALICE,
        sid,
        [
            NewMessage("user", "Hi! My name is Alice Martin and I work at Acme Robotics."),
            NewMessage("assistant", "Nice to meet you, Alice."),
            NewMessage("user", "I prefer green tea over coffee in the morning."),
        ],
    )
    res = c.sessions.commit(ALICE, sid)
    assert res.task_id is not None
    return res.task_id, only_job(c, QUEUE_MEMORY)


def memory_files(c: Composition) -> dict[str, bytes]:
    return {b.key: c.blobs.get(b.key) for b in c.blobs.iter_all("acme/user/alice/memories/")}


def emf_documents(out: str) -> list[dict[str, Any]]:
    docs = []
    for line in out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            docs.append(json.loads(line))
    return docs


# --------------------------------------------------------------------------------------------


def test_semantic_job_completes_its_task(
    container: Composition, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id, job = write_file(
        container,
        "viking://resources/notes/tea.md",
        "# Tea\n\nGreen tea is brewed at 80 degrees.\n",
    )
    handler = make_sqs_worker(lambda: container, max_attempts=MAX_ATTEMPTS)
    log_stream = io.StringIO()
    # The Powertools handler holds the stdout of import time; point it at a buffer.
    stream_handler = lambda_workers.logger.registered_handler
    assert isinstance(stream_handler, logging.StreamHandler)
    previous = stream_handler.setStream(log_stream)
    try:
        result = handler(sqs_event(record(job.payload, job.kind)), CTX)
    finally:
        stream_handler.setStream(previous)
    assert result == {"batchItemFailures": []}
    task = container.state.get_task(task_id)
    assert task is not None and task.status == "completed", task
    assert container.index.get("acme", "viking://resources/notes/tea.md")
    out = capsys.readouterr().out
    docs = [d for d in emf_documents(out) if d.get("kind") == JOB_SEMANTIC]
    assert docs and docs[0]["JobsProcessed"] == [1.0] and docs[0]["JobsFailed"] == [0.0]
    assert docs[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "SkaldTest"
    assert docs[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["kind"]]
    assert "JobDuration" in docs[0]
    logs = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    done = [entry for entry in logs if entry["message"] == "job done"]
    assert len(done) == 1
    assert done[0]["correlation_id"] == task_id and done[0]["kind"] == JOB_SEMANTIC
    assert done[0]["function_request_id"] == "req-1" and done[0]["attempt"] == 1


def test_poison_messages_fail_alone(
    container: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id, job = write_file(container, "viking://resources/notes/a.md", "alpha\n")

    def boom(_c: Composition, _p: dict[str, Any]) -> None:
        raise RuntimeError("handler exploded")

    monkeypatch.setitem(registry.HANDLERS, "test.boom", boom)
    good = record(job.payload, job.kind)
    unknown = record({"account": "acme", "user": "alice"}, "no.such.kind")
    not_json = record("{not json", JOB_SEMANTIC)
    no_kind = record({"account": "acme"}, None)
    failing = record({"account": "acme", "user": "alice"}, "test.boom")
    handler = make_sqs_worker(lambda: container, max_attempts=MAX_ATTEMPTS)
    result = handler(sqs_event(unknown, good, not_json, no_kind, failing), CTX)
    assert failures(result) == [
        unknown["messageId"],
        not_json["messageId"],
        no_kind["messageId"],
        failing["messageId"],
    ]
    task = container.state.get_task(task_id)
    assert task is not None and task.status == "completed"


class CountingQueue:
    """The container's queue, as a queue adapter that keeps its settle counts (SQS's)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.counted: list[tuple[str, str]] = []

    def count_settled(self, queue: str, outcome: str) -> None:
        self.counted.append((queue, outcome))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class WithQueue:
    """The container, with another queue adapter in front of its own."""

    def __init__(self, inner: Composition, queue: Any) -> None:
        self.inner = inner
        self.queue = queue

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_each_outcome_is_counted_on_the_queue_the_message_names_or_the_workers(
    container: Composition,
) -> None:
    task_id, job = write_file(container, "viking://resources/notes/c.md", "gamma\n")
    counting = CountingQueue(container.queue)
    view = WithQueue(container, counting)
    handler = make_sqs_worker(lambda: view, max_attempts=MAX_ATTEMPTS, queue=QUEUE_SEMANTIC)
    good = record(job.payload, job.kind)  # names no queue: the worker's
    unknown = record(
        {"account": "acme", "user": "alice"}, "no.such.kind", extra={"queue": QUEUE_MEMORY}
    )
    result = handler(sqs_event(good, unknown), CTX)
    assert failures(result) == [unknown["messageId"]]
    assert counting.counted == [(QUEUE_SEMANTIC, "processed"), (QUEUE_MEMORY, "failed_attempts")]
    task = container.state.get_task(task_id)
    assert task is not None and task.status == "completed"


def test_a_local_queue_counts_its_own_jobs(container: Composition) -> None:
    # SQLite's queue counts on ack: a worker handed its jobs adds nothing (no SettleCounts).
    _, job = write_file(container, "viking://resources/notes/d.md", "delta\n")
    before = container.queue.stats(QUEUE_SEMANTIC)
    handler = make_sqs_worker(lambda: container, max_attempts=MAX_ATTEMPTS, queue=QUEUE_SEMANTIC)
    assert failures(handler(sqs_event(record(job.payload, job.kind)), CTX)) == []
    assert container.queue.stats(QUEUE_SEMANTIC) == before


def test_an_all_failing_batch_is_reported_not_raised(container: Composition) -> None:
    bad = record({"x": 1}, "no.such.kind")
    handler = make_sqs_worker(lambda: container, max_attempts=MAX_ATTEMPTS)
    assert failures(handler(sqs_event(bad), CTX)) == [bad["messageId"]]


def test_last_attempt_marks_the_task_failed(
    container: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id, job = write_file(container, "viking://resources/notes/b.md", "beta\n")

    def broken(*_args: Any, **_kw: Any) -> set[Any]:
        raise ConnectionError("index unavailable")

    monkeypatch.setattr(container.semantic, "index_files", broken)
    handler = make_sqs_worker(lambda: container, max_attempts=MAX_ATTEMPTS)
    mid = str(uuid.uuid4())
    for attempt in range(1, MAX_ATTEMPTS):
        result = handler(
            sqs_event(record(job.payload, job.kind, receive_count=attempt, message_id=mid)), CTX
        )
        assert failures(result) == [mid]
        task = container.state.get_task(task_id)
        assert task is not None and task.status != "failed"  # SQS will retry
    result = handler(
        sqs_event(record(job.payload, job.kind, receive_count=MAX_ATTEMPTS, message_id=mid)), CTX
    )
    assert failures(result) == [mid]  # still reported: the redrive moves it to the DLQ
    task = container.state.get_task(task_id)
    assert task is not None and task.status == "failed"
    assert task.error == "ConnectionError: index unavailable"


def test_last_attempt_of_a_memory_job_fails_the_archive(
    container: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id, job = committed_session(container)

    def broken(_payload: dict[str, Any]) -> None:
        raise TimeoutError("LLM timed out")

    monkeypatch.setattr(container.memory_commit, "run", broken)
    handler = make_sqs_worker(lambda: container, max_attempts=2)
    handler(sqs_event(record(job.payload, job.kind, receive_count=2)), CTX)
    task = container.state.get_task(task_id)
    assert task is not None and task.status == "failed" and "LLM timed out" in (task.error or "")
    arch = container.session_store.get_archive("acme", "alice", "chat1", 1)
    assert arch is not None and arch.status == "failed"


def test_memory_extraction_delivered_twice_changes_nothing(container: Composition) -> None:
    task_id, job = committed_session(container)
    handler = make_sqs_worker(lambda: container, max_attempts=MAX_ATTEMPTS)
    message = record(job.payload, JOB_MEMORY, message_id="dup-1")
    assert failures(handler(sqs_event(message), CTX)) == []
    task = container.state.get_task(task_id)
    assert task is not None and task.status == "completed"
    first = memory_files(container)
    assert any("/preferences/" in k for k in first)
    session = container.session_store.get_session("acme", "alice", "chat1")
    assert session is not None
    extracted = session.memories_extracted
    index_count = container.index.count("acme")

    assert (
        failures(
            handler(
                sqs_event(record(job.payload, JOB_MEMORY, receive_count=2, message_id="dup-1")), CTX
            )
        )
        == []
    )
    assert memory_files(container) == first
    assert container.index.count("acme") == index_count
    session = container.session_store.get_session("acme", "alice", "chat1")
    assert session is not None and session.memories_extracted == extracted


def test_memory_extraction_rerun_after_a_crash_creates_no_duplicates(
    container: Composition,
) -> None:
    """A delivery that died after applying the plan but before marking the archive done:
    the redelivery re-uses the stored plan, so no memory is written twice."""
    _, job = committed_session(container)
    handler = make_sqs_worker(lambda: container, max_attempts=MAX_ATTEMPTS)
    handler(sqs_event(record(job.payload, JOB_MEMORY)), CTX)
    first = memory_files(container)
    container.session_store.update_archive("acme", "alice", "chat1", 1, status="pending")
    assert failures(handler(sqs_event(record(job.payload, JOB_MEMORY, receive_count=2)), CTX)) == []
    assert memory_files(container) == first


def test_semantic_job_delivered_twice_indexes_once(container: Composition) -> None:
    _, job = write_file(container, "viking://resources/notes/c.md", "gamma delta\n")
    handler = make_sqs_worker(lambda: container, max_attempts=MAX_ATTEMPTS)
    handler(sqs_event(record(job.payload, job.kind, message_id="m")), CTX)
    count = container.index.count("acme")
    handler(sqs_event(record(job.payload, job.kind, message_id="m", receive_count=2)), CTX)
    assert container.index.count("acme") == count


def _idle_session(c: Composition, sid: str, *, overdue: bool) -> None:
    c.sessions.create(ALICE, sid)
    c.sessions.add_messages(ALICE, sid, [NewMessage("user", "remember: I like jasmine tea")])
    deadline = c.clock() + (-5 if overdue else 3600)
    c.session_store.update_session("acme", "alice", sid, idle_deadline=deadline)


def test_auto_commit_direct_invocation_commits_an_idle_session(container: Composition) -> None:
    _idle_session(container, "idle", overdue=True)
    _idle_session(container, "busy", overdue=False)
    handler = make_auto_commit_handler(lambda: container, max_attempts=MAX_ATTEMPTS)
    assert (
        handler({"account": "acme", "user": "alice", "session_id": "idle"}, CTX)["status"] == "ok"
    )
    handler({"account": "acme", "user": "alice", "session_id": "busy"}, CTX)
    idle = container.session_store.get_session("acme", "alice", "idle")
    busy = container.session_store.get_session("acme", "alice", "busy")
    assert idle is not None and idle.live_count == 0
    assert container.session_store.get_archive("acme", "alice", "idle", 1) is not None
    assert busy is not None and busy.live_count == 1
    assert container.session_store.get_archive("acme", "alice", "busy", 1) is None
    assert only_job(container, QUEUE_MEMORY).payload["session_id"] == "idle"
    with pytest.raises(ValueError):
        handler({"account": "acme"}, CTX)


def test_auto_commit_from_scheduler_sqs_message_without_attributes(container: Composition) -> None:
    """EventBridge Scheduler's SQS target sends the payload as body and cannot set message
    attributes: the worker falls back to the auto-commit kind."""
    _idle_session(container, "timer", overdue=True)
    handler = make_auto_commit_handler(lambda: container, max_attempts=MAX_ATTEMPTS)
    payload = {"account": "acme", "user": "alice", "role": "user", "session_id": "timer"}
    result = handler(sqs_event(record(payload, None)), CTX)
    assert result == {"batchItemFailures": []}
    assert container.session_store.get_archive("acme", "alice", "timer", 1) is not None


def test_commit_sweeper_message_finishes_a_half_done_commit(container: Composition) -> None:
    """The sweeper's rate schedule sends {"kind", "payload"} without attributes to the
    auto-commit queue: the worker finishes commits a function left half-way."""
    container.sessions.create(ALICE, "cut")
    container.sessions.add_messages(ALICE, "cut", [NewMessage("user", "I prefer tea.")])
    container.sessions.committer.faults = Faults({"commit.after_reserve": "raise"})
    with pytest.raises(CrashPoint):
        container.sessions.commit(ALICE, "cut")
    container.sessions.committer.faults = Faults()
    handler = make_auto_commit_handler(lambda: container, max_attempts=MAX_ATTEMPTS)
    body = {"kind": "session.recover_commits", "payload": {"grace_s": 0}}
    assert handler(sqs_event(record(body, None)), CTX) == {"batchItemFailures": []}
    archive = container.session_store.get_archive("acme", "alice", "cut", 1)
    assert archive is not None and archive.outbox is None
    assert only_job(container, QUEUE_MEMORY).payload["session_id"] == "cut"


def test_container_is_built_once_per_cold_start(container: Composition) -> None:
    built: list[int] = []

    def factory() -> Composition:
        built.append(1)
        return container

    handler = make_sqs_worker(factory, max_attempts=MAX_ATTEMPTS)
    assert built == []  # lazily: importing the entry costs nothing
    for _ in range(3):
        handler(sqs_event(record({"x": 1}, JOB_AUTO_COMMIT + ".nope")), CTX)
    assert built == [1]


def test_idempotency_guard_on_dynamodb(
    container: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With SKALD_IDEMPOTENCY_TABLE set, a message that succeeded is not run again; a failed
    one is (its idempotency record is released), so SQS retries still work."""
    moto = pytest.importorskip("moto")
    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_LAMBDA_FUNCTION_NAME": "skald-worker-test",
    }.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setattr(container.settings, "idempotency_table", "skald-idem")
    calls: list[dict[str, Any]] = []
    outcomes = [RuntimeError("first try fails"), None, None]

    def counted(_c: Composition, payload: dict[str, Any]) -> None:
        calls.append(payload)
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    monkeypatch.setitem(registry.HANDLERS, "test.counted", counted)
    with moto.mock_aws():
        boto3.client("dynamodb").create_table(
            TableName="skald-idem",
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        )
        handler = make_sqs_worker(lambda: container, max_attempts=MAX_ATTEMPTS)
        msg = {"account": "acme", "user": "alice", "n": 1}
        assert failures(handler(sqs_event(record(msg, "test.counted", message_id="a")), CTX)) == [
            "a"
        ]
        assert (
            failures(
                handler(
                    sqs_event(record(msg, "test.counted", message_id="a", receive_count=2)), CTX
                )
            )
            == []
        )
        assert (
            failures(
                handler(
                    sqs_event(record(msg, "test.counted", message_id="a", receive_count=3)), CTX
                )
            )
            == []
        )
        assert len(calls) == 2  # the third delivery was a recorded success
        handler(sqs_event(record(msg, "test.counted", message_id="b")), CTX)
        assert len(calls) == 3  # another message id is another job


def test_prior_attempts_count_and_the_dedup_claim_is_released(
    container: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attributes of the SQS queue adapter: `attempts` (deliveries of earlier copies) adds to
    the receive count, and a queue keeping dedup claims hears that the job started."""
    task_id, job = write_file(container, "viking://resources/notes/d.md", "delta\n")
    started: list[Job] = []
    monkeypatch.setattr(container.queue, "mark_started", started.append, raising=False)

    def broken(*_args: Any, **_kw: Any) -> set[Any]:
        raise RuntimeError("still broken")

    monkeypatch.setattr(container.semantic, "index_files", broken)
    handler = make_sqs_worker(lambda: container, max_attempts=MAX_ATTEMPTS)
    message = record(
        job.payload,
        job.kind,
        receive_count=1,
        job_id="j-7",
        extra={"attempts": "2", "dedup_key": "acme/k", "queue": "semantic"},
    )
    assert failures(handler(sqs_event(message), CTX)) == [message["messageId"]]
    task = container.state.get_task(task_id)
    assert task is not None and task.status == "failed"  # 2 earlier + 1 = the last attempt
    assert [(j.job_id, j.queue, j.dedup_key, j.attempts) for j in started] == [
        ("j-7", "semantic", "acme/k", 3)
    ]
