"""A deployed stack, end to end: k-NN and hybrid retrieval on the real search domain, a
commit whose memories are extracted by the worker (Bedrock), the idle auto-commit delivered
by EventBridge Scheduler, and a poisoned job reaching the dead-letter queue and its redrive.
Skipped unless SKALD_E2E_URL and SKALD_E2E_API_KEY are set (see conftest.py)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from openviking_sdk import SyncHTTPClient

from tests.e2e.conftest import ROOT_KEY, STACK, URL, eventually, task_done

DOCS = {
    "tides.md": "# Tides\n\nThe lighthouse keeper logs tide tables at dawn and dusk.\n",
    "bread.md": "# Bread\n\nSourdough needs a starter fed with flour and water every day.\n",
    "stars.md": "# Stars\n\nNavigators once steered by the pole star on clear nights.\n",
}


def _write_docs(client: SyncHTTPClient, folder: str) -> None:
    for name, text in DOCS.items():
        client.write(f"{folder}/{name}", text, mode="create", wait=True)


def test_health_is_public_and_says_nothing_about_auth() -> None:
    import httpx

    body = httpx.get(f"{URL}/health", timeout=10).json()
    assert body["status"] == "ok"
    refused = httpx.get(f"{URL}/api/v1/fs/ls", params={"uri": "viking://resources"}, timeout=10)
    assert refused.status_code == 401


def test_knn_find_ranks_by_meaning(client: SyncHTTPClient, folder: str) -> None:
    _write_docs(client, folder)
    found = client.find(
        "who keeps records of the sea level near a beacon?", target_uri=folder, limit=3
    )
    files = [r for r in found["resources"] if r["level"] == 2]
    assert files and files[0]["uri"].endswith("/tides.md"), found
    assert 0.0 < files[0]["score"] <= 1.0
    semantic = client.search(
        "baking with a fermented starter", target_uri=folder, options={"search_type": "semantic"}
    )
    assert [r["uri"] for r in semantic["resources"] if r["level"] == 2][0].endswith("/bread.md")


def test_hybrid_search_fuses_keywords_and_vectors(client: SyncHTTPClient, folder: str) -> None:
    _write_docs(client, folder)
    hybrid = client.search("pole star navigation", target_uri=folder)  # hybrid by default
    files = [r for r in hybrid["resources"] if r["level"] == 2]
    assert files[0]["uri"].endswith("/stars.md"), hybrid
    assert files[0]["score"] <= 1.0


def test_commit_extracts_memories(client: SyncHTTPClient, run_id: str) -> None:
    session = f"e2e-{run_id}-commit"
    client.create_session(session)
    try:
        client.add_message(
            session, "user", f"I always drink jasmine tea while coding. My codename is {run_id}."
        )
        client.add_message(session, "assistant", "Noted.")
        done = client.commit_session(session)
        assert done["status"] == "accepted"
        task_done(client, done["task_id"])
        archive = done["archive_uri"].rstrip("/").rsplit("/", 1)[-1]
        view = client.get_session_archive(session, archive)
        assert view, "the archive is readable once extraction completed"
        memories = client.find(
            "what does the user drink while coding?", target_uri="viking://user/memories", limit=5
        )
        assert any(
            "tea" in (m.get("abstract") or "").lower() or "tea" in m["uri"]
            for m in memories.get("memories", [])
        ), memories
    finally:
        client.delete_session(session)


def test_idle_auto_commit_through_the_scheduler(client: SyncHTTPClient, run_id: str) -> None:
    session = f"e2e-{run_id}-idle"
    client.create_session(session, options={"auto_commit_policy": {"idle_seconds": 20}})
    try:
        client.add_message(session, "user", "I live near the harbour.")

        # One-shot schedules fire at the deadline, then SQS and the auto-commit worker.
        def committed() -> dict[str, Any] | None:
            view = client.get_session(session)
            return view if view["commit_count"] >= 1 else None

        view = eventually(committed, 300, "the idle auto-commit", every_s=10)
        assert view["commit_count"] == 1
    finally:
        client.delete_session(session)


# -- dead letters ------------------------------------------------------------------------------


def _queues() -> dict[str, str]:
    """Physical ids of the semantic queue and its DLQ, from the stack's resources."""
    import boto3

    cfn = boto3.client("cloudformation")
    out: dict[str, str] = {}
    paginator = cfn.get_paginator("list_stack_resources")
    for page in paginator.paginate(StackName=STACK):
        for r in page["StackResourceSummaries"]:
            if r["ResourceType"] != "AWS::SQS::Queue":
                continue
            if r["LogicalResourceId"].startswith("WorkersSemanticQueue"):
                out["queue"] = r["PhysicalResourceId"]
            elif r["LogicalResourceId"].startswith("WorkersSemanticDlq"):
                out["dlq"] = r["PhysicalResourceId"]
    assert set(out) == {"queue", "dlq"}, out
    return out


