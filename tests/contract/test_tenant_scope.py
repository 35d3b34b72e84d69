"""Tenant-scoped credentials, proved on the recorded drive and the synthesised policies.

- The drive's data-plane calls went out with the credentials of the account they were for
  (the recorder notes the AssumeRole session each call was signed with); only root's admin
  routes, which act outside any account's scope, reached account data with a function's own
  role, and only control-plane items (tasks, claims, counters, system objects) went with the
  own role inside an account's scope.
- Each recorded tenant call, judged again with the credentials of another account (session
  tag `acm`, `acme2`, `other`, ...) or with its keys moved to another account (`acme2`, the
  escaped `acme#x`), is refused: S3 objects and listings, and every state-table item request
  naming an account's partition. Judged as recorded, each is allowed (test_iam_contract).
- Only the function's own role may assume its tenant role, with exactly one session tag.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from skald.adapters.aws.tenancy.rules import (
    TAG_KEY,
    control_plane_call,
    is_control_plane_blob,
    is_control_plane_partition,
    partitions_named,
)
from tests.contract import seams
from tests.contract.conftest import Recording
from tests.contract.iam_actions import AuthRequest, Deployment, requests_for
from tests.contract.iam_contract import role_for, roles, tenant_roles
from tests.contract.iam_eval import Evaluator
from tests.contract.recorder import AwsCall
from tests.contract.scenario import ACCOUNT

pytestmark = pytest.mark.contract

STATE_TABLE = "dynamodb"
# Accounts whose credentials must not reach `acme`'s items: a prefix of it, an extension, a
# stranger.
OTHER_ACCOUNTS = ("acm", "acme2", "acme.x", "other")
# `acme`'s items moved to another account: `acme2`, and `acme#x` as the keys escape it.
MOVED = ("acme2", "acme%23x")


@pytest.fixture(scope="module")
def evaluator(recording: Recording) -> Evaluator:
    return Evaluator(recording.template)


def _state_call(call: AwsCall) -> bool:
    """An S3 call, or a state-table call (not the idempotency table's)."""
    if call.service == "s3":
        return True
    if call.service != STATE_TABLE:
        return False
    return (
        any(pk for pk in partitions_named(call.operation, call.params))
        or bool(call.params.get("IndexName"))
        or call.operation == "DescribeTable"
    )


def _account_items(call: AwsCall) -> set[str]:
    """The accounts whose items a call names (empty: control plane only)."""
    if call.service == "s3":
        keys = [str(call.params.get(k)) for k in ("Key", "Prefix") if call.params.get(k)]
        return {k.split("/", 1)[0] for k in keys if not is_control_plane_blob(k)}
    if call.params.get("IndexName"):
        return set()
    out = set()
    for pk in partitions_named(call.operation, call.params):
        if pk and not is_control_plane_partition(pk):
            out.add(pk.split("#")[1])
    return out


def _data_plane(recording: Recording) -> set[str]:
    return set(tenant_roles(recording.template, recording.function_ids))


def test_every_data_plane_function_has_a_tenant_role(recording: Recording) -> None:
    from skald import catalog

    assert _data_plane(recording) == {
        fn.name for fn in catalog.FUNCTIONS if catalog.tenant_scoped(fn)
    }
    assert _data_plane(recording) == set(seams.FUNCTIONS) - {seams.SETUP, seams.AUTHORIZER}


def test_data_plane_calls_went_with_the_accounts_credentials(recording: Recording) -> None:
    data_plane = _data_plane(recording)
    scoped_by = {c.function for c in recording.calls if c.session is not None}
    assert scoped_by == data_plane
    own_data: list[str] = []
    for call in recording.calls:
        if call.function not in data_plane or not _state_call(call):
            continue
        accounts = _account_items(call)
        if call.session is not None:
            # A tenant's credentials named its own account's items (or the control plane's,
            # in the same transaction), never another's.
            assert accounts <= {call.session.tag(TAG_KEY)}, call.describe()
        elif accounts:
            own_data.append(f"{call.function} {call.phase}: {call.describe()}")
        else:  # the own role named control-plane items only
            assert (
                control_plane_call(call.service, call.operation, call.params)
                or call.operation == "DescribeTable"
            ), call.describe()
    # Account data with a function's own role: root's admin routes only (outside any
    # account's scope: accounts, users, usage, an account's deletion).
    assert own_data, "root's admin routes reach account data with the content role"
    assert all(line.startswith("content ") and "/api/v1/admin/" in line for line in own_data), (
        own_data
    )


def _scoped_requests(recording: Recording) -> Iterator[tuple[AwsCall, AuthRequest]]:
    deployment = Deployment(recording.template)
    for call in recording.calls:
        if call.session is None or call.service not in ("s3", STATE_TABLE):
            continue
        assert call.session.tag(TAG_KEY) == ACCOUNT or call.session.tag(TAG_KEY) == "doomed"
        for request in requests_for(call, deployment):
            if request.action.startswith("kms:"):
                continue  # S3 and DynamoDB ask KMS on the caller's behalf: not account-keyed
            yield call, request


def _names_account(request: AuthRequest, account: str) -> bool:
    """Whether the request is about `account`'s items (not only control-plane ones)."""
    if request.action.startswith("s3:"):
        where = (
            str(request.context.get("s3:prefix", ""))
            if request.action == "s3:ListBucket"
            else request.resource.split(":::", 1)[1].split("/", 1)[-1]
        )
        return where.startswith(f"{account}/")
    keys = request.context.get("dynamodb:LeadingKeys", ())
    return any(not is_control_plane_partition(k) for k in keys)


def _accounts(request: AuthRequest) -> set[str]:
    """The accounts whose items the request names."""
    if request.action.startswith("s3:"):
        where = (
            str(request.context.get("s3:prefix", ""))
            if request.action == "s3:ListBucket"
            else request.resource.split(":::", 1)[1].split("/", 1)[-1]
        )
        return {where.split("/", 1)[0]}
    return {
        k.split("#")[1]
        for k in request.context.get("dynamodb:LeadingKeys", ())
        if not is_control_plane_partition(k)
    }


def _moved(request: AuthRequest, account: str, other: str) -> AuthRequest:
    """The request with `account`'s keys made `other`'s."""
    pattern = re.compile(rf"(?<=[#/]){re.escape(account)}(?=[#/]|$)|^{re.escape(account)}(?=/)")

    def move(value: object) -> object:
        if isinstance(value, str):
            return pattern.sub(other, value)
        if isinstance(value, tuple):
            return tuple(move(v) for v in value)
        return value

    return AuthRequest(
        request.action,
        str(move(request.resource)),
        {k: move(v) for k, v in request.context.items()},
        request.implied_by,
    )


def test_another_accounts_credentials_are_refused(
    recording: Recording, evaluator: Evaluator
) -> None:
    role_of = roles(recording.template, recording.function_ids, recording.principals)
    checked = {"s3": 0, STATE_TABLE: 0}
    for call, request in _scoped_requests(recording):
        account = call.session.tag(TAG_KEY) if call.session else None
        if account != ACCOUNT or not _names_account(request, ACCOUNT):
            continue
        role = role_for(recording.template, call, role_of)
        assert evaluator.decide(role, request, {TAG_KEY: ACCOUNT}).allowed, call.describe()
        for other in OTHER_ACCOUNTS:
            decision = evaluator.decide(role, request, {TAG_KEY: other})
            assert not decision.allowed, (other, call.describe(), request)
        checked[call.service] += 1
    assert checked["s3"] > 100 and checked[STATE_TABLE] > 50, checked


def test_a_tenants_credentials_are_refused_another_accounts_items(
    recording: Recording, evaluator: Evaluator
) -> None:
    role_of = roles(recording.template, recording.function_ids, recording.principals)
    checked = set()
    for call, request in _scoped_requests(recording):
        if (
            call.session is None
            or call.session.tag(TAG_KEY) != ACCOUNT
            or not _names_account(request, ACCOUNT)
        ):
            continue
        role = role_for(recording.template, call, role_of)
        for other in MOVED:
            crossed = _moved(request, ACCOUNT, other)
            assert _accounts(crossed) == {other}, (request, crossed)
            assert not evaluator.decide(role, crossed, {TAG_KEY: ACCOUNT}).allowed, (
                call.describe(),
                crossed,
            )
        checked.add((call.function, request.action))
    # Every data action of every data-plane function the drive used was crossed.
    assert {f for f, _ in checked} == _data_plane(recording)
    assert {
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:ListBucket",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:Query",
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:DeleteItem",
    } <= {a for _, a in checked}


def test_a_listing_of_the_whole_bucket_is_refused(
    recording: Recording, evaluator: Evaluator
) -> None:
    role_of = roles(recording.template, recording.function_ids, recording.principals)
    tenant = tenant_roles(recording.template, recording.function_ids)
    bucket = next(c.params["Bucket"] for c in recording.calls if c.service == "s3")
    for function, role in tenant.items():
        # No own role lists every account's objects (root's routes naming no account write
        # none; the others run in an account's scope).
        assert not evaluator.decide(
            role_of[function], AuthRequest("s3:ListBucket", f"arn:aws:s3:::{bucket}"), None
        ).allowed, function
        for prefix in (None, "", "acm", "acme", "acme2/", "_jobs/"):
            context = {} if prefix is None else {"s3:prefix": prefix}
            request = AuthRequest("s3:ListBucket", f"arn:aws:s3:::{bucket}", context)
            assert not evaluator.decide(role, request, {TAG_KEY: ACCOUNT}).allowed, (
                function,
                prefix,
            )
        assert evaluator.decide(
            role,
            AuthRequest("s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": "acme/x"}),
            {TAG_KEY: ACCOUNT},
        ).allowed


