"""The purge of a removed user, then of its whole account, on every backend: cut short by a
crash between two steps, run again, it finishes; then every store, listed as itself (not
through the product), holds nothing of the tenant.

The local backend is `skald serve`'s data dir (tests/support/tenant_stores.py reads it); the
AWS adapters run on aws-local's emulators (moto: S3 with versioning, as the stack's bucket,
DynamoDB, SQS with dead-letter queues, EventBridge Scheduler; osmem-server for OpenSearch),
read back with their own clients. Jobs run here, one at a time, as the workers would run them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from skald import catalog
from skald.compose.composition import Composition
from skald.compose.entrypoints import adapter_factory
from skald.config import Settings
from skald.domain.access.identity import Identity
from skald.domain.paths.uri import parse_uri
from skald.jobs.registry import run_job
from skald.services.faults import CrashPoint
from skald.services.sessions.service import NewMessage
from tests.support.tenant_stores import local_leftovers

ROOT = Identity("_root", "root", "root")
SECRET = "the vault opens with 7-4-1"


@dataclass
class Backend:
    name: str
    settings: Settings
    stack: Any = None

    def services(self, faults: str | None = None, attempts: int | None = None) -> Composition:
        """`attempts`: a queue that dead-letters a job after that many failures."""
        settings = self.settings.model_copy(
            update={
                "fault_points": faults,
                "job_max_attempts": attempts or self.settings.job_max_attempts,
            }
        )
        return Composition(settings, adapter_factory(settings), name="serve")


@pytest.fixture(params=["local", "aws-local"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    base = Settings(
        backend="local", data_dir=tmp_path / "data", root_api_key="root-key", llm_provider="none"
    )
    if request.param == "local":
        services = Backend("local", base).services()
        services.adapters.factory.setup()
        services.close()
        yield Backend("local", base)
        return
    pytest.importorskip("moto")
    pytest.importorskip("osmem_server")
    from skald.adapters.aws.local_stack import LocalAwsStack

    stack = LocalAwsStack(base.model_copy(update={"backend": "aws-local"}))
    settings = stack.start().model_copy(
        update={
            "scheduler_group": "skald-idle-commit",
            "queue_arns": {
                catalog.QUEUE_AUTOCOMMIT: "arn:aws:sqs:us-east-1:123456789012:skald-autocommit"
            },
            "scheduler_role_arn": "arn:aws:iam::123456789012:role/skald-scheduler",
        }
    )
    factory = adapter_factory(settings)
    factory.setup()
    factory.close()
    try:
        yield Backend("aws-local", settings, stack)
    finally:
        stack.stop()


def drain(services: Composition, *, faults: bool = False) -> None:
    """Every queued job, as the workers run them; a crash point ends the pass (the job stays
    leased, as a worker killed there leaves it)."""
    for _ in range(50):
        moved = False
        for q in catalog.QUEUES:
            for lease in services.queue.lease(q.name, max_jobs=10, visibility_s=1):
                moved = True
                try:
                    run_job(services, lease.job.kind, lease.job.payload)
                except CrashPoint:
                    if faults:
                        raise
                    raise AssertionError("a crash point fired with faults off") from None
                except Exception as exc:  # noqa: BLE001 - a failing job goes to its DLQ
                    services.queue.nack(lease, f"{type(exc).__name__}: {exc}")
                    continue
                services.queue.ack(lease)
        if not moved:
            return
    raise AssertionError("the queues did not drain")


def populate(services: Composition, account: str, user: str) -> Identity:
    """A user with everything a user owns: files (two versions), a committed session with
    memories, an idle session (its timer), an upload, a watch, tasks, a dead letter."""
    row = services.state.get_user(account, user)
    assert row is not None
    me = Identity(account, user, row.role, generation=row.generation)
    services.fs.ensure_preset(me)
    secret = parse_uri(f"viking://user/{user}/resources/secret.md", user_id=user)
    for text in (f"# Secret\n\n{SECRET}.\n", f"# Secret\n\n{SECRET}, again.\n"):
        services.content.write(
            me,
            secret,
            text,
            mode="replace",
            wait=False,
            processing_mode="semantic_and_vectors",
            tags=None,
            tag_mode="replace",
        )
    services.sessions.add_messages(
        me, "s-talk", [NewMessage("user", f"Remember {SECRET}."), NewMessage("assistant", "Noted.")]
    )
    services.sessions.commit(me, "s-talk")
    services.sessions.create(me, "s-idle", auto_commit_policy={"idle_seconds": 3600})
    services.sessions.add_messages(me, "s-idle", [NewMessage("user", "Later.")])
    services.resources.temp_upload(me, "note.md", b"an unused upload")
    services.watches.create(
        me, "https://example.invalid/x", f"viking://user/{user}/resources/w", 60
    )
    drain(services)
    return me


def dead_letter(backend: Backend, account: str, user: str) -> None:
    """A job of the user that failed out of its attempts: a dead letter naming the tenant."""
    services = backend.services(attempts=1)
    services.queue.enqueue(
        catalog.QUEUE_FETCH, catalog.JOB_FETCH, {"account": account, "user": user, "task_id": "t-x"}
    )
    drain(services)
    assert services.queue.stats(catalog.QUEUE_FETCH).dead >= 1
    services.close()


def aws_leftovers(backend: Backend, account: str, user: str | None) -> dict[str, list[str]]:
    import boto3

    s = backend.settings

    def client(service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=s.aws_endpoint_url,  # type: ignore[call-overload]
            region_name="us-east-1",
        )

    prefix = f"{account}/" if user is None else f"{account}/user/{user}/"
    page = client("s3").list_object_versions(Bucket=s.bucket, Prefix=prefix)
    out = {
        "s3": [
            f"{v['Key']}@{v['VersionId']}"
            for v in (*page.get("Versions", []), *page.get("DeleteMarkers", []))
        ]
    }
    uploads = client("s3").list_objects_v2(Bucket=s.bucket, Prefix=f"{account}/upload/")
    s3 = client("s3")
    out["s3"] += [
        o["Key"]
        for o in uploads.get("Contents", [])
        if o["Key"].endswith(".meta")
        and (
            user is None
            or json.loads(s3.get_object(Bucket=s.bucket, Key=o["Key"])["Body"].read()).get("user")
            == user
        )
    ]
    watches = s3.list_objects_v2(Bucket=s.bucket, Prefix="_watches/").get("Contents", [])
    out["watches"] = [
        o["Key"]
        for o in watches
        if (w := json.loads(s3.get_object(Bucket=s.bucket, Key=o["Key"])["Body"].read()))[
            "account_id"
        ]
        == account
        and (user is None or w["user_id"] == user)
    ]
    items = client("dynamodb").scan(TableName=s.state_table)["Items"]

    def about(item: dict[str, Any]) -> bool:
        text = json.dumps(item)
        if item["pk"]["S"].startswith("AUDIT#"):
            return False  # the audit trail outlives what it records, for its retention
        if item.get("task_type", {}).get("S") in ("user_delete", "account_delete"):
            return False  # the purge's own task belongs to whoever asked
        names_account = (
            f'"{account}"' in text or f"#{account}#" in text or text.count(f'ACCT#{account}"') > 0
        )
        return names_account and (user is None or f'"{user}"' in text or f"#{user}" in text)

    out["dynamodb"] = [f"{i['pk']['S']} {i['sk']['S']}" for i in items if about(i)]
    sqs = client("sqs")
    out["sqs"] = []
    for q in catalog.QUEUES:
        for url in (s.queue_urls[q.name], s.dlq_urls[q.name]):
            got = sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0
            ).get("Messages", [])
            out["sqs"] += [
                m["Body"]
                for m in got
                if f'"{account}"' in m["Body"]
                and (user is None or f'"{user}"' in m["Body"])
                and "task_id" in m["Body"]
                and catalog.JOB_PURGE not in m["Body"]
            ]
    scheduler = client("scheduler")
    inputs = {
        sch["Name"]: json.loads(
            scheduler.get_schedule(GroupName=s.scheduler_group, Name=sch["Name"])["Target"]["Input"]
        )
        for sch in scheduler.list_schedules(GroupName=s.scheduler_group)["Schedules"]
    }
    out["schedules"] = [
        name
        for name, payload in inputs.items()
        if payload.get("account") == account and (user is None or payload.get("user") == user)
    ]
    index = backend.services().index
    records, _ = index.scroll(account, limit=1000)
    mine = f"viking://user/{user}"
    out["index_records"] = [
        r.uri for r in records if user is None or r.uri == mine or r.uri.startswith(mine + "/")
    ]
    return out


def leftovers(backend: Backend, account: str, user: str | None) -> dict[str, list[str]]:
    if backend.name == "local":
        return local_leftovers(backend.settings.data_dir, account, user)
    return aws_leftovers(backend, account, user)


def test_a_purge_cut_short_finishes_and_leaves_nothing(backend: Backend) -> None:
    services = backend.services()
    services.accounts.create_account(ROOT, "acme", "alice")
    services.accounts.register_user(ROOT, "acme", "bob", "user")
    populate(services, "acme", "bob")
    alice = populate(services, "acme", "alice")
    dead_letter(backend, "acme", "bob")
    before = leftovers(backend, "acme", "bob")
    assert any(before.values()) and before["index_records"], before

    removed = services.accounts.remove_user(alice, "acme", "bob")
    services.close()
    crashing = backend.services(faults="purge.after_index_records=raise")
    with pytest.raises(CrashPoint):
        drain(crashing, faults=True)
    crashing.close()
    half = leftovers(backend, "acme", "bob")
    assert not half["index_records"] and any(half.values()), half  # cut between two steps

    again = backend.services()
    import time

    time.sleep(1.2)  # the crashed job's lease runs out, as a dead worker's does
    drain(again)
    task = again.tasks.store.get_task(removed.task_id)
    assert task is not None and task.status == "completed", task
    left = leftovers(backend, "acme", "bob")
    assert not any(left.values()), left
    kept = leftovers(backend, "acme", "alice")
    assert kept["index_records"], kept  # the others untouched

    # the whole account, the same way
    deleted = again.accounts.delete_account(ROOT, "acme")
    drain(again)
    assert again.tasks.store.get_task(deleted.task_id).status == "completed"  # type: ignore[union-attr]
    gone = leftovers(backend, "acme", None)
    assert not any(gone.values()), gone
    assert again.state.get_account("acme") is None
    again.close()
