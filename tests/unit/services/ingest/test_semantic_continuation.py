"""A semantic job short of time hands the rest of its folder to a new job on the same queue:
the continuations together index every file once, refresh the directories once, and the last
one completes the task with the totals of the whole folder."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from skald import catalog
from skald.adapters.aws.sqs.jobqueue import SqsJobQueue
from skald.compose.composition import Composition
from skald.compose.serve import ServeRuntime
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.ops.time_budget import MIN_MARGIN_S, must_hand_on
from skald.domain.paths.names import ABSTRACT, OVERVIEW
from skald.domain.paths.uri import parse_uri
from skald.jobs import semantic as semantic_job
from skald.jobs.deadline import job_deadline
from skald.jobs.lambda_workers import DEADLINE_SAFETY_S, invocation_deadline, make_sqs_worker
from skald.ports import Lease
from skald.services.fs.entries import FsChange
from skald.services.ingest import semantic_files as semantic_service
from skald.services.ingest.processing import QUEUE_SEMANTIC
from skald.services.retrieval.service import FindRequest
from tests.support.compose import given_services, local_services

ME = Identity("acme", "ann", "user")
FOLDER = "viking://resources/folder"
NAMES = [f"file{i}.md" for i in range(6)]
TOPICS = [
    "green tea brewing",
    "harbour ferries",
    "volcanic islands",
    "alpine glaciers",
    "lighthouse keepers",
    "urban beekeeping",
]


@pytest.fixture
def container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Composition]:
    # One file per group: the job can stop after each file.
    monkeypatch.setattr(semantic_service, "INDEX_GROUP_RECORDS", 1)
    c = local_services(Settings(backend="local", data_dir=tmp_path / "data"))
    yield c
    c.close()


def add_folder(c: Composition) -> str:
    """Writes six files in one folder and submits them as one job (an add_resource)."""
    change = FsChange(ME.account_id, ME.user_id)
    for i, name in enumerate(NAMES):
        _, one = c.fs.write(
            ME,
            parse_uri(f"{FOLDER}/{name}", user_id="ann"),
            f"# {TOPICS[i]}\n\nNotes on {TOPICS[i]}.\n".encode(),
            "replace",
        )
        change.written += one.written
        change.dirs += [d for d in one.dirs if d not in change.dirs]
    return c.scheduler.submit(ME, change, task_type="add_resource").task_id


def run_next(c: Composition, deadline: float | None) -> dict[str, Any] | None:
    """Runs the next queued semantic job as a worker would (deadline set by its entry)."""
    leases = c.queue.lease(QUEUE_SEMANTIC, max_jobs=1)
    if not leases:
        return None
    run(c, leases[0], deadline)
    return leases[0].job.payload


def run(c: Composition, lease: Lease, deadline: float | None) -> None:
    with job_deadline(deadline):
        semantic_job.handle(c, lease.job.payload)
    assert c.queue.ack(lease)


class Spy:
    """Counts what the services do: files indexed (per URI), refreshes, completions."""

    def __init__(self, c: Composition, monkeypatch: pytest.MonkeyPatch) -> None:
        self.indexed: dict[str, int] = {}
        self.refreshes = 0
        self.completed: list[dict[str, Any]] = []
        sem, tasks = c.semantic, c.tasks
        index_group, refresh, complete = (sem._index_group, sem.refresh_directories, tasks.complete)

        def spy_index(identity: Identity, group: list[tuple[Any, Any]], *rest: Any) -> Any:
            for uri, _ in group:
                self.indexed[str(uri)] = self.indexed.get(str(uri), 0) + 1
            return index_group(identity, group, *rest)

        def spy_refresh(*a: Any, **kw: Any) -> Any:
            self.refreshes += 1
            return refresh(*a, **kw)

        def spy_complete(task_id: str, result: dict[str, Any]) -> None:
            self.completed.append(result)
            complete(task_id, result)

        monkeypatch.setattr(sem, "_index_group", spy_index)
        monkeypatch.setattr(sem, "refresh_directories", spy_refresh)
        monkeypatch.setattr(tasks, "complete", spy_complete)


def test_the_margin_rule() -> None:
    assert not must_hand_on(0.0, None, 1e6)  # no deadline: never
    assert not must_hand_on(0.0, MIN_MARGIN_S + 1, 10.0)
    assert must_hand_on(0.0, MIN_MARGIN_S - 1, 10.0)
    assert must_hand_on(0.0, 150.0, 80.0)  # a slow group widens the margin to 160 s


def test_a_folder_job_short_of_time_continues_until_every_file_is_indexed(
    container: Composition, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(container, monkeypatch)
    task_id = add_folder(container)
    first = run_next(container, time.monotonic() + 1)  # far below the margin
    assert first is not None
    task = container.state.get_task(task_id)
    assert task is not None and task.status == "running"  # handed on, not completed
    assert task.result == {"indexed_files": 1, "removed": 0}  # the progress so far
    assert spy.refreshes == 0 and not spy.completed
    [lease] = container.queue.lease(QUEUE_SEMANTIC, max_jobs=10)
    rest = lease.job.payload
    assert lease.job.kind == catalog.JOB_SEMANTIC and rest["task_id"] == task_id
    assert [u.rsplit("/", 1)[-1] for u in rest["written"]] == NAMES[1:]
    # every directory the whole folder touched (six changes below it), refreshed at the end
    assert rest["refresh"] == {FOLDER: 6, "viking://resources": 1}
    run(container, lease, time.monotonic())
    runs = 2
    while run_next(container, time.monotonic()) is not None:  # each run: one file
        runs += 1
        assert runs < 20
    assert runs == 7  # six files, then the refresh in a job of its own
    assert sorted(u.rsplit("/", 1)[-1] for u in spy.indexed) == NAMES
    assert set(spy.indexed.values()) == {1}  # every file once
    assert spy.refreshes == 1
    assert spy.completed == [{"indexed_files": 6, "removed": 0, "refreshed_directories": 2}]
    task = container.state.get_task(task_id)
    assert task is not None and task.status == "completed"
    folder = parse_uri(FOLDER, user_id="ann")
    _, overview = container.fs.sidecar(ME, folder, OVERVIEW)
    _, abstract = container.fs.sidecar(ME, folder, ABSTRACT)
    assert abstract and overview and all(f"- {name}" in overview for name in NAMES)
    hits = container.index.get(ME.account_id, f"{FOLDER}/{NAMES[-1]}")
    assert hits and hits[0].vector is not None


def test_a_redelivered_continuation_is_harmless(container: Composition) -> None:
    task_id = add_folder(container)
    run_next(container, time.monotonic())
    [lease] = container.queue.lease(QUEUE_SEMANTIC, max_jobs=10)
    rest = lease.job.payload
    container.queue.ack(lease)
    for _ in range(2):  # the same continuation twice, without a deadline: both finish
        semantic_job.handle(container, rest)
        task = container.state.get_task(task_id)
        assert task is not None and task.status == "completed"
        assert task.result is not None and task.result["indexed_files"] == 6
    assert container.queue.stats(QUEUE_SEMANTIC).pending == 0


def test_without_a_deadline_the_job_finishes_in_one_run(container: Composition) -> None:
    task_id = add_folder(container)
    assert run_next(container, None) is not None
    assert container.queue.stats(QUEUE_SEMANTIC).pending == 0
    task = container.state.get_task(task_id)
    assert task is not None and task.status == "completed"
    assert task.result is not None and task.result["indexed_files"] == 6


# ---------------------------------------------------- through the SQS worker Lambda, on moto


class Ctx:
    """A Lambda context with `remaining_s` left in the invocation."""

    aws_request_id = "req-1"
    function_name = "skald-worker-semantic"
    function_version = "$LATEST"
    memory_limit_in_mb = 1856
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:skald-worker"
    log_group_name = "/aws/lambda/skald-worker"
    log_stream_name = "2026/01/01/[$LATEST]abc"

    def __init__(self, remaining_s: float) -> None:
        self.remaining_s = remaining_s

    def get_remaining_time_in_millis(self) -> int:
        return int(self.remaining_s * 1000)


def received(sqs: Any, url: str) -> list[dict[str, Any]]:
    """The queue's messages as the event source mapping hands them to the Lambda."""
    messages = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], AttributeNames=["All"]
    ).get("Messages", [])
    return [
        {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m.get("Attributes", {}),
            "messageAttributes": {
                k: {
                    "stringValue": v.get("StringValue"),
                    "dataType": v["DataType"],
                    "stringListValues": [],
                    "binaryListValues": [],
                }
                for k, v in (m.get("MessageAttributes") or {}).items()
            },
            "md5OfBody": m.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:skald-semantic",
            "awsRegion": "us-east-1",
        }
        for m in messages
    ]