def _arn(sqs: Any, url: str) -> str:
    return str(
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
    )


def _find(sqs: Any, url: str, marker: str) -> dict[str, Any] | None:
    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=2,
        VisibilityTimeout=2,
        MessageAttributeNames=["All"],
    )
    return next((m for m in got.get("Messages", []) if marker in m["Body"]), None)


@pytest.mark.skipif(
    not STACK,
    reason="set SKALD_E2E_STACK (and AWS credentials of the operator) for the dead-letter test",
)
def test_a_poisoned_job_reaches_the_dlq_and_is_redriven() -> None:
    """The operator's way to poison a job (docs/deploy.md): a message on the semantic queue
    whose kind no handler knows. The worker reports it failed on every receive; after the
    redrive policy's maxReceiveCount SQS moves it to the DLQ; a message-move task redrives it.
    For the test only, the queue's visibility timeout is lowered so that the retries take
    seconds instead of 5 x 30 minutes; it is restored afterwards."""
    import boto3

    sqs = boto3.client("sqs")
    queues = _queues()
    queue, dlq = queues["queue"], queues["dlq"]
    marker = f"e2e-poison-{uuid.uuid4().hex}"
    saved = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["VisibilityTimeout"])[
        "Attributes"
    ]["VisibilityTimeout"]
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"VisibilityTimeout": "5"})
    try:
        sqs.send_message(
            QueueUrl=queue,
            MessageBody=json.dumps({"marker": marker}),
            MessageAttributes={"kind": {"DataType": "String", "StringValue": "e2e.poison"}},
        )
        dead = eventually(
            lambda: _find(sqs, dlq, marker), 600, "the poisoned job in the DLQ", every_s=5
        )
        sqs.change_message_visibility(
            QueueUrl=dlq, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0
        )
        task = sqs.start_message_move_task(
            SourceArn=_arn(sqs, dlq), DestinationArn=_arn(sqs, queue)
        )
        assert task["TaskHandle"]
        # Redriven, the (still poisoned) job is received by the worker again, fails again
        # and comes back to the DLQ: the whole cycle works.
        time.sleep(10)
        again = eventually(
            lambda: _find(sqs, dlq, marker), 600, "the job back in the DLQ", every_s=5
        )
        attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
        assert "RedrivePolicy" in attrs
        sqs.delete_message(QueueUrl=dlq, ReceiptHandle=again["ReceiptHandle"])
    finally:
        sqs.set_queue_attributes(QueueUrl=queue, Attributes={"VisibilityTimeout": saved})


@pytest.mark.skipif(not ROOT_KEY, reason="set SKALD_E2E_ROOT_KEY for the admin round trip")
def test_root_key_reaches_admin_routes_only() -> None:
    root = SyncHTTPClient(url=URL, api_key=ROOT_KEY, timeout=60)
    root.initialize()
    try:
        account = f"e2e-{uuid.uuid4().hex[:8]}"
        created = root.admin_create_account(account, "ops")
        assert created["user_key"]
        with pytest.raises(Exception):  # noqa: B017 - the SDK raises its permission error
            root.ls("viking://resources")
        root.admin_delete_account(account)
    finally:
        root.close()
