"""Tenant roles in the synthesised templates: each data-plane function has its own, which only
that function's role may assume, with one session tag naming the account; its grants reach
the tagged account's objects and partitions only (ABAC), and the function's own role keeps
the control plane. With `-c tenantCredentials=false` there are none and the grants are the
catalogue's on the function's own role. (That the calls go with these credentials and that
other accounts are refused is the IAM contract's to prove: tests/contract/test_tenant_scope.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("aws_cdk", reason="infra extra not installed (pip install -e '.[infra]')")

from infra import access  # noqa: E402
from skald import catalog  # noqa: E402
from skald.adapters.aws.tenancy.rules import CONTROL_PLANE_PARTITIONS, TAG_KEY  # noqa: E402

if TYPE_CHECKING:
    from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra

TENANT = "${aws:PrincipalTag/skald_account}"
DATA_PLANE = {
    "content",
    "search",
    "sessions",
    "mcp",
    "semantic",
    "memory",
    "autocommit",
    "fetch",
    "purge",
}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _statements(synth: Synth, role_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            out += _list(policy["Properties"]["PolicyDocument"]["Statement"])
    return out


def _id(synth: Synth, construct: Any) -> str:
    return synth.logical_id(construct)


def _getatt(synth: Synth, construct: Any) -> dict[str, Any]:
    return {"Fn::GetAtt": [_id(synth, construct), "Arn"]}


def test_each_data_plane_function_has_its_own_tenant_role(any_mode: Synth) -> None:
    functions = any_mode.stack.functions
    assert (
        set(functions.tenant_roles)
        == DATA_PLANE
        == {fn.name for fn in catalog.FUNCTIONS if catalog.tenant_scoped(fn)}
    )
    roles = any_mode.resources("AWS::IAM::Role")
    variables = {
        name: any_mode.resources("AWS::Lambda::Function")[_id(any_mode, fn)]["Properties"][
            "Environment"
        ]["Variables"]
        for name, fn in functions.by_name.items()
    }
    for name, tenant in functions.tenant_roles.items():
        props = roles[_id(any_mode, tenant)]["Properties"]
        assert props["MaxSessionDuration"] == 3600  # role chaining: one hour at most
        [trust] = props["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"AWS": _getatt(any_mode, functions.by_name[name].role)}
        assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
        assert trust["Condition"] == {
            "StringLike": {f"aws:RequestTag/{TAG_KEY}": "?*"},
            "ForAllValues:StringEquals": {"aws:TagKeys": [TAG_KEY]},
        }
        assert variables[name][catalog.TENANT_ROLE_ENV] == _getatt(any_mode, tenant)
        # The function's own role may assume it, and no other tenant role.
        assumes = [
            s
            for s in _statements(any_mode, _id(any_mode, functions.by_name[name].role))
            if any(a.startswith("sts:") for a in _list(s["Action"]))
        ]
        assert assumes == [
            {
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                "Effect": "Allow",
                "Resource": _getatt(any_mode, tenant),
            }
        ]
    for name in set(functions.by_name) - DATA_PLANE:
        assert catalog.TENANT_ROLE_ENV not in variables[name], name


def test_a_tenant_roles_grants_reach_the_tagged_account_only(any_mode: Synth) -> None:
    storage = any_mode.stack.storage
    bucket, table = _getatt(any_mode, storage.bucket), _getatt(any_mode, storage.state_table)
    objects = {"Fn::Join": ["", [bucket, f"/{TENANT}/*"]]}
    partitions = [
        f"ACCT#{TENANT}",
        f"ACCT#{TENANT}#*",
        f"SESS#{TENANT}#*",
        f"AUDIT#{TENANT}#*",
        *CONTROL_PLANE_PARTITIONS,
    ]
    for name, tenant in any_mode.stack.functions.tenant_roles.items():
        spec = catalog.function(name)
        statements = _statements(any_mode, _id(any_mode, tenant))
        seen = set()
        for statement in statements:
            resource, condition = statement["Resource"], statement.get("Condition", {})
            actions = _list(statement["Action"])
            if resource == bucket:
                blobs = access.blobs(spec)
                assert blobs is not None and set(actions) == set(blobs.bucket)
                assert condition == {"StringLike": {"s3:prefix": f"{TENANT}/*"}}
            elif resource == objects:
                blobs = access.blobs(spec)
                assert blobs is not None and set(actions) == set(blobs.objects)
                assert not condition
            elif resource == table:
                scoped = access.scoped_table(spec)
                assert scoped is not None and set(actions) == set(scoped.actions)
                assert condition == {
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": partitions},
                    "Null": {"dynamodb:LeadingKeys": "false"},
                }
            else:  # the data key, through S3 or DynamoDB only
                assert all(a.startswith("kms:") for a in actions), statement
                assert "kms:ViaService" in json.dumps(condition)
            seen.add(json.dumps(resource, sort_keys=True))
        assert json.dumps(objects, sort_keys=True) in seen, name
        assert (json.dumps(table, sort_keys=True) in seen) is (
            access.scoped_table(spec) is not None
        ), name


def test_own_roles_keep_the_control_plane(any_mode: Synth) -> None:
    """A data-plane function's own role reaches no account's objects (system objects under
    their prefixes only) and the table's control-plane partitions only, except what root's
    admin routes do on the content function's (catalogue: `unscoped`)."""
    storage = any_mode.stack.storage
    bucket, table = _getatt(any_mode, storage.bucket), _getatt(any_mode, storage.state_table)
    every_object = {"Fn::Join": ["", [bucket, "/*"]]}
    for name in DATA_PLANE:
        spec = catalog.function(name)
        role = _id(any_mode, any_mode.stack.functions.by_name[name].role)
        for statement in _statements(any_mode, role):
            resource, condition = statement["Resource"], statement.get("Condition", {})
            if resource in (bucket, every_object) or resource == table:
                if not condition:
                    assert spec.unscoped, (name, statement)
                    continue
                if resource == bucket:
                    prefix = condition["StringLike"]["s3:prefix"]
                    assert prefix.startswith("_") and prefix.endswith("/*"), statement
                else:
                    assert resource == table, statement
                    assert condition["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] == list(
                        CONTROL_PLANE_PARTITIONS
                    ), statement
            elif (
                isinstance(resource, dict)
                and "Fn::Join" in resource
                and resource["Fn::Join"][1][0] == bucket
            ):
                assert resource["Fn::Join"][1][1].startswith("/_"), statement  # system objects


