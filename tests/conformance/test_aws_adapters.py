"""S3BlobStore and SqsJobQueue beyond their ports: multipart, SSE, pagination, batches, FIFO,
dead-letter peeking, and the real-AWS error paths moto cannot produce (botocore Stubber or a
scripted client). The port behaviour itself is in test_blobstore.py / test_jobqueue.py."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from unittest import mock

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import ANY, Stubber

from skald.adapters.aws.s3.blobstore import MIN_PART_SIZE, S3BlobStore
from skald.adapters.aws.sqs.jobqueue import (
    REDRIVE_ERROR,
    EnqueueItem,
    InMemoryDedupRegistry,
    InMemoryJobCounters,
    SqsJobQueue,
    SqsSendError,
)
from skald.ports import BlobPreconditionFailed, Job, Lease
from tests.conformance.conftest import (
    _DUMMY_AWS_ENV,
    MotoService,
    moto_bucket,
    moto_client,
    moto_queues,
)

T = TypeVar("T")
KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
URL = "https://sqs.us-east-1.amazonaws.com/123456789012/skald-jobs"


def eventually(fn: Callable[[], T], timeout_s: float = 15.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(0.05)


class Recording:
    """Wraps a boto3 client: records every call, and can run a hook before one."""

    def __init__(
        self, client: Any, before: dict[str, Callable[[dict[str, Any]], None]] | None = None
    ) -> None:
        self._client = client
        self._before = before or {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("_") or name in ("get_paginator", "meta"):
            return attr

        def call(**params: Any) -> Any:
            self.calls.append((name, params))
            hook = self._before.get(name)
            if hook is not None:
                hook(params)
            return attr(**params)

        return call

    def params(self, name: str) -> list[dict[str, Any]]:
        return [params for called, params in self.calls if called == name]


def offline_client(service: MotoService) -> Any:
    """A client for Stubbers only (no endpoint is ever contacted)."""
    with mock.patch.dict(os.environ, _DUMMY_AWS_ENV):
        return boto3.session.Session().client(service, region_name="us-east-1")


@pytest.fixture(scope="module")
def offline_s3() -> Any:
    return offline_client("s3")


@pytest.fixture(scope="module")
def offline_sqs() -> Any:
    return offline_client("sqs")


# --------------------------------------------------------------------------------------------
# S3


@pytest.fixture
def bucket() -> Iterator[tuple[Any, str]]:
    """(raw client, bucket) on moto."""
    with moto_bucket() as (endpoint, name):
        yield moto_client("s3", endpoint), name


def test_multipart_sse_and_copy(bucket: tuple[Any, str]) -> None:
    raw, name = bucket
    client = Recording(raw)
    store = S3BlobStore(
        client, name, sse="aws:kms", kms_key_id=KMS_KEY, multipart_threshold=MIN_PART_SIZE
    )
    data = os.urandom(MIN_PART_SIZE + 1000)
    info = store.put("acme/big.bin", data)
    assert info.size == len(data) and info.etag.endswith("-2")  # two parts
    assert [p["PartNumber"] for p in client.params("upload_part")] == [1, 2]
    assert store.get("acme/big.bin") == data
    head = store.head("acme/big.bin")
    assert head is not None and (head.size, head.etag) == (len(data), info.etag)
    store.put("acme/small.md", b"small")
    store.copy("acme/small.md", "acme/copy.md")
    for key in ("acme/big.bin", "acme/small.md", "acme/copy.md"):
        meta = raw.head_object(Bucket=name, Key=key)
        assert (meta["ServerSideEncryption"], meta["SSEKMSKeyId"]) == ("aws:kms", KMS_KEY), key
    for op in ("create_multipart_upload", "put_object", "copy_object"):
        (params,) = client.params(op)
        assert (params["ServerSideEncryption"], params["SSEKMSKeyId"]) == ("aws:kms", KMS_KEY)
    (copy,) = client.params("copy_object")
    small = store.head("acme/small.md")
    assert small is not None and copy["CopySourceIfMatch"] == f'"{small.etag}"'
    assert raw.list_multipart_uploads(Bucket=name).get("Uploads", []) == []


def test_sse_s3_only(bucket: tuple[Any, str]) -> None:
    raw, name = bucket
    S3BlobStore(raw, name, sse="AES256").put("acme/a", b"x")
    meta = raw.head_object(Bucket=name, Key="acme/a")
    assert meta["ServerSideEncryption"] == "AES256" and "SSEKMSKeyId" not in meta


def test_multipart_create_only_is_checked_on_completion(bucket: tuple[Any, str]) -> None:
    raw, name = bucket

    def racer(_: dict[str, Any]) -> None:  # another writer wins while the parts upload
        raw.put_object(Bucket=name, Key="acme/lock", Body=b"racer")

    client = Recording(raw, before={"complete_multipart_upload": racer})
    store = S3BlobStore(client, name, multipart_threshold=MIN_PART_SIZE)
    with pytest.raises(BlobPreconditionFailed):
        store.put("acme/lock", os.urandom(MIN_PART_SIZE + 1), if_none_match=True)
    assert store.get("acme/lock") == b"racer"
    (complete,) = client.params("complete_multipart_upload")
    assert complete["IfNoneMatch"] == "*"
    assert len(client.params("abort_multipart_upload")) == 1
    assert raw.list_multipart_uploads(Bucket=name).get("Uploads", []) == []
    # an existing key fails before uploading anything
    client.calls.clear()
    with pytest.raises(BlobPreconditionFailed):
        store.put("acme/lock", os.urandom(MIN_PART_SIZE + 1), if_none_match=True)
    assert client.params("create_multipart_upload") == []


def test_multipart_compare_and_swap(bucket: tuple[Any, str]) -> None:
    raw, name = bucket
    client = Recording(raw)
    store = S3BlobStore(client, name, multipart_threshold=MIN_PART_SIZE)
    v1 = store.put("acme/doc", b"v1")
    data = os.urandom(MIN_PART_SIZE + 1)
    v2 = store.put("acme/doc", data, if_match=v1.etag)
    assert store.get("acme/doc") == data
    # S3 checks If-Match atomically on completion (moto ignores it there: shape only)
    (complete,) = client.params("complete_multipart_upload")
    assert complete["IfMatch"] == f'"{v1.etag}"'
    client.calls.clear()
    with pytest.raises(BlobPreconditionFailed):
        store.put("acme/doc", data, if_match=v1.etag)  # stale
    with pytest.raises(BlobPreconditionFailed):
        store.put("acme/none", data, if_match=v2.etag)  # missing
    assert client.params("create_multipart_upload") == []
    assert store.head("acme/none") is None


def test_failed_multipart_upload_is_aborted(bucket: tuple[Any, str]) -> None:
    raw, name = bucket

    def fail_second_part(params: dict[str, Any]) -> None:
        if params["PartNumber"] == 2:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "boom"}}, "UploadPart")

    client = Recording(raw, before={"upload_part": fail_second_part})
    store = S3BlobStore(client, name, multipart_threshold=MIN_PART_SIZE)
    with pytest.raises(ClientError):
        store.put("acme/x", os.urandom(MIN_PART_SIZE + 1))
    assert len(client.params("abort_multipart_upload")) == 1
    assert raw.list_multipart_uploads(Bucket=name).get("Uploads", []) == []
    assert store.head("acme/x") is None


def test_listing_pages_with_common_prefixes(bucket: tuple[Any, str]) -> None:
    raw, name = bucket
    client = Recording(raw)
    store = S3BlobStore(client, name, list_page_size=2)
    files = [f"acme/f{i}.md" for i in range(5)]
    dirs = [f"acme/d{i}/" for i in range(4)]
    for key in files + [d + "x.md" for d in dirs] + ["acme/d0/deep/y.md"]:
        raw.put_object(Bucket=name, Key=key, Body=key.encode())
    listing = store.list("acme/")
    assert [b.key for b in listing.blobs] == files
    assert listing.prefixes == dirs
    calls = client.params("list_objects_v2")
    assert len(calls) == 5 and all(c["MaxKeys"] == 2 for c in calls)
    assert "ContinuationToken" not in calls[0] and all("ContinuationToken" in c for c in calls[1:])
    everything = [b.key for b in store.iter_all("acme/")]
    assert everything == sorted(everything) and len(everything) == 10


def test_put_error_mapping(offline_s3: Any) -> None:
    store = S3BlobStore(offline_s3, "b")
    cases: list[tuple[dict[str, Any], str, int]] = [
        ({"if_none_match": True}, "PreconditionFailed", 412),
        ({"if_none_match": True}, "ConditionalRequestConflict", 409),  # concurrent writers
        ({"if_match": "abc"}, "PreconditionFailed", 412),
        ({"if_match": "abc"}, "NoSuchKey", 404),  # S3's answer for If-Match on a missing key
    ]
    with Stubber(offline_s3) as stubber:
        for kwargs, code, status in cases:
            expected = {"Bucket": "b", "Key": "k", "Body": b"x"}
            if kwargs.get("if_none_match"):
                expected["IfNoneMatch"] = "*"
            else:
                expected["IfMatch"] = '"abc"'
            stubber.add_client_error(
                "put_object",
                service_error_code=code,
                http_status_code=status,
                expected_params=expected,
            )
            with pytest.raises(BlobPreconditionFailed):
                store.put("k", b"x", **kwargs)
        # unconditional writes and other errors are not preconditions
        stubber.add_client_error(
            "put_object", service_error_code="OperationAborted", http_status_code=409
        )
        with pytest.raises(ClientError):
            store.put("k", b"x")
        stubber.add_client_error(
            "put_object", service_error_code="InternalError", http_status_code=500
        )
        with pytest.raises(ClientError):
            store.put("k", b"x", if_none_match=True)
        stubber.add_client_error("head_object", service_error_code="403", http_status_code=403)
        # the listing that could tell a missing key apart is refused too (no s3:ListBucket)
        stubber.add_client_error(
            "list_objects_v2", service_error_code="AccessDenied", http_status_code=403
        )
        with pytest.raises(ClientError):
            store.head("k")  # no s3:ListBucket: not the same as missing
        stubber.assert_no_pending_responses()


# --------------------------------------------------------------------------------------------
# SQS against moto


@pytest.fixture
def sqs() -> Iterator[tuple[Any, str, str]]:
    """(raw client, queue url, DLQ url) on moto, for logical queue "jobs"."""
    with moto_queues(("jobs",)) as (endpoint, urls, dlqs):
        yield moto_client("sqs", endpoint), urls["jobs"], dlqs["jobs"]


def open_queue(raw: Any, url: str, dlq: str, **kwargs: Any) -> SqsJobQueue:
    return SqsJobQueue(
        raw, {"jobs": url}, dlq_urls={"jobs": dlq}, counters=InMemoryJobCounters(), **kwargs
    )


def test_expired_leases_redeliver_then_dead_letter(sqs: tuple[Any, str, str]) -> None:
    raw, url, dlq = sqs
    q = open_queue(raw, url, dlq, max_attempts=2)
    job_id = q.enqueue("jobs", "k", {"x": 1})
    (first,) = q.lease("jobs", visibility_s=1)
    (second,) = eventually(lambda: q.lease("jobs", visibility_s=1))
    assert second.job.job_id == job_id and second.job.attempts == 2
    assert second.receipt != first.receipt and second.job.payload == {"x": 1}
    # a third delivery would exceed max_attempts: lease() moves it to the DLQ instead
    eventually(lambda: q.lease("jobs") == [] and q.stats("jobs").dead == 1)
    (dead,) = q.dead_letters("jobs")
    assert dead.job.job_id == job_id and dead.job.attempts == 2
    assert dead.error == "lease expired after 2 deliveries"
    st = q.stats("jobs")
    assert (st.pending, st.inflight, st.failed_attempts, st.dead) == (0, 0, 0, 1)


def test_enqueue_batch(sqs: tuple[Any, str, str]) -> None:
    raw, url, dlq = sqs
    client = Recording(raw)
    q = open_queue(client, url, dlq, dedup=InMemoryDedupRegistry())
    items = [EnqueueItem("k", {"i": i}) for i in range(20)]
    items[3] = EnqueueItem("k", {"i": 3}, dedup_key="d")
    items[7] = EnqueueItem("k", {"i": 7}, dedup_key="d")  # absorbed by item 3
    items.append(EnqueueItem("k", {"i": 20}, delay_s=30))
    ids = q.enqueue_batch("jobs", items)
    assert len(ids) == 21 and ids[7] == ids[3] and len(set(ids)) == 20
    sizes = [len(p["Entries"]) for p in client.params("send_message_batch")]
    assert sizes == [10, 10]
    assert q.stats("jobs").pending == 20
    leases = q.lease("jobs", max_jobs=30)
    expected = [job_id for i, job_id in enumerate(ids) if i not in (7, 20)]
    assert [lease.job.job_id for lease in leases] == expected
    assert leases[3].job.dedup_key == "d" and leases[3].job.payload == {"i": 3}
    assert q.enqueue("jobs", "k", {}, dedup_key="d") != ids[3]  # leased: released


def test_fifo_queue(sqs: tuple[Any, str, str]) -> None:
    raw, _, _ = sqs
    tag = uuid.uuid4().hex[:8]
    attrs = {"FifoQueue": "true"}
    url = raw.create_queue(QueueName=f"skald-{tag}.fifo", Attributes=attrs)["QueueUrl"]
    dlq = raw.create_queue(QueueName=f"skald-{tag}-dlq.fifo", Attributes=attrs)["QueueUrl"]
    try:
        q = open_queue(raw, url, dlq, max_attempts=2, backoff_base_s=1)
        a1 = q.enqueue("jobs", "k", {"n": 1}, dedup_key="a")
        a2 = q.enqueue("jobs", "k", {"n": 2}, dedup_key="a")  # no registry: a new job
        b1 = q.enqueue("jobs", "k", {"n": 3}, dedup_key="b")
        assert len({a1, a2, b1}) == 3
        with pytest.raises(ValueError):
            q.enqueue("jobs", "k", {}, delay_s=5)  # no per-message delay on FIFO queues
        # one job per key at a time: while a1 is in flight, a2 (same group) waits
        (first,) = q.lease("jobs")
        assert first.job.job_id == a1
        (other,) = q.lease("jobs", max_jobs=10)
        assert other.job.job_id == b1
        q.ack(other)
        q.nack(first, "boom")  # FIFO: the retry waits in flight
        st = q.stats("jobs")
        assert (st.pending, st.inflight, st.failed_attempts) == (1, 1, 1)
        (retry,) = eventually(lambda: q.lease("jobs"))
        assert retry.job.job_id == a1 and retry.job.attempts == 2
        q.nack(retry, "boom again")  # last attempt: to the FIFO DLQ
        (dead,) = q.dead_letters("jobs")
        assert (dead.job.job_id, dead.error, dead.job.attempts) == (a1, "boom again", 2)
        (nxt,) = q.lease("jobs")
        assert nxt.job.job_id == a2
    finally:
        raw.delete_queue(QueueUrl=url)
        raw.delete_queue(QueueUrl=dlq)


def test_dead_letters_page_past_ten_and_stay(sqs: tuple[Any, str, str]) -> None:
    raw, url, dlq = sqs
    q = open_queue(raw, url, dlq)
    for i in range(23):
        attrs = {
            "job_id": {"DataType": "String", "StringValue": f"j{i}"},
            "kind": {"DataType": "String", "StringValue": "k"},
            "queue": {"DataType": "String", "StringValue": "jobs"},
            "attempts": {"DataType": "Number", "StringValue": "5"},
            "error": {"DataType": "String", "StringValue": f"e{i}"},
            "failed_at": {"DataType": "Number", "StringValue": str(1000 + i)},
        }
        raw.send_message(QueueUrl=dlq, MessageBody=json.dumps({"i": i}), MessageAttributes=attrs)
    # moved by a redrive policy: the original attributes, no error
    raw.send_message(
        QueueUrl=dlq,
        MessageBody="{}",
        MessageAttributes={"kind": {"DataType": "String", "StringValue": "k"}},
    )
    letters = q.dead_letters("jobs")
    assert len(letters) == 24
    assert letters[0].error == REDRIVE_ERROR  # sent just now: the newest
    assert [d.error for d in letters[1:]] == [f"e{i}" for i in reversed(range(23))]
    assert letters[1].job == Job("j22", "jobs", "k", {"i": 22}, 5, None)
    assert [d.error for d in q.dead_letters("jobs", limit=2)] == [REDRIVE_ERROR, "e22"]
    # peeking consumed nothing and left every message visible again
    assert q.stats("jobs").dead == 24
    counts = raw.get_queue_attributes(QueueUrl=dlq, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == "24"


def test_messages_from_the_scheduler_get_a_default_kind(sqs: tuple[Any, str, str]) -> None:
    raw, url, dlq = sqs
    q = open_queue(raw, url, dlq, default_kinds={"jobs": "session.auto_commit"})
    sent = raw.send_message(QueueUrl=url, MessageBody=json.dumps({"session_id": "s1"}))
    (lease,) = q.lease("jobs")
    assert lease.job == Job(
        sent["MessageId"], "jobs", "session.auto_commit", {"session_id": "s1"}, 1, None
    )
    assert q.ack(lease) is True
    # without a default kind such a job can still be retried (and then dead-lettered)
    bare = open_queue(raw, url, dlq, backoff_base_s=0, max_attempts=2)
    raw.send_message(QueueUrl=url, MessageBody="{}")
    (first,) = bare.lease("jobs")
    assert first.job.kind == ""
    bare.nack(first, "unknown kind")
    (second,) = bare.lease("jobs")
    assert (second.job.job_id, second.job.kind, second.job.attempts) == (first.job.job_id, "", 2)


def test_configuration_errors(sqs: tuple[Any, str, str]) -> None:
    raw, url, dlq = sqs
    q = open_queue(raw, url, dlq)
    with pytest.raises(KeyError):
        q.enqueue("unknown", "k", {})
    with pytest.raises(ValueError):
        q.enqueue("jobs", "", {})
    with pytest.raises(ValueError):
        q.enqueue("jobs", "k", {}, dedup_key="")
    with pytest.raises(ValueError):
        SqsJobQueue(raw, {}, max_attempts=0)
    assert q.stats("jobs").pending == 0


def test_dead_lettering_without_a_dlq_drops_and_logs(
    sqs: tuple[Any, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    raw, url, _ = sqs
    q = SqsJobQueue(raw, {"jobs": url}, max_attempts=1)
    q.enqueue("jobs", "k", {})
    (lease,) = q.lease("jobs")
    q.nack(lease, "fatal")
    assert "no DLQ configured" in caplog.text and "fatal" in caplog.text
    st = q.stats("jobs")
    assert (st.pending, st.inflight, st.dead) == (0, 0, 0)


# --------------------------------------------------------------------------------------------
# SQS: what moto cannot answer like SQS does


def stale(stubber: Stubber, code: str, message: str) -> None:
    stubber.add_client_error(
        "change_message_visibility",
        service_error_code=code,
        service_message=message,
        http_status_code=400,
    )


def test_stale_receipts_as_sqs_reports_them(offline_sqs: Any) -> None:
    counters = InMemoryJobCounters()
    q = SqsJobQueue(offline_sqs, {"jobs": URL}, counters=counters, dlq_urls={"jobs": URL})
    old = Lease(Job("j1", "jobs", "k", {}, 1), "AQEB-old")
    hold = {"QueueUrl": URL, "ReceiptHandle": "AQEB-old", "VisibilityTimeout": 30}
    with Stubber(offline_sqs) as stubber:
        # SQS rejects a superseded receipt on ChangeMessageVisibility (DeleteMessage might
        # accept it), so ack/nack/extend probe with it first and stop there
        stubber.add_client_error(
            "change_message_visibility",
            service_error_code="InvalidParameterValue",
            service_message="Value AQEB-old for parameter ReceiptHandle is invalid. Reason: "
            "The receipt handle has expired.",
            http_status_code=400,
            expected_params=hold,
        )
        assert q.ack(old) is False
        stale(stubber, "ReceiptHandleIsInvalid", "The input receipt handle is invalid.")
        assert q.extend(old, 60) is False
        stale(stubber, "AWS.SimpleQueueService.MessageNotInflight", "not in flight")
        q.nack(old, "too late")  # nothing sent, nothing counted
        stubber.assert_no_pending_responses()
        assert counters.get("jobs") == {}
        # a current receipt: probe, then delete, counted once
        stubber.add_response("change_message_visibility", {}, hold)
        stubber.add_response("delete_message", {}, {"QueueUrl": URL, "ReceiptHandle": "AQEB-old"})
        assert q.ack(old) is True
        assert counters.get("jobs") == {"processed": 1}
        stubber.add_client_error(
            "change_message_visibility", service_error_code="AccessDenied", http_status_code=403
        )
        with pytest.raises(ClientError):
            q.ack(old)


def test_request_shapes(offline_sqs: Any) -> None:
    q = SqsJobQueue(offline_sqs, {"jobs": URL}, backoff_base_s=2)
    with Stubber(offline_sqs) as stubber:
        stubber.add_response(
            "send_message",
            {"MessageId": "m"},
            {
                "QueueUrl": URL,
                "MessageBody": json.dumps({"a": "é"}),
                "MessageAttributes": {
                    "job_id": {"DataType": "String", "StringValue": ANY},
                    "queue": {"DataType": "String", "StringValue": "jobs"},
                    "kind": {"DataType": "String", "StringValue": "k"},
                    "attempts": {"DataType": "Number", "StringValue": "0"},
                    "dedup_key": {"DataType": "String", "StringValue": "d"},
                },
                "DelaySeconds": 3,  # whole seconds, rounded up
                "MessageGroupId": "_system",  # fair queues: a job of no account
            },
        )
        q.enqueue("jobs", "k", {"a": "é"}, dedup_key="d", delay_s=2.5)
        recorder = Recording(offline_sqs)
        stubber.add_response("send_message", {"MessageId": "m"})
        fifo_id = SqsJobQueue(recorder, {"fifo": URL + ".fifo"}).enqueue(
            "fifo", "k", {}, dedup_key="acme/alice/s1"
        )
        (fifo,) = recorder.params("send_message")
        assert fifo["MessageGroupId"].startswith("k-")  # a hash of the dedup key
        assert fifo["MessageDeduplicationId"] == f"{fifo_id}-0"
        assert "DelaySeconds" not in fifo
        receive = {
            "QueueUrl": URL,
            "MaxNumberOfMessages": 3,
            "VisibilityTimeout": 2,
            "WaitTimeSeconds": 0,
            "MessageSystemAttributeNames": ["ApproximateReceiveCount"],
            "MessageAttributeNames": ["All"],
        }
        message = {
            "MessageId": "m1",
            "ReceiptHandle": "r1",
            "Body": "{}",
            "Attributes": {"ApproximateReceiveCount": "1"},
        }
        stubber.add_response("receive_message", {"Messages": [message]}, receive)
        stubber.add_response("receive_message", {}, {**receive, "MaxNumberOfMessages": 2})
        (lease,) = q.lease("jobs", max_jobs=3, visibility_s=1.5)
        # nack on a standard queue: a delayed copy carrying the attempts, then the delete
        stubber.add_response(
            "change_message_visibility",
            {},
            {"QueueUrl": URL, "ReceiptHandle": "r1", "VisibilityTimeout": 30},
        )
        stubber.add_response(
            "send_message",
            {"MessageId": "m2"},
            {
                "QueueUrl": URL,
                "MessageBody": "{}",
                "DelaySeconds": 2,
                "MessageAttributes": {
                    "job_id": {"DataType": "String", "StringValue": "m1"},
                    "queue": {"DataType": "String", "StringValue": "jobs"},
                    "kind": {"DataType": "String", "StringValue": ANY},
                    "attempts": {"DataType": "Number", "StringValue": "1"},
                },
            },
        )
        stubber.add_response("delete_message", {}, {"QueueUrl": URL, "ReceiptHandle": "r1"})
        q.nack(Lease(Job("m1", "jobs", "k", {}, 1), "r1"), "boom")
        assert lease.job.job_id == "m1"
        stubber.assert_no_pending_responses()


class ScriptedBatchSqs:
    """send_message_batch answers from a script of failure codes per call."""

    def __init__(self, script: list[dict[int, tuple[str, bool]]]) -> None:
        self.script = script
        self.calls: list[list[dict[str, Any]]] = []

    def send_message_batch(
        self,
        QueueUrl: str,
        Entries: list[dict[str, Any]],  # noqa: N803
    ) -> dict[str, Any]:
        self.calls.append(Entries)
        failures = self.script.pop(0) if self.script else {}
        return {
            "Successful": [
                {"Id": e["Id"], "MessageId": "m"}
                for i, e in enumerate(Entries)
                if i not in failures
            ],
            "Failed": [
                {"Id": Entries[i]["Id"], "Code": code, "SenderFault": sender, "Message": "scripted"}
                for i, (code, sender) in failures.items()
            ],
        }


def test_enqueue_batch_retries_transient_failures() -> None:
    sqs = ScriptedBatchSqs([{1: ("InternalError", False)}, {0: ("ServiceUnavailable", False)}])
    q = SqsJobQueue(sqs, {"jobs": URL})
    ids = q.enqueue_batch("jobs", [EnqueueItem("k", {"i": i}) for i in range(3)])
    assert [len(c) for c in sqs.calls] == [3, 1, 1]
    assert sqs.calls[1][0]["Id"] == ids[1] == sqs.calls[2][0]["Id"]


def test_enqueue_batch_reports_what_cannot_be_sent() -> None:
    sqs = ScriptedBatchSqs([{0: ("InvalidMessageContents", True)}])
    dedup = InMemoryDedupRegistry()
    q = SqsJobQueue(sqs, {"jobs": URL}, dedup=dedup)
    with pytest.raises(SqsSendError, match="InvalidMessageContents"):
        q.enqueue_batch("jobs", [EnqueueItem("k", {}, dedup_key="d"), EnqueueItem("k", {})])
    assert len(sqs.calls) == 1  # a sender fault is not retried
    assert dedup.claim("jobs", "d", "fresh", 60) == "fresh"  # the failed job's claim is gone


def test_dedup_registry_claims_expire_and_release() -> None:
    now = [1000.0]
    dedup = InMemoryDedupRegistry(clock=lambda: now[0])
    assert dedup.claim("q", "k", "j1", 10) == "j1"
    assert dedup.claim("q", "k", "j2", 10) == "j1"
    assert dedup.claim("other", "k", "j3", 10) == "j3"
    dedup.release("q", "k", "j2")  # not the holder: no effect
    assert dedup.claim("q", "k", "j4", 10) == "j1"
    now[0] += 10
    assert dedup.claim("q", "k", "j5", 10) == "j5"  # expired
    q = SqsJobQueue(object(), {}, dedup=dedup)
    q.mark_started(Job("j5", "q", "k", {}, 1, dedup_key="k"))
    assert dedup.claim("q", "k", "j6", 10) == "j6"


def test_jobs_run_by_an_event_source_mapping_are_counted_by_their_worker(offline_sqs: Any) -> None:
    # The mapping deletes or re-delivers the messages itself, bypassing ack and nack: the
    # worker counts each outcome, and stats() reports it as it reports pulled jobs'.
    counters = InMemoryJobCounters()
    q = SqsJobQueue(offline_sqs, {"jobs": URL}, counters=counters)
    q.count_settled("jobs", "processed")
    q.count_settled("jobs", "processed")
    q.count_settled("jobs", "failed_attempts")
    assert counters.get("jobs") == {"processed": 2, "failed_attempts": 1}
    with pytest.raises(ValueError, match="unknown outcome"):
        q.count_settled("jobs", "dead")
    with pytest.raises(KeyError, match="no SQS queue configured"):
        q.count_settled("other", "processed")
    assert counters.get("jobs") == {"processed": 2, "failed_attempts": 1}