def invoke(handler: Any, sqs: Any, url: str, remaining_s: float) -> list[dict[str, Any]]:
    """One invocation on what the queue holds; deletes what succeeded, as SQS does."""
    records = received(sqs, url)
    assert records, "nothing queued"
    result = handler({"Records": records}, Ctx(remaining_s))
    assert result["batchItemFailures"] == []
    for r in records:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=r["receiptHandle"])
    return records


def test_the_sqs_worker_short_of_time_queues_a_continuation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(semantic_service, "INDEX_GROUP_RECORDS", 1)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "SkaldTest",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SKALD_IDEMPOTENCY_TABLE", raising=False)
    moto = pytest.importorskip("moto")
    with moto.mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="skald-semantic")["QueueUrl"]
        settings = Settings(backend="local", data_dir=tmp_path / "data")
        c, _ = given_services(
            settings, **{catalog.QUEUE: SqsJobQueue(sqs, {QUEUE_SEMANTIC: url}, max_attempts=3)}
        )
        try:
            task_id = add_folder(c)
            handler = make_sqs_worker(lambda: c, max_attempts=3)
            # Little time left in this invocation: one group, then the rest is handed on.
            invoke(handler, sqs, url, DEADLINE_SAFETY_S + 5)
            task = c.state.get_task(task_id)
            assert task is not None and task.status == "running"
            [record] = received(sqs, url)
            assert record["messageAttributes"]["kind"]["stringValue"] == catalog.JOB_SEMANTIC
            rest = json.loads(record["body"])
            assert rest["task_id"] == task_id and len(rest["written"]) == len(NAMES) - 1
            sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0
            )
            invoke(handler, sqs, url, 900)  # a fresh invocation finishes the folder
            assert received(sqs, url) == []
            task = c.state.get_task(task_id)
            assert task is not None and task.status == "completed"
            assert task.result is not None and task.result["indexed_files"] == len(NAMES)
            found = c.retrieval.find(
                ME, FindRequest(query=TOPICS[-1], target_uri=[FOLDER], level=[2])
            )
            assert found.resources[0].uri == f"{FOLDER}/{NAMES[-1]}"
        finally:
            c.close()


def test_the_invocation_deadline_keeps_a_safety_margin() -> None:
    assert invocation_deadline(None) is None  # not in Lambda: no limit
    before = time.monotonic()
    deadline = invocation_deadline(Ctx(100))
    assert deadline is not None
    assert (
        before + 100 - DEADLINE_SAFETY_S <= deadline <= time.monotonic() + 100 - DEADLINE_SAFETY_S
    )


def test_the_local_worker_pool_applies_a_configured_time_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(semantic_service, "INDEX_GROUP_RECORDS", 1)
    runtime = ServeRuntime(
        Settings(
            backend="local", data_dir=tmp_path / "data", worker_threads=1, job_time_budget_s=0.0
        )
    )
    try:
        c = runtime.services
        task_id = add_folder(c)
        runtime.start_workers()
        task = c.scheduler.wait_task(ME, task_id, 60)
        assert task.status == "completed" and task.result is not None
        assert task.result["indexed_files"] == len(NAMES)
        # No time at all: one file per job, then the refresh in a job of its own.
        assert c.queue.stats(QUEUE_SEMANTIC).processed == len(NAMES) + 1
    finally:
        runtime.stop()
