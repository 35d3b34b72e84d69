"""Least privilege in the synthesised templates: what each function's role may do follows from
the catalogue through infra/access.py, and a few rules hold whatever the catalogue says. (That
the grants are exactly what the code sends is the IAM contract's to prove: tests/contract.)"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("aws_cdk", reason="infra extra not installed (pip install -e '.[infra]')")

from infra import access  # noqa: E402
from skald import catalog  # noqa: E402

if TYPE_CHECKING:
    from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra

Grants = set[tuple[str, str]]  # (action, resource as JSON)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _grants(synth: Synth, role_id: str, *, via: str | None = None) -> Grants:
    """The (action, resource) pairs the role's identity policies allow; with `via`, only the
    statements conditioned on kms:ViaService of that service."""
    out: Grants = set()
    for policy in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} not in policy["Properties"]["Roles"]:
            continue
        for statement in _list(policy["Properties"]["PolicyDocument"]["Statement"]):
            service = json.dumps(statement.get("Condition", {}))
            if via is not None and f'"{via}.' not in service:
                continue
            out |= {
                (a, json.dumps(r, sort_keys=True))
                for a in _list(statement["Action"])
                for r in _list(statement["Resource"])
            }
    return out


def _roles(synth: Synth) -> dict[str, str]:
    return {name: synth.logical_id(fn.role) for name, fn in synth.stack.functions.by_name.items()}


def _tenant_roles(synth: Synth) -> dict[str, str]:
    return {
        name: synth.logical_id(role) for name, role in synth.stack.functions.tenant_roles.items()
    }


def _arn(synth: Synth, construct: Any) -> str:
    return json.dumps({"Fn::GetAtt": [synth.logical_id(construct), "Arn"]}, sort_keys=True)


def _holders(synth: Synth, action: str, resource: str) -> set[str]:
    return {
        name for name, role in _roles(synth).items() if (action, resource) in _grants(synth, role)
    }


def test_state_table_grants_are_the_catalogues(any_mode: Synth) -> None:
    """Between its own role and its tenant role (data-plane functions), each function may do
    on the table what the catalogue says."""
    table = _arn(any_mode, any_mode.stack.storage.state_table)
    tenant = _tenant_roles(any_mode)
    for spec in catalog.FUNCTIONS:
        roles = [_roles(any_mode)[spec.name], *([tenant[spec.name]] if spec.name in tenant else [])]
        granted = {
            a
            for role in roles
            for a, r in _grants(any_mode, role)
            if a.startswith("dynamodb:") and r == table
        }
        expected = access.state_table(spec)
        assert granted == (set(expected.actions) if expected else set()), spec.name


def test_key_lookups_are_point_reads_and_a_last_use(any_mode: Synth) -> None:
    """The key's guard, then its key, user and account in one batch; the key's last use."""
    [authorizer] = catalog.functions("authorizer")
    dynamo = {
        g
        for g in _grants(any_mode, _roles(any_mode)[authorizer.name])
        if g[0].startswith("dynamodb:")
    }
    table = _arn(any_mode, any_mode.stack.storage.state_table)
    assert dynamo == {
        (a, table) for a in ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:UpdateItem")
    }


def test_only_task_listing_and_the_commit_sweeper_query_an_index(any_mode: Synth) -> None:
    """gsi1 lists an account's tasks (the content function, and the purge of a removed
    tenant) and holds the outbox keys of half-done commits (the sweeper runs on the
    auto-commit worker); the `idle` index serves the idle sweep of `skald serve`, which the
    cloud replaces with the Scheduler."""
    queried = {
        (name, r)
        for name, role in _roles(any_mode).items()
        for a, r in _grants(any_mode, role)
        if "/index/" in r
    }
    assert {name for name, _ in queried} == {"content", "autocommit", "purge"}
    assert all('"/index/gsi1"' in r and "idle" not in r for _, r in queried)


@pytest.mark.parametrize("service", ["s3", "secretsmanager"])
def test_the_data_key_is_only_decrypt_and_generate(any_mode: Synth, service: str) -> None:
    """S3 (SSE-KMS) and Secrets Manager ask KMS to decrypt or to generate a data key, with
    the caller's credentials; never Encrypt or DescribeKey."""
    actions = {
        a for role in _roles(any_mode).values() for a, _ in _grants(any_mode, role, via=service)
    }
    assert actions and actions <= {"kms:Decrypt", "kms:GenerateDataKey"}
    if service == "secretsmanager":
        assert actions == {"kms:Decrypt"}


