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
KNOWN_DENIALS: dict[str, dict[tuple[str, str], str]] = {}

# Granted actions no recorded call used: over-grants, or paths the drive does not reach.
KNOWN_UNUSED: dict[str, dict[str, str]] = {
    "setup": {
        "es:ESHttpDelete": "not triaged since the per-function composition",
    },
    "content": {
        "dynamodb:BatchGetItem": "not triaged since the per-function composition",
        "kms:DescribeKey": "not triaged since the per-function composition",
        "kms:Encrypt": "not triaged since the per-function composition",
    },
    "search": {
        "dynamodb:BatchGetItem": "not triaged since the per-function composition",
        "dynamodb:ConditionCheckItem": "not triaged since the per-function composition",
        "dynamodb:PutItem": "not triaged since the per-function composition",
        "kms:DescribeKey": "not triaged since the per-function composition",
    },
    "sessions": {
        "dynamodb:ConditionCheckItem": "not triaged since the per-function composition",
        "kms:DescribeKey": "not triaged since the per-function composition",
        "kms:Encrypt": "not triaged since the per-function composition",
        "scheduler:DeleteSchedule": "not triaged since the per-function composition",
    },
    "mcp": {
        "bedrock:InvokeModel": "not triaged since the per-function composition",
        "bedrock:Rerank": "not triaged since the per-function composition",
        "dynamodb:BatchGetItem": "not triaged since the per-function composition",
        "dynamodb:BatchWriteItem": "not triaged since the per-function composition",
        "dynamodb:ConditionCheckItem": "not triaged since the per-function composition",
        "dynamodb:DeleteItem": "not triaged since the per-function composition",
        "dynamodb:GetItem": "not triaged since the per-function composition",
        "dynamodb:PutItem": "not triaged since the per-function composition",
        "dynamodb:Query": "not triaged since the per-function composition",
        "dynamodb:UpdateItem": "not triaged since the per-function composition",
        "es:ESHttpPost": "not triaged since the per-function composition",
        "iam:PassRole": "not triaged since the per-function composition",
        "kms:DescribeKey": "not triaged since the per-function composition",
        "kms:Encrypt": "not triaged since the per-function composition",
        "s3:DeleteObject": "not triaged since the per-function composition",
        "s3:ListBucket": "not triaged since the per-function composition",
        "scheduler:CreateSchedule": "not triaged since the per-function composition",
        "scheduler:DeleteSchedule": "not triaged since the per-function composition",
        "scheduler:UpdateSchedule": "not triaged since the per-function composition",
        "sqs:SendMessage": "not triaged since the per-function composition",
    },
    "authorizer": {
        "dynamodb:Query": "not triaged since the per-function composition",
        "kms:DescribeKey": "not triaged since the per-function composition",
    },
    "semantic": {
        "dynamodb:BatchGetItem": "not triaged since the per-function composition",
        "dynamodb:BatchWriteItem": "not triaged since the per-function composition",
        "dynamodb:ConditionCheckItem": "not triaged since the per-function composition",
        "dynamodb:DeleteItem": "not triaged since the per-function composition",
        "dynamodb:Query": "not triaged since the per-function composition",
        "kms:DescribeKey": "not triaged since the per-function composition",
        "kms:Encrypt": "not triaged since the per-function composition",
        "s3:DeleteObject": "not triaged since the per-function composition",
        "sqs:SendMessage": "not triaged since the per-function composition",
    },
    "memory": {
        "dynamodb:BatchGetItem": "not triaged since the per-function composition",
        "dynamodb:BatchWriteItem": "not triaged since the per-function composition",
        "kms:DescribeKey": "not triaged since the per-function composition",
        "kms:Encrypt": "not triaged since the per-function composition",
        "s3:DeleteObject": "not triaged since the per-function composition",
        "sqs:SendMessage": "not triaged since the per-function composition",
    },
    "autocommit": {
        "dynamodb:BatchGetItem": "not triaged since the per-function composition",
        "dynamodb:BatchWriteItem": "not triaged since the per-function composition",
        "dynamodb:ConditionCheckItem": "not triaged since the per-function composition",
        "dynamodb:DeleteItem": "not triaged since the per-function composition",
        "kms:DescribeKey": "not triaged since the per-function composition",
        "kms:Encrypt": "not triaged since the per-function composition",
        "s3:DeleteObject": "not triaged since the per-function composition",
        "s3:ListBucket": "not triaged since the per-function composition",
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
