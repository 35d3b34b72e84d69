"""IAM contract: every AWS call each function makes, cold start included, is allowed by that
function's role in the synthesised template (and by the resource policies that decide:
the OpenSearch domain access policy, the KMS key policy, bucket and queue policies), and every
action a role is granted is used by some recorded call or explained below.

The calls come from driving the emulated stack (harness.py, scenario.py): every route of each
HTTP function through the API Gateway with the authorizer (valid key, root key, invalid and
missing key), every job kind through its worker's SQS event source, the idle auto-commit
through its schedule. Judged with moto's policy engine (iam_eval.py), not string equality.

KNOWN_DENIALS and KNOWN_UNUSED are what today's code and template get wrong. Their tests are
strict expected failures: when a fix lands they pass, fail as XPASS, and the entries go.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from tests.contract import seams
from tests.contract.cfn import Template
from tests.contract.conftest import Recording
from tests.contract.iam_contract import (
    Allowance,
    Judgement,
    judge,
    matches,
    roles,
    unexplained_unused,
)
from tests.contract.iam_eval import Unjudgeable

pytestmark = pytest.mark.contract

ALL = (*seams.FUNCTIONS, "scheduler")

# What no recorded call needs, but the deployment does.
ALLOWANCES = (
    Allowance("logs:*", "the Lambda service writes the function's logs with its role"),
    Allowance("xray:*", "tracing is Active: the Lambda runtime sends trace segments with the "
                        "role; X-Ray actions have no resource scoping"),
    Allowance("ec2:*NetworkInterface*", "in a VPC the Lambda service manages the function's "
                                        "network interfaces with its role"),
    Allowance("ec2:*PrivateIpAddresses", "in a VPC the Lambda service manages the function's "
                                         "network interfaces with its role"),
    Allowance("kms:*", "DynamoDB uses the table's customer managed key on the caller's "
                       "behalf; which key operations a request causes is not observable "
                       "offline", condition='"dynamodb.'),
    Allowance("s3:AbortMultipartUpload", "sent only when a multipart upload fails (the blob "
                                         "store aborts it); the drive's writes are small"),
    Allowance("sqs:ChangeMessageVisibility", "granted with the event source mapping (CDK "
              "Queue.grantConsumeMessages); the mapping itself does not send it",
              functions=frozenset(seams.WORKERS)),
    Allowance("sqs:GetQueueUrl", "granted with the event source mapping (CDK "
              "Queue.grantConsumeMessages); the mapping itself does not send it",
              functions=frozenset(seams.WORKERS)),
)

# (action, resource glob) of each call today's code makes that the role does not allow.
KNOWN_DENIALS: dict[str, dict[tuple[str, str], str]] = {
    "search": {
        ("es:ESHttpPut", "*:domain/*/skald-records"):
            "cold start: the container calls OpenSearchIndex.ensure_index(), PUT <index>; "
            "the search role may only GET/HEAD/POST on the domain",
        ("s3:PutObject", "arn:aws:s3:::*/.abstract.md"):
            "first data request of an identity: data_identity -> VikingFS.ensure_preset "
            "writes the preset directories, with a read-only role",
        ("kms:GenerateDataKey", "arn:aws:kms:*"):
            "the same preset writes need the bucket key through S3",
    },
    "authorizer": {
        ("es:ESHttpPut", "*:domain/*/skald-records"):
            "first keyed request: the authorizer builds the whole container, whose "
            "OpenSearchIndex.ensure_index() sends PUT <index>; the role has no es grant",
        ("es:ESHttpGet", "*:domain/*/skald-records/_mapping"):
            "ensure_index() then reads the mapping of the existing index",
    },
    "content": {
        ("sqs:GetQueueAttributes", "arn:aws:sqs:*"):
            "/ready, /api/v1/observer/* and /api/v1/system/wait read the job queues' "
            "depths (SqsJobQueue.stats); the content role may only send",
    },
}

# Granted actions no recorded call used: over-grants, or paths the drive does not reach.
KNOWN_UNUSED: dict[str, dict[str, str]] = {
    "content": {
        "bedrock:InvokeModel": "content never embeds nor calls the LLM (the workers do)",
        "dynamodb:BatchGetItem": "not sent by content",
        "es:ESHttpDelete": "not sent by content", "es:ESHttpHead": "not sent by content",
        "es:ESHttpPatch": "not sent by content",
        "es:ESHttpGet": "not sent by content (its cold start creates the index: PUT)",
        "kms:DescribeKey": "S3 and Secrets Manager never need it from the caller",
        "kms:Encrypt": "S3 asks for GenerateDataKey, not Encrypt",
        "secretsmanager:GetSecretValue": "HTTP functions never load the root key secret: "
                                         "they run in dev mode",
    },
    "search": {
        "dynamodb:BatchGetItem": "not sent by search",
        "dynamodb:ConditionCheckItem": "not sent by search",
        "es:ESHttpHead": "not sent by search",
        "kms:DescribeKey": "S3 and Secrets Manager never need it from the caller",
        "secretsmanager:GetSecretValue": "HTTP functions never load the root key secret: "
                                         "they run in dev mode",
    },
    "sessions": {
        "bedrock:InvokeModel": "sessions never embeds nor calls the LLM",
        "dynamodb:ConditionCheckItem": "not sent by sessions",
        "es:ESHttpDelete": "not sent by sessions", "es:ESHttpHead": "not sent by sessions",
        "es:ESHttpPatch": "not sent by sessions", "es:ESHttpPost": "not sent by sessions",
        "kms:DescribeKey": "S3 and Secrets Manager never need it from the caller",
        "kms:Encrypt": "S3 asks for GenerateDataKey, not Encrypt",
        "scheduler:DeleteSchedule": "no route cancels an idle timer (deleting a session "
                                    "leaves its schedule to fire and find nothing)",
        "secretsmanager:GetSecretValue": "HTTP functions never load the root key secret: "
                                         "they run in dev mode",
    },
    "authorizer": {
        "dynamodb:Query": "key lookups are GetItem only",
        "kms:DescribeKey": "Secrets Manager never needs it from the caller",
    },
    "semantic": {
        "dynamodb:BatchGetItem": "not sent", "dynamodb:BatchWriteItem": "not sent",
        "dynamodb:ConditionCheckItem": "not sent", "dynamodb:DeleteItem": "not sent",
        "dynamodb:Query": "not sent",
        "es:ESHttpDelete": "not sent", "es:ESHttpHead": "not sent",
        "es:ESHttpPatch": "not sent",
        "kms:DescribeKey": "S3 never needs it from the caller",
        "kms:Encrypt": "S3 asks for GenerateDataKey, not Encrypt",
        "s3:DeleteObject": "not sent by the drive's semantic jobs",
        "sqs:SendMessage": "the semantic worker enqueues nothing",
    },
    "memory": {
        "dynamodb:BatchGetItem": "not sent", "dynamodb:BatchWriteItem": "not sent",
        "es:ESHttpDelete": "not sent", "es:ESHttpHead": "not sent",
        "es:ESHttpPatch": "not sent",
        "kms:DescribeKey": "S3 never needs it from the caller",
        "kms:Encrypt": "S3 asks for GenerateDataKey, not Encrypt",
        "s3:DeleteObject": "not sent by the drive's extraction (no memory was merged away)",
        "sqs:SendMessage": "the memory worker's follow-up semantic jobs: not sent in the drive",
    },
    "autocommit": {
        "bedrock:InvokeModel": "commit phase 1 embeds nothing",
        "dynamodb:BatchGetItem": "not sent", "dynamodb:BatchWriteItem": "not sent",
        "dynamodb:ConditionCheckItem": "not sent", "dynamodb:DeleteItem": "not sent",
        "es:ESHttpDelete": "not sent", "es:ESHttpHead": "not sent",
        "es:ESHttpPatch": "not sent", "es:ESHttpPost": "not sent",
        "kms:DescribeKey": "S3 never needs it from the caller",
        "kms:Encrypt": "S3 asks for GenerateDataKey, not Encrypt",
        "s3:DeleteObject": "not sent", "s3:ListBucket": "not sent",
    },
}


def _xfail(function: str, known: dict[str, dict[object, str]], what: str) -> pytest.param:
    marks = []
    if function in known:
        reasons = "; ".join(f"{k}: {v}" for k, v in known[function].items())
        marks.append(pytest.mark.xfail(strict=True, reason=f"{what}: {reasons}"))
    return pytest.param(function, marks=marks, id=function)


@pytest.fixture(scope="module")
def judged(recording: Recording) -> dict[str, Judgement]:
    return judge(recording.template, recording.calls,
                 roles(recording.template, recording.function_ids, recording.principals))


@pytest.fixture(scope="module")
def role_of(recording: Recording) -> dict[str, str]:
    return roles(recording.template, recording.function_ids, recording.principals)


# -- the drive reached everything --------------------------------------------------------------


def test_every_route_was_served(recording: Recording) -> None:
    served = {(h.function, h.verb, h.path) for h in recording.hits if h.status < 500}
    routes = {(r.function, r.verb, r.path) for f in seams.HTTP_FUNCTIONS
              for r in seams.routes_of(f)}
    assert routes - served == set()
    assert [h for h in recording.hits if h.status >= 500] == []


def test_every_function_and_job_kind_ran(recording: Recording) -> None:
    ran = {c.function for c in recording.calls}
    assert ran >= set(ALL)
    # Each function was loaded (its cold start) with the recorder listening.
    assert set(recording.cold_started) == set(seams.FUNCTIONS)
    phases = {c.phase.removeprefix("cold start: ") for c in recording.calls
              if c.function in seams.WORKERS}
    ran_kinds = {k for p in phases if p.startswith("job ") for k in p[4:].split(", ")}
    assert seams.job_kinds() <= ran_kinds
    phases = {c.phase for c in recording.calls if c.function == seams.AUTHORIZER}
    assert any("with a key" in p for p in phases)


# -- every call allowed --------------------------------------------------------------------------


@pytest.mark.parametrize("function", [_xfail(f, KNOWN_DENIALS, "denied today")  # type: ignore
                                      for f in ALL])
def test_every_call_is_allowed(function: str, judged: dict[str, Judgement]) -> None:
    assert judged[function].requests > 0, f"{function} made no AWS call"
    assert [d.describe() for d in judged[function].denials] == []


def test_the_known_denials_are_exactly_these(judged: dict[str, Judgement]) -> None:
    """Nothing else hides behind the expected failures above, and each entry still
    happens (remove it, and its xfail mark goes with it, when it is fixed)."""
    unknown = [d.describe() for f, j in judged.items() for d in j.denials
               if not any(matches(d, p) for p in KNOWN_DENIALS.get(f, {}))]
    stale = [(f, p) for f, known in KNOWN_DENIALS.items() for p in known
             if not any(matches(d, p) for d in judged[f].denials)]
    assert (unknown, stale) == ([], [])


# -- every grant used --------------------------------------------------------------------------


@pytest.mark.parametrize("function", [_xfail(f, KNOWN_UNUSED, "granted, never used")  # type: ignore
                                      for f in ALL])
def test_every_granted_action_is_used(function: str, judged: dict[str, Judgement],
                                      recording: Recording, role_of: dict[str, str]) -> None:
    left = unexplained_unused(recording.template, role_of[function], function,
                              judged[function].used, ALLOWANCES)
    assert sorted(left) == []


def test_the_known_unused_grants_are_exactly_these(judged: dict[str, Judgement],
                                                   recording: Recording,
                                                   role_of: dict[str, str]) -> None:
    found = {f: set(unexplained_unused(recording.template, role_of[f], f, judged[f].used,
                                       ALLOWANCES)) for f in ALL}
    known = {f: set(KNOWN_UNUSED.get(f, {})) for f in ALL}
    assert found == known


# -- the check can fail --------------------------------------------------------------------------


def _without(template: Template, role_id: str, action: str) -> Template:
    broken = template.copy()
    for _, policy in broken.of_type("AWS::IAM::Policy"):
        if {"Ref": role_id} not in policy["Properties"].get("Roles", []):
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) \
                else [statement["Action"]]
            statement["Action"] = [a for a in actions if a != action] or ["none:None"]
    return broken


def test_removing_one_grant_fails_the_contract(recording: Recording,
                                               role_of: dict[str, str]) -> None:
    baseline = judge(recording.template, recording.calls, role_of)
    assert not baseline["sessions"].denials
    # The search function reads blobs: without s3:GetObject its reads (GET and HEAD) fail.
    after = judge(_without(recording.template, role_of["search"], "s3:GetObject"),
                  recording.calls, role_of)["search"]
    denied = {(d.call.operation, d.request.action) for d in after.denials}
    assert {("GetObject", "s3:GetObject"), ("HeadObject", "s3:GetObject")} <= denied
    # A transaction is authorized item by item: without dynamodb:PutItem the sessions
    # function's TransactWriteItems calls fail (there is no TransactWriteItems action).
    after = judge(_without(recording.template, role_of["sessions"], "dynamodb:PutItem"),
                  recording.calls, role_of)["sessions"]
    assert any(d.call.operation == "TransactWriteItems" and
               d.request.action == "dynamodb:PutItem" for d in after.denials)
    assert Counter(d.request.action for d in after.denials).keys() == {"dynamodb:PutItem"}


def test_the_domain_access_policy_decides_opensearch_calls(recording: Recording,
                                                           role_of: dict[str, str]) -> None:
    broken = recording.template.copy()
    content_arn = broken.attribute(role_of["content"], "Arn")
    for _, domain in broken.of_type("AWS::OpenSearchService::Domain"):
        for statement in domain["Properties"]["AccessPolicies"]["Statement"]:
            principals = statement["Principal"]["AWS"]
            if isinstance(principals, list):
                statement["Principal"]["AWS"] = [
                    p for p in principals if broken.resolve(p) != content_arn]
    after = judge(broken, recording.calls, role_of)["content"]
    assert any(d.request.action.startswith("es:ESHttp") for d in after.denials)


def test_a_condition_the_evaluator_cannot_judge_is_refused(recording: Recording,
                                                          role_of: dict[str, str]) -> None:
    broken = recording.template.copy()
    role = role_of["search"]
    for _, policy in broken.of_type("AWS::IAM::Policy"):
        if {"Ref": role} in policy["Properties"].get("Roles", []):
            statement = copy.deepcopy(policy["Properties"]["PolicyDocument"]["Statement"][0])
            statement["Condition"] = {"DateGreaterThan": {"aws:CurrentTime": "2020-01-01"}}
            policy["Properties"]["PolicyDocument"]["Statement"].append(statement)
    with pytest.raises(Unjudgeable):
        judge(broken, recording.calls, role_of)