def _objects(synth: Synth, pattern: str) -> str:
    return json.dumps(
        {
            "Fn::Join": [
                "",
                [{"Fn::GetAtt": [synth.logical_id(synth.stack.storage.bucket), "Arn"]}, pattern],
            ]
        },
        sort_keys=True,
    )


def test_blob_deletes_are_for_the_functions_whose_code_deletes(any_mode: Synth) -> None:
    """With tenant credentials, on the tagged account's objects only."""
    tenant = _tenant_roles(any_mode)
    account = _objects(any_mode, "/${aws:PrincipalTag/skald_account}/*")

    def holders(action: str) -> set[str]:
        return {
            name for name, role in tenant.items() if (action, account) in _grants(any_mode, role)
        }

    # fetch: a failed fetch's reserved root, a watched source's removed files; purge: every
    # version of a removed tenant's objects
    assert holders("s3:DeleteObject") == {"content", "sessions", "mcp", "memory", "fetch", "purge"}
    assert holders("s3:DeleteObjectVersion") == {"purge"}
    assert holders("s3:PutObject") == {
        "content",
        "sessions",
        "mcp",
        "memory",
        "semantic",
        "autocommit",
        "fetch",
    }
    # No role reaches every account's objects: root's admin routes that name no account
    # write no object, and the others run in the scope of the account they name.
    every_account = _objects(any_mode, "/*")
    assert _holders(any_mode, "s3:DeleteObject", every_account) == set()
    assert _holders(any_mode, "s3:PutObject", every_account) == set()


def test_each_queue_takes_jobs_from_its_senders_only(any_mode: Synth) -> None:
    queues = any_mode.stack.workers.queues
    senders = {q: _holders(any_mode, "sqs:SendMessage", _arn(any_mode, queues[q])) for q in queues}
    # the semantic worker queues the rest of a job short of time on its own queue; every
    # worker puts a job over its account's running cap back on its own queue
    assert senders == {
        "semantic": {"content", "sessions", "mcp", "fetch", "semantic"},
        "memory": {"sessions", "mcp", "autocommit", "memory"},
        "autocommit": {"autocommit"},  # and the Scheduler's role delivers there
        "fetch": {"content", "mcp", "fetch"},  # the watch sweep queues fetches
        # admin routes queue a purge; a purge short of time queues the rest
        "purge": {"content", "purge"},
    }


def test_workers_consume_what_the_event_source_mapping_needs(any_mode: Synth) -> None:
    for spec in catalog.functions("worker"):
        assert spec.queue is not None
        queue = _arn(any_mode, any_mode.stack.workers.queues[spec.queue])
        sqs = {a for a, r in _grants(any_mode, _roles(any_mode)[spec.name]) if r == queue}
        # and every worker sends to its own queue: a job over its account's running cap is put
        # back as a copy (the fetch worker's watch sweep and the semantic worker's
        # continuations send there too)
        assert sqs == {
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:SendMessage",
        }


def test_only_queue_status_and_purges_reach_the_dead_letter_queues(any_mode: Synth) -> None:
    """The content function counts and peeks dead letters (queue status, the console's DLQ
    view); the purge worker also deletes a removed tenant's; no other function sees them,
    and nothing sends there."""
    dlqs = {_arn(any_mode, q) for q in any_mode.stack.workers.dead_letter_queues.values()}
    peek = {"sqs:GetQueueAttributes", "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility"}
    for name, role in _roles(any_mode).items():
        granted = {(a, r) for a, r in _grants(any_mode, role) if r in dlqs}
        if name in ("content", "purge"):
            assert {r for _, r in granted} == dlqs
            expected = (
                peek
                if name == "content"
                else {"sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage"}
            )
            assert {a for a, _ in granted} == expected, name
        else:
            assert not granted, name