def test_without_tenant_credentials_the_own_roles_hold_the_catalogues_grants(
    synth: Callable[[str], Synth],
) -> None:
    plain = synth("dev_without_tenant_credentials")
    assert plain.stack.functions.tenant_roles == {}
    assert not [lid for lid in plain.resources("AWS::IAM::Role") if "TenantRole" in lid]
    table = _getatt(plain, plain.stack.storage.state_table)
    for spec in catalog.FUNCTIONS:
        fn = plain.stack.functions.by_name[spec.name]
        variables = plain.resources("AWS::Lambda::Function")[_id(plain, fn)]["Properties"][
            "Environment"
        ]["Variables"]
        assert catalog.TENANT_ROLE_ENV not in variables
        granted = {
            a
            for s in _statements(plain, _id(plain, fn.role))
            if s["Resource"] == table
            for a in _list(s["Action"])
        }
        expected = access.state_table(spec)
        assert granted == (set(expected.actions) if expected else set()), spec.name


def test_an_isolated_vpc_reaches_sts_through_an_endpoint(saas: Synth) -> None:
    """Functions in the stack's isolated subnets assume their tenant roles through an STS
    interface endpoint (private DNS: the SDK's regional STS endpoint resolves to it)."""
    endpoints = [e["Properties"] for e in saas.resources("AWS::EC2::VPCEndpoint").values()]
    [sts] = [e for e in endpoints if ".sts" in json.dumps(e["ServiceName"])]
    assert sts["PrivateDnsEnabled"] is True and sts["VpcEndpointType"] == "Interface"
