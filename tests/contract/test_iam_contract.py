"""IAM contract: every AWS call each function makes, cold start included, is allowed by that
function's role in the synthesised template (and by the resource policies that decide:
the OpenSearch domain access policy, the KMS key policy, bucket and queue policies), and every
action a role is granted is used by some recorded call or explained below.

The calls come from driving the emulated stack (harness.py, scenario.py): every route of each
HTTP function through the API Gateway with the authorizer (valid key, root key, invalid and
missing key), every job kind through its worker's SQS event source, the idle auto-commit
through its schedule, and the failure paths a grant exists for (scenario.py). Judged with
moto's policy engine (iam_eval.py), not string equality.

Both ways are strict: a call its role does not allow fails, and so does a grant (an action on
a resource) that no recorded call used, unless ALLOWANCES says why the deployment needs it
all the same. A new grant therefore comes with the drive step that uses it, or a reason here.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from tests.contract import seams
from tests.contract.cfn import Template
from tests.contract.conftest import Recording
from tests.contract.iam_contract import (
    Allowance,
    Judgement,
    describe_grant,
    judge,
    roles,
    tenant_roles,
    unexplained_unused,
)
from tests.contract.iam_eval import Unjudgeable
from tests.support.tenancy import Ledger, StoreRequest, caller, parts_of, violations
from tests.support.tenancy_capture import failure_report

pytestmark = pytest.mark.contract

ALL = (*seams.FUNCTIONS, "scheduler")

# The condition of a data-plane function's own-role statement on the state table's
# control-plane partitions (tasks, dedup claims, counters) and nothing else.
CONTROL_PLANE = '"dynamodb:LeadingKeys": ["ACCOUNTS", '

# What no recorded call needs, but the deployment does.
ALLOWANCES = (
    Allowance(
        "dynamodb:BatchGetItem",
        "skald.services.metering.limits:UsageLimits.current reads an account's running "
        "usage totals (bytes stored, today's LLM tokens) in one batch, only for an account "
        "whose plan limits storage_bytes or llm_tokens_per_day; the drive's accounts have "
        "the default, unlimited plan",
        functions=frozenset({"content", "sessions", "mcp", "semantic", "memory"}),
        condition="PrincipalTag/skald_account",
    ),
    Allowance("logs:*", "the Lambda service writes the function's logs with its role"),
    Allowance(
        "xray:*",
        "tracing is Active: the Lambda runtime sends trace segments with the "
        "role; X-Ray actions have no resource scoping",
    ),
    Allowance(
        "ec2:*NetworkInterface*",
        "in a VPC the Lambda service manages the function's network interfaces with its role",
    ),
    Allowance(
        "ec2:*PrivateIpAddresses",
        "in a VPC the Lambda service manages the function's network interfaces with its role",
    ),
    Allowance(
        "kms:*",
        "DynamoDB uses the table's customer managed key on the caller's "
        "behalf; which key operations a request causes is not observable "
        "offline",
        condition='"dynamodb.',
    ),
    Allowance(
        "s3:AbortMultipartUpload",
        "skald.adapters.aws.s3.blobstore:S3BlobStore."
        "_put_multipart aborts a multipart upload (objects over 8 MB) that failed "
        "half-way; the drive writes no object that large",
    ),
    Allowance(
        "sqs:ChangeMessageVisibility",
        "skald.adapters.aws.sqs.inspect:"
        "peek_dead_letters makes the dead letters it peeked visible again; only a DLQ "
        "holding letters sees the call, and the drive dead-letters a memory job only",
        functions=frozenset({"content"}),
    ),
    Allowance(
        "sqs:SendMessage",
        "skald.jobs.account_cap:AccountCap.admit puts a job over its account's running cap "
        "back on the worker's own queue as a copy; the drive runs one job of an account at a "
        "time, below the cap (the semantic, fetch and purge workers send there anyway)",
        functions=frozenset({"memory", "autocommit"}),
    ),
    Allowance(
        "s3:PutObject",
        "skald.services.ingest.fetch:RemoteSources._store writes a fetched "
        "source's files; the drive has no network, so every fetch fails before",
        functions=frozenset({"fetch"}),
    ),
    Allowance(
        "sqs:SendMessage",
        "skald.services.ingest.fetch:RemoteSources.run queues the "
        "processing of a fetched source; the drive has no network, so no fetch succeeds",
        functions=frozenset({"fetch"}),
    ),
    Allowance(
        "kms:*",
        "S3 asks the bucket's key for a data key when the fetch worker writes "
        "(and decrypts when it compares) a fetched file; no fetch succeeds in the drive",
        functions=frozenset({"fetch"}),
        condition='"s3.',
    ),
    Allowance(
        "s3:PutObject",
        "skald.adapters.aws.sqs.payloads:S3PayloadStore.put stores a "
        "semantic job too large for one SQS message; the drive sends one from the "
        "fetch worker only (its folder of long names is large enough to be imported by the "
        "worker); the content function sends one for an archive written inline, which the "
        "drive's archives are too small to need, and the other senders' jobs there are "
        "small (a session's tree, an MCP write, a continuation with time to spare)",
        functions=frozenset({"content", "sessions", "mcp", "semantic"}),
        resource="/_jobs/semantic/",
    ),
    Allowance(
        "kms:GenerateDataKey",
        "S3 asks the bucket's key for a data key when such a "
        "large job payload is stored (the allowance above): the only object these "
        "functions write with their own role; their other writes go with their tenant "
        "role",
        functions=frozenset({"content", "sessions", "mcp", "semantic"}),
        condition='"s3.',
    ),
    Allowance(
        "dynamodb:GetItem",
        "skald.adapters.aws.dynamo.extras:DynamoDedupRegistry.claim "
        "reads a claim still held to return its job instead of sending a duplicate; "
        "the drive never sends the same job twice while the first waits (this function's "
        "other item reads go with its tenant role)",
        functions=frozenset({"sessions", "autocommit"}),
        condition=CONTROL_PLANE,
    ),
    Allowance(
        "dynamodb:DeleteItem",
        "skald.adapters.aws.dynamo.extras:DynamoDedupRegistry."
        "release drops the claim of a commit's extraction job that SQS refused; the drive "
        "has SQS refuse it to the auto-commit worker and to MCP's remember only",
        functions=frozenset({"sessions"}),
        condition=CONTROL_PLANE,
    ),
    Allowance(
        "dynamodb:UpdateItem",
        "skald.services.ingest.processing:Processing.submit marks "
        "failed the task of a job that could not be queued; the drive has SQS refuse MCP's "
        "extraction job only (its task ends with the commit's sweeper), never a semantic "
        "job",
        functions=frozenset({"mcp"}),
        condition=CONTROL_PLANE,
    ),
    Allowance(
        "dynamodb:DeleteItem",
        "the idempotency record of a fetch job whose handler "
        "raised is dropped so the retry runs; a fetch that fails for a stated cause ends "
        "its task without raising, and the drive never crashes the fetch worker",
        functions=frozenset({"fetch"}),
    ),
    Allowance(
        "dynamodb:DeleteItem",
        "skald.adapters.aws.dynamo.extras:DynamoDedupRegistry."
        "release drops the claim of a purge job that SQS refused; the drive has SQS "
        "refuse no purge",
        functions=frozenset({"content"}),
        condition=CONTROL_PLANE,
    ),
    Allowance(
        "dynamodb:DeleteItem",
        "the idempotency record of a purge job whose handler "
        "raised is dropped so the retry runs; no purge fails in the drive (the cut-short "
        "purge is tests/conformance/test_tenant_purge.py's)",
        functions=frozenset({"purge"}),
        resource="idempotency",
    ),
    *(
        Allowance(
            action,
            "skald.services.tenancy.deletion:TenantDeletion._ensure gives a "
            "tombstone whose purge failed a new purge (the tombstone updated and its list "
            "entry put, in one transaction, in the account's scope); no purge fails in the "
            "drive",
            functions=frozenset({"purge"}),
            condition="PrincipalTag",
        )
        for action in ("dynamodb:PutItem", "dynamodb:UpdateItem")
    ),
    Allowance(
        "sqs:ChangeMessageVisibility",
        "skald.adapters.aws.sqs.inspect:"
        "purge_dead_letters puts back the dead letters of other tenants it received; "
        "the drive's dead letters at that point are the removed account's own",
        functions=frozenset({"purge"}),
    ),
    Allowance(
        "sqs:DeleteMessage",
        "skald.adapters.aws.sqs.inspect:purge_dead_letters "
        "deletes a removed tenant's dead letters from every dead-letter queue; the drive "
        "dead-letters a memory job of the removed account only",
        functions=frozenset({"purge"}),
    ),
)


@pytest.fixture(scope="module")
def judged(recording: Recording) -> dict[str, Judgement]:
    return judge(
        recording.template,
        recording.calls,
        roles(recording.template, recording.function_ids, recording.principals),
    )


@pytest.fixture(scope="module")
def role_of(recording: Recording) -> dict[str, str]:
    return roles(recording.template, recording.function_ids, recording.principals)


@pytest.fixture(scope="module")
def tenant_role_of(recording: Recording) -> dict[str, str]:
    return tenant_roles(recording.template, recording.function_ids)


# -- the drive reached everything --------------------------------------------------------------


def test_every_route_was_served(recording: Recording) -> None:
    served = {(h.function, h.verb, h.path) for h in recording.hits if h.status < 500}
    routes = {
        (r.function, r.verb, r.path) for f in seams.HTTP_FUNCTIONS for r in seams.routes_of(f)
    }
    assert routes - served == set()
    assert [h for h in recording.hits if h.status >= 500] == []


def test_every_function_and_job_kind_ran(recording: Recording) -> None:
    ran = {c.function for c in recording.calls}
    assert ran >= set(ALL)
    # Each function was loaded (its cold start) with the recorder listening.
    assert set(recording.cold_started) == set(seams.FUNCTIONS)
    phases = {
        c.phase.removeprefix("cold start: ") for c in recording.calls if c.function in seams.WORKERS
    }
    ran_kinds = {k for p in phases if p.startswith("job ") for k in p[4:].split(", ")}
    assert seams.job_kinds() <= ran_kinds
    phases = {c.phase for c in recording.calls if c.function == seams.AUTHORIZER}
    assert any("with a key" in p for p in phases)


def test_a_large_job_payload_went_through_the_bucket(recording: Recording) -> None:
    payloads = {
        (c.function, c.operation)
        for c in recording.calls
        if c.service == "s3" and str(c.params.get("Key", "")).startswith("_jobs/semantic/")
    }
    assert payloads == {
        ("fetch", "PutObject"),  # the drive's folder of long names: imported by the worker
        ("semantic", "GetObject"),
        ("semantic", "DeleteObject"),
    }


# -- every call allowed, every grant used -------------------------------------------------------


@pytest.mark.parametrize("function", ALL)
def test_every_call_is_allowed(function: str, judged: dict[str, Judgement]) -> None:
    assert judged[function].requests > 0, f"{function} made no AWS call"
    assert [d.describe() for d in judged[function].denials] == []


@pytest.mark.parametrize("function", ALL)
def test_every_grant_is_used_or_explained(
    function: str,
    judged: dict[str, Judgement],
    recording: Recording,
    role_of: dict[str, str],
    tenant_role_of: dict[str, str],
) -> None:
    own_and_tenant = [
        role_of[function],
        *([tenant_role_of[function]] if function in tenant_role_of else []),
    ]
    left = unexplained_unused(
        recording.template, own_and_tenant, function, judged[function].used, ALLOWANCES
    )
    unused = [describe_grant(g) for g in left]
    assert unused == [], "\n".join(unused)


# -- the check can fail --------------------------------------------------------------------------


def _without(template: Template, role_id: str, action: str) -> Template:
    broken = template.copy()
    for _, policy in broken.of_type("AWS::IAM::Policy"):
        if {"Ref": role_id} not in policy["Properties"].get("Roles", []):
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = (
                statement["Action"]
                if isinstance(statement["Action"], list)
                else [statement["Action"]]
            )
            statement["Action"] = [a for a in actions if a != action] or ["none:None"]
    return broken


def test_removing_one_grant_fails_the_contract(
    recording: Recording, role_of: dict[str, str], tenant_role_of: dict[str, str]
) -> None:
    baseline = judge(recording.template, recording.calls, role_of)
    assert not baseline["sessions"].denials
    # The search function reads blobs (with its tenant role): without s3:GetObject its reads
    # (GET and HEAD) fail.
    after = judge(
        _without(recording.template, tenant_role_of["search"], "s3:GetObject"),
        recording.calls,
        role_of,
    )["search"]
    denied = {(d.call.operation, d.request.action) for d in after.denials}
    assert {("GetObject", "s3:GetObject"), ("HeadObject", "s3:GetObject")} <= denied
    # A transaction is authorized item by item: without dynamodb:PutItem the sessions
    # function's TransactWriteItems calls fail (there is no TransactWriteItems action).
    after = judge(
        _without(recording.template, tenant_role_of["sessions"], "dynamodb:PutItem"),
        recording.calls,
        role_of,
    )["sessions"]
    assert any(
        d.call.operation == "TransactWriteItems" and d.request.action == "dynamodb:PutItem"
        for d in after.denials
    )
    assert Counter(d.request.action for d in after.denials).keys() == {"dynamodb:PutItem"}


def test_the_domain_access_policy_decides_opensearch_calls(
    recording: Recording, role_of: dict[str, str]
) -> None:
    broken = recording.template.copy()
    content_arn = broken.attribute(role_of["content"], "Arn")
    for _, domain in broken.of_type("AWS::OpenSearchService::Domain"):
        for statement in domain["Properties"]["AccessPolicies"]["Statement"]:
            principals = statement["Principal"]["AWS"]
            if isinstance(principals, list):
                statement["Principal"]["AWS"] = [
                    p for p in principals if broken.resolve(p) != content_arn
                ]
    after = judge(broken, recording.calls, role_of)["content"]
    assert any(d.request.action.startswith("es:ESHttp") for d in after.denials)


def test_a_condition_the_evaluator_cannot_judge_is_refused(
    recording: Recording, role_of: dict[str, str]
) -> None:
    broken = recording.template.copy()
    role = role_of["search"]
    for _, policy in broken.of_type("AWS::IAM::Policy"):
        if {"Ref": role} in policy["Properties"].get("Roles", []):
            statement = copy.deepcopy(policy["Properties"]["PolicyDocument"]["Statement"][0])
            statement["Condition"] = {"DateGreaterThan": {"aws:CurrentTime": "2020-01-01"}}
            policy["Properties"]["PolicyDocument"]["Statement"].append(statement)
    with pytest.raises(Unjudgeable):
        judge(broken, recording.calls, role_of)


def _with_extra(template: Template, role_id: str, statement: dict[str, Any]) -> Template:
    broken = template.copy()
    policy = next(
        p
        for _, p in broken.of_type("AWS::IAM::Policy")
        if {"Ref": role_id} in p["Properties"].get("Roles", [])
    )
    policy["Properties"]["PolicyDocument"]["Statement"].append(statement)
    return broken


def test_a_grant_no_call_uses_fails_the_contract(
    recording: Recording, role_of: dict[str, str]
) -> None:
    role = role_of["search"]
    clean = unexplained_unused(
        recording.template,
        role,
        "search",
        judge(recording.template, recording.calls, role_of)["search"].used,
        ALLOWANCES,
    )
    assert clean == []
    # The search function deletes no blob and lists no tasks: an action it never sends, and
    # one it sends (Query) but on an index it never queries, are both reported.
    bucket = next(c.params["Bucket"] for c in recording.calls if c.service == "s3")
    table = next(
        c.params["TableName"]
        for c in recording.calls
        if c.function == "search" and c.operation == "Query"
    )
    objects = f"arn:aws:s3:::{bucket}/*"
    index = f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}/index/gsi1"
    broken = _with_extra(
        recording.template,
        role,
        {"Effect": "Allow", "Action": "s3:DeleteObject", "Resource": objects},
    )
    broken = _with_extra(
        broken, role, {"Effect": "Allow", "Action": "dynamodb:Query", "Resource": index}
    )
    used = judge(broken, recording.calls, role_of)["search"].used
    left = {
        (g.action, g.resource) for g in unexplained_unused(broken, role, "search", used, ALLOWANCES)
    }
    assert left == {("s3:DeleteObject", objects), ("dynamodb:Query", index)}


def test_reading_a_missing_key_needs_the_bucket_listing(
    recording: Recording, role_of: dict[str, str], tenant_role_of: dict[str, str]
) -> None:
    """S3 answers a missing key with 404 only to a caller allowed s3:ListBucket (403
    otherwise, which the blob store would raise): the auto-commit worker, which never lists,
    needs it for the existence checks of a commit (its tenant role, below its account)."""
    misses = [
        c
        for c in recording.calls
        if c.function == "autocommit" and c.operation == "HeadObject" and c.status == 404
    ]
    assert misses and all(c.session is not None for c in misses)
    after = judge(
        _without(recording.template, tenant_role_of["autocommit"], "s3:ListBucket"),
        recording.calls,
        role_of,
    )["autocommit"]
    assert {(d.call.operation, d.request.action) for d in after.denials} == {
        ("HeadObject", "s3:ListBucket")
    }


# -- tenant scoping over the same recording -------------------------------------------------------
# Here rather than in a file of its own: the drive is a session fixture, built once per test
# worker that runs a file asking for it, and `make test` gives each file a worker of its own.


def _store_requests(recording: Recording) -> list[StoreRequest]:
    out = []
    for c in recording.calls:
        opensearch = c.service == "es"
        out.append(
            StoreRequest(
                "opensearch" if opensearch else c.service,
                c.operation,
                {"path": c.params["path"], "body": c.body} if opensearch else c.params,
                caller(c.tenant),
                answer=c.answer,
                where=f"{c.function}: {c.phase}",
            )
        )
    return out


def test_every_store_request_names_exactly_its_callers_account(recording: Recording) -> None:
    """Every call any function makes (tests/support/tenancy.py), for the tenant of its call:
    the account of the request's API key, of the job's payload; control-plane kinds aside."""
    found = violations(_store_requests(recording))
    assert not found, failure_report(found)
    # The drive acts for two accounts (acme, then doomed, deleted with its data) and for none
    # (root's admin routes, setup, the sweeps).
    assert {c.tenant for c in recording.calls} == {None, "acme", "doomed"}


def test_a_request_runs_as_the_account_of_its_api_key(recording: Recording) -> None:
    """The tenant the rule checks against is the drive's own account for the key of each
    request (the authorizer decides the identity in between; its own calls come first), or
    none for what is no account's: such a call names no account. (Model calls on a pool
    thread run in the request's context, metered to its account, so there may be none.)"""
    served = [c for c in recording.calls if c.caller is not None and c.function != seams.AUTHORIZER]
    assert {c.caller for c in served} == {"acme", "doomed"}
    assert [
        (c.function, c.phase, c.describe(), c.tenant)
        for c in served
        if c.tenant not in (c.caller, None)
    ] == []
    unbound_calls = {id(c) for c in served if c.tenant is None}
    unbound = [
        r
        for c, r in zip(recording.calls, _store_requests(recording), strict=True)
        if id(c) in unbound_calls
    ]
    named = [
        (r.where, r.service, r.operation, p.text)
        for r in unbound
        for p in parts_of(r, Ledger())
        if p.account is not None
    ]
    assert named == []


def test_the_tenancy_check_can_fail(recording: Recording) -> None:
    """The same recording, with the calls of one account's requests attributed to another:
    every one that names an account is reported."""
    acme = frozenset({"acme"})
    moved = [
        replace(r, accounts=frozenset({"someone-else"})) if r.accounts == acme else r
        for r in _store_requests(recording)
    ]
    found = violations(moved)
    assert found and all("not the caller's ['someone-else']" in f for f in found)