def test_schedules_are_deleted_by_the_purge_only(any_mode: Synth) -> None:
    """Idle timers are created and moved by the functions that take messages; only the purge
    of a removed user or account deletes them (the others fire once and find nothing)."""
    holders: dict[str, set[str]] = {}
    for name, role in _roles(any_mode).items():
        for action, _ in _grants(any_mode, role):
            if action.startswith("scheduler:"):
                holders.setdefault(action, set()).add(name)
    assert holders["scheduler:DeleteSchedule"] == {"purge"}
    assert {"sessions", "mcp"} <= holders["scheduler:CreateSchedule"]
    assert "purge" not in holders["scheduler:CreateSchedule"]


def test_idempotency_records_are_never_read_back(any_mode: Synth) -> None:
    table = _arn(any_mode, any_mode.stack.storage.idempotency_table)
    for spec in catalog.functions("worker"):
        granted = {a for a, r in _grants(any_mode, _roles(any_mode)[spec.name]) if r == table}
        assert granted == {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}


def test_job_payloads_are_put_by_senders_and_taken_by_the_worker(any_mode: Synth) -> None:
    """Payloads too large for a message (semantic jobs) go to `_jobs/semantic/`: whoever sends
    to the queue may put them there, its worker reads and deletes them; no other prefix."""
    bucket = {"Fn::GetAtt": [any_mode.logical_id(any_mode.stack.storage.bucket), "Arn"]}

    def objects(prefix: str) -> str:
        return json.dumps({"Fn::Join": ["", [bucket, f"/{prefix}"]]}, sort_keys=True)

    semantic = objects("_jobs/semantic/*")
    assert _holders(any_mode, "s3:PutObject", semantic) == {
        "content",
        "sessions",
        "mcp",
        "fetch",
        "semantic",
    }
    assert _holders(any_mode, "s3:GetObject", semantic) == {"semantic"}
    assert _holders(any_mode, "s3:DeleteObject", semantic) == {"semantic"}
    payload_grants = {
        r for role in _roles(any_mode).values() for _, r in _grants(any_mode, role) if "_jobs/" in r
    }
    assert payload_grants == {semantic}


def test_leftover_job_payloads_expire_after_any_queue_retention(any_mode: Synth) -> None:
    [bucket] = [
        b
        for lid, b in any_mode.resources("AWS::S3::Bucket").items()
        if lid == any_mode.logical_id(any_mode.stack.storage.bucket)
    ]
    rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    [rule] = [r for r in rules if r.get("Prefix") == catalog.JOB_PAYLOAD_PREFIX]
    assert rule["Status"] == "Enabled"
    longest = max(max(q.retention_days, q.dlq_retention_days) for q in catalog.QUEUES)
    assert rule["ExpirationInDays"] > longest


def test_the_routers_that_admit_work_are_the_ones_the_api_guards() -> None:
    """infra/access.py grants the admission check's read to the functions serving routers
    whose routes queue work behind it (skald/api/deps.py Admitted): the same routers."""
    import importlib

    from fastapi.routing import APIRoute

    from skald.api.deps import admit_work

    def admits(route: APIRoute) -> bool:
        stack = list(route.dependant.dependencies)
        while stack:
            dep = stack.pop()
            if dep.call is admit_work:
                return True
            stack.extend(dep.dependencies)
        return False

    routers = {r for fn in catalog.FUNCTIONS for r in fn.routers if r != "mcp"}
    guarded = {
        name
        for name in routers
        if any(
            isinstance(route, APIRoute) and admits(route)
            for route in importlib.import_module(f"skald.api.routers.{name}").router.routes
        )
    }
    assert guarded == access.ADMITTING_ROUTERS