def test_an_item_request_naming_no_partition_is_refused(
    recording: Recording, evaluator: Evaluator
) -> None:
    """ForAllValues holds over an empty set: the Null check beside it refuses a request
    without partition keys (a Scan) to the tenant roles and the own roles alike."""
    table = next(
        c.params["TableName"]
        for c in recording.calls
        if c.service == STATE_TABLE and c.session is not None
    )
    arn = f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}"
    role_of = roles(recording.template, recording.function_ids, recording.principals)
    for function, role in tenant_roles(recording.template, recording.function_ids).items():
        for action in ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan"):
            request = AuthRequest(action, arn, {"aws:SecureTransport": "true"})
            assert not evaluator.decide(role, request, {TAG_KEY: ACCOUNT}).allowed
            if function != "content":  # root's admin routes sweep any account
                assert not evaluator.decide(role_of[function], request).allowed, function


def test_only_its_function_assumes_a_tenant_role_with_one_tag(
    recording: Recording, evaluator: Evaluator
) -> None:
    role_of = roles(recording.template, recording.function_ids, recording.principals)
    tenant = tenant_roles(recording.template, recording.function_ids)
    assumed = [c for c in recording.calls if c.service == "sts"]
    assert {c.function for c in assumed} == set(tenant)
    assert all(
        c.params["Tags"] == [{"Key": TAG_KEY, "Value": ACCOUNT}]
        or c.params["Tags"] == [{"Key": TAG_KEY, "Value": "doomed"}]
        for c in assumed
    )

    def assume(as_role: str, target: str, tags: dict[str, str]) -> bool:
        arn = str(recording.template.attribute(target, "Arn"))
        context = {
            "aws:SecureTransport": "true",
            **{f"aws:RequestTag/{k}": v for k, v in tags.items()},
            "aws:TagKeys": tuple(tags),
        }
        return all(
            evaluator.decide(as_role, AuthRequest(a, arn, context)).allowed
            for a in ("sts:AssumeRole", "sts:TagSession")
        )

    for function, role in tenant.items():
        assert assume(role_of[function], role, {TAG_KEY: ACCOUNT})
        assert not assume(role_of[function], role, {})
        assert not assume(role_of[function], role, {TAG_KEY: ""})
        assert not assume(role_of[function], role, {TAG_KEY: ACCOUNT, "extra": "x"})
        for other, other_role in role_of.items():
            if other != function:
                assert not assume(other_role, role, {TAG_KEY: ACCOUNT}), (other, function)


def test_the_check_fails_on_a_policy_not_scoped_by_the_tag(recording: Recording) -> None:
    """The same checks against tenant policies whose account pattern is a wildcard: other
    accounts' credentials are then allowed, which the checks above would report."""
    import json

    broken = recording.template.copy()
    tenant = set(tenant_roles(broken, recording.function_ids).values())
    for _, policy in broken.of_type("AWS::IAM::Policy"):
        if any(r.get("Ref") in tenant for r in policy["Properties"].get("Roles", [])):
            text = json.dumps(policy["Properties"]["PolicyDocument"])
            policy["Properties"]["PolicyDocument"] = json.loads(
                text.replace("${aws:PrincipalTag/" + TAG_KEY + "}", "*")
            )
    evaluator = Evaluator(broken)
    role_of = roles(broken, recording.function_ids, recording.principals)
    crossed = [
        evaluator.decide(role_for(broken, call, role_of), request, {TAG_KEY: "other"})
        for call, request in _scoped_requests(recording)
        if _names_account(request, ACCOUNT)
    ]
    assert crossed and all(d.allowed for d in crossed)
