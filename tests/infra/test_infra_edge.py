"""The edge (docs/deploy.md, "The edge"): usage plans per tier keyed by the authorizer's
account key, a private endpoint with its resource policy, custom domains with a TLS 1.2
policy, the WAF web ACL and the authorizer's reserved concurrency."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("aws_cdk", reason="infra extra not installed (pip install -e '.[infra]')")
pytest.importorskip("cdk_nag", reason="infra extra not installed (pip install -e '.[infra]')")
from aws_cdk import App  # noqa: E402
from aws_cdk.assertions import Annotations, Match  # noqa: E402

from infra.settings import DeploySettings, SettingsError  # noqa: E402
from skald import catalog  # noqa: E402
from skald.domain.plans import TIERS, edge_key_name, edge_key_value, edge_plan_name  # noqa: E402
from tests.infra.conftest import CERTIFICATE, VPC_ENDPOINTS  # noqa: E402

if TYPE_CHECKING:
    from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra
SynthOf = Callable[[str], "Synth"]


def _one(synth: Synth, cfn_type: str) -> dict[str, Any]:
    [resource] = synth.resources(cfn_type).values()
    return dict(resource["Properties"])


def _rest_api(synth: Synth) -> dict[str, Any]:
    return _one(synth, "AWS::ApiGateway::RestApi")


def _fn(synth: Synth, name: str) -> dict[str, Any]:
    logical_id = synth.logical_id(synth.stack.functions.by_name[name])
    return dict(synth.resources("AWS::Lambda::Function")[logical_id]["Properties"])


# -- usage plans keyed by account ------------------------------------------------------------


def test_one_usage_plan_per_tier_throttled_at_its_rate(dev: Synth) -> None:
    plans = {
        p["Properties"]["UsagePlanName"]: p["Properties"]
        for p in dev.resources("AWS::ApiGateway::UsagePlan").values()
    }
    assert set(plans) == {edge_plan_name("SkaldDev", tier) for tier in TIERS}
    for tier, plan in TIERS.items():
        props = plans[edge_plan_name("SkaldDev", tier)]
        [stage] = props["ApiStages"]
        assert "Ref" in stage["Stage"]  # the API's stage
        if plan.rate_per_s is None:
            assert "Throttle" not in props  # unlimited: the stage's throttle only
        else:
            assert props["Throttle"] == {"RateLimit": plan.rate_per_s, "BurstLimit": plan.burst}
    assert plans["SkaldDev-free"]["Throttle"] == {"RateLimit": 5, "BurstLimit": 20}


def test_the_key_comes_from_the_authorizer_and_every_authorized_method_needs_one(
    dev: Synth,
) -> None:
    assert _rest_api(dev)["ApiKeySourceType"] == "AUTHORIZER"
    methods = dev.resources("AWS::ApiGateway::Method")
    authorized = [m["Properties"] for m in methods.values() if m["Properties"].get("AuthorizerId")]
    public = [
        m["Properties"]
        for m in methods.values()
        if m["Properties"]["AuthorizationType"] == "NONE" and m["Properties"]["HttpMethod"] == "GET"
    ]
    assert authorized and all(m["ApiKeyRequired"] is True for m in authorized)
    # the probes and the console's files have no account, so no key
    assert len(public) == len(catalog.function("content").public_paths)
    assert all(not m.get("ApiKeyRequired") for m in public)


def test_throttled_callers_get_429_with_retry_after_in_the_envelope(dev: Synth) -> None:
    responses = {
        r["Properties"]["ResponseType"]: r["Properties"]
        for r in dev.resources("AWS::ApiGateway::GatewayResponse").values()
    }
    for kind in ("THROTTLED", "QUOTA_EXCEEDED"):
        assert responses[kind]["StatusCode"] == "429"
        assert responses[kind]["ResponseParameters"] == {
            "gatewayresponse.header.Retry-After": "'1'"
        }
    invalid = responses["INVALID_API_KEY"]
    assert invalid["StatusCode"] == "403"
    body = json.loads(invalid["ResponseTemplates"]["application/json"])
    assert body["error"]["code"] == "PERMISSION_DENIED"


def test_the_root_key_is_in_the_unlimited_plan_from_the_first_deploy(dev: Synth) -> None:
    key = _one(dev, "AWS::ApiGateway::ApiKey")
    assert key["Name"] == edge_key_name("SkaldDev", "_root")
    assert key["Value"] == edge_key_value("SkaldDev", "_root")  # what the authorizer names
    assert key["Enabled"] is True
    link = _one(dev, "AWS::ApiGateway::UsagePlanKey")
    unlimited = next(
        logical_id
        for logical_id, plan in dev.resources("AWS::ApiGateway::UsagePlan").items()
        if plan["Properties"]["UsagePlanName"] == "SkaldDev-unlimited"
    )
    assert link["UsagePlanId"] == {"Ref": unlimited}
    assert link["KeyType"] == "API_KEY"


def test_the_functions_know_the_edge_namespace(dev: Synth) -> None:
    for name in ("authorizer", "content", "purge"):
        env = _fn(dev, name)["Environment"]["Variables"]
        assert env[catalog.EDGE_NAMESPACE_ENV] == "SkaldDev", name
    assert catalog.EDGE_NAMESPACE_ENV not in _fn(dev, "search")["Environment"]["Variables"]


def _apigateway_grants(synth: Synth, name: str) -> set[tuple[str, str]]:
    role = synth.logical_id(synth.stack.functions.by_name[name].role)
    out: set[tuple[str, str]] = set()
    for policy in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            for action in actions if isinstance(actions, list) else [actions]:
                if not action.startswith("apigateway:"):
                    continue
                resources = statement["Resource"]
                for resource in resources if isinstance(resources, list) else [resources]:
                    # arn:<partition>:apigateway:<region>::<path>, joined by CloudFormation
                    tail = resource["Fn::Join"][1][-1]
                    out.add((action, tail.split("::", 1)[1]))
    return out


def test_only_the_functions_that_manage_keys_reach_api_gateway(dev: Synth) -> None:
    content = _apigateway_grants(dev, "content")
    assert ("apigateway:POST", "/apikeys") in content
    assert ("apigateway:POST", "/usageplans/*/keys") in content
    assert ("apigateway:DELETE", "/usageplans/*/keys/*") in content
    assert not any(path == "/apikeys/*" for _, path in content)  # creating never deletes keys
    purge = _apigateway_grants(dev, "purge")
    assert ("apigateway:DELETE", "/apikeys/*") in purge
    assert not any(action == "apigateway:POST" for action, _ in purge)
    for spec in catalog.FUNCTIONS:
        if catalog.EDGE not in spec.uses:
            assert _apigateway_grants(dev, spec.name) == set(), spec.name


# -- reserved concurrency --------------------------------------------------------------------


def test_the_authorizer_has_reserved_concurrency_and_nothing_else_does(
    dev: Synth, synth: SynthOf
) -> None:
    assert _fn(dev, "authorizer")["ReservedConcurrentExecutions"] == 50
    for spec in catalog.FUNCTIONS:
        if spec.kind != "authorizer":
            assert "ReservedConcurrentExecutions" not in _fn(dev, spec.name), spec.name
    assert _fn(synth("saas_domain_waf"), "authorizer")["ReservedConcurrentExecutions"] == 80
    off = synth("dev_no_reserved_concurrency")
    assert "ReservedConcurrentExecutions" not in _fn(off, "authorizer")


# -- endpoint, domain, WAF -------------------------------------------------------------------


def test_the_default_edge_is_a_public_regional_api(any_mode: Synth) -> None:
    api = _rest_api(any_mode)
    assert api["EndpointConfiguration"] == {"Types": ["REGIONAL"]}
    assert "Policy" not in api and "DisableExecuteApiEndpoint" not in api
    for cfn_type in (
        "AWS::WAFv2::WebACL",
        "AWS::ApiGateway::DomainName",
        "AWS::ApiGateway::DomainNameV2",
    ):
        assert any_mode.resources(cfn_type) == {}


def test_a_private_api_admits_its_vpc_endpoints_only(synth: SynthOf) -> None:
    private = synth("customer_private")
    api = _rest_api(private)
    assert api["EndpointConfiguration"] == {
        "Types": ["PRIVATE"],
        "VpcEndpointIds": list(VPC_ENDPOINTS),
    }
    allow, deny = api["Policy"]["Statement"]
    assert allow["Effect"] == "Allow" and allow["Action"] == "execute-api:Invoke"
    assert allow["Condition"] == {"StringEquals": {"aws:SourceVpce": list(VPC_ENDPOINTS)}}
    assert deny["Effect"] == "Deny" and deny["Action"] == "execute-api:Invoke"
    assert deny["Condition"] == {"StringNotEquals": {"aws:SourceVpce": list(VPC_ENDPOINTS)}}
    assert allow["Resource"] == deny["Resource"] == "execute-api:/*"
    assert deny["Principal"] == {"AWS": "*"}


def test_a_private_custom_domain_is_a_domain_name_v2_with_tls_1_2(synth: SynthOf) -> None:
    private = synth("customer_private")
    domain = _one(private, "AWS::ApiGateway::DomainNameV2")
    assert domain["DomainName"] == "skald.corp.internal"
    assert domain["CertificateArn"] == CERTIFICATE
    assert domain["SecurityPolicy"] == "TLS_1_2"
    assert domain["EndpointConfiguration"] == {"Types": ["PRIVATE"]}
    _, deny = domain["Policy"]["Statement"]
    assert deny["Condition"] == {"StringNotEquals": {"aws:SourceVpce": list(VPC_ENDPOINTS)}}
    mapping = _one(private, "AWS::ApiGateway::BasePathMappingV2")
    assert mapping["RestApiId"] == {"Ref": private.logical_id(private.stack.api.rest_api)}
    associations = private.resources("AWS::ApiGateway::DomainNameAccessAssociation").values()
    assert sorted(a["Properties"]["AccessAssociationSource"] for a in associations) == list(
        VPC_ENDPOINTS
    )
    assert private.resources("AWS::ApiGateway::DomainName") == {}


def test_a_public_custom_domain_has_tls_1_2_a_mapping_and_an_alias(synth: SynthOf) -> None:
    saas = synth("saas_domain_waf")
    domain = _one(saas, "AWS::ApiGateway::DomainName")
    assert domain["DomainName"] == "api.example.com"
    assert domain["SecurityPolicy"] == "TLS_1_2"
    assert domain["RegionalCertificateArn"] == CERTIFICATE
    assert domain["EndpointConfiguration"] == {"Types": ["REGIONAL"]}
    mapping = _one(saas, "AWS::ApiGateway::BasePathMapping")
    assert mapping["RestApiId"] == {"Ref": saas.logical_id(saas.stack.api.rest_api)}
    record = _one(saas, "AWS::Route53::RecordSet")
    assert record["Type"] == "A" and record["HostedZoneId"] == "Z0123456789ABCDEFGHIJ"
    assert record["Name"] == "api.example.com."
    assert "AliasTarget" in record
    assert _rest_api(saas)["DisableExecuteApiEndpoint"] is True


def _rules(synth: Synth) -> dict[str, dict[str, Any]]:
    return {r["Name"]: r for r in _one(synth, "AWS::WAFv2::WebACL")["Rules"]}


def test_waf_rate_limits_per_ip_then_runs_the_managed_groups(synth: SynthOf) -> None:
    saas = synth("saas_domain_waf")
    acl = _one(saas, "AWS::WAFv2::WebACL")
    assert acl["Scope"] == "REGIONAL" and acl["DefaultAction"] == {"Allow": {}}
    assert acl["VisibilityConfig"]["CloudWatchMetricsEnabled"] is True
    rules = _rules(saas)
    rate = rules["RatePerIp"]
    assert rate["Priority"] == 0 and rate["Action"] == {"Block": {}}
    assert rate["Statement"]["RateBasedStatement"] == {"AggregateKeyType": "IP", "Limit": 500}
    groups = {
        name: r["Statement"]["ManagedRuleGroupStatement"]
        for name, r in rules.items()
        if "ManagedRuleGroupStatement" in r["Statement"]
    }
    assert set(groups) == {
        "AWSManagedRulesCommonRuleSet",
        "AWSManagedRulesKnownBadInputsRuleSet",
        "AWSManagedRulesAmazonIpReputationList",
    }
    assert all(g["VendorName"] == "AWS" for g in groups.values())
    assert all(r["VisibilityConfig"]["CloudWatchMetricsEnabled"] for r in rules.values())
    # uploads and writes are larger than 8 KB: the body size rule only counts
    counted = {
        o["Name"]: o["ActionToUse"]
        for o in groups["AWSManagedRulesCommonRuleSet"]["RuleActionOverrides"]
    }
    assert counted["SizeRestrictions_BODY"] == {"Count": {}}
    association = _one(saas, "AWS::WAFv2::WebACLAssociation")
    acl_id = next(iter(saas.resources("AWS::WAFv2::WebACL")))
    assert association["WebACLArn"] == {"Fn::GetAtt": [acl_id, "Arn"]}
    assert "stages/" in json.dumps(association["ResourceArn"])


def test_waf_defaults_to_2000_requests_per_ip(synth: SynthOf) -> None:
    rate = _rules(synth("customer_private"))["RatePerIp"]
    assert rate["Statement"]["RateBasedStatement"]["Limit"] == 2000


@pytest.mark.parametrize("mode", ["customer_private", "saas_domain_waf"])
def test_nag_reports_no_unsuppressed_errors_on_the_edge_options(synth: SynthOf, mode: str) -> None:
    errors = Annotations.from_stack(synth(mode).stack).find_error(
        "*", Match.string_like_regexp("AwsSolutions-.*")
    )
    assert [f"{e.id}: {str(e.entry.data)[:120]}" for e in errors] == []


# -- context mistakes ------------------------------------------------------------------------


def settings(**context: Any) -> DeploySettings:
    return DeploySettings.from_context(App(context=context).node)


VPCE = VPC_ENDPOINTS[0]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"apiEndpoint": "private"}, "needs -c apiVpcEndpointIds"),
        ({"apiVpcEndpointIds": VPCE}, "add -c apiEndpoint=private"),
        ({"apiEndpoint": "private", "apiVpcEndpointIds": "vpce-nope"}, "malformed"),
        ({"apiEndpoint": "public"}, "expected one of regional, private"),
        ({"domainName": "api.example.com"}, "needs both"),
        ({"certificateArn": CERTIFICATE}, "needs both"),
        ({"domainName": "not a host", "certificateArn": CERTIFICATE}, "not a host name"),
        ({"domainName": "api.example.com", "certificateArn": "arn:nope"}, "ACM certificate"),
        ({"hostedZoneId": "Z123", "hostedZoneName": "example.com"}, "set it"),
        (
            {
                "domainName": "api.example.com",
                "certificateArn": CERTIFICATE,
                "hostedZoneId": "Z0123456789",
            },
            "needs both -c hostedZoneId= and -c hostedZoneName=",
        ),
        (
            {
                "apiEndpoint": "private",
                "apiVpcEndpointIds": VPCE,
                "domainName": "api.example.com",
                "certificateArn": CERTIFICATE,
                "hostedZoneId": "Z0123456789",
                "hostedZoneName": "example.com",
            },
            "private hosted zone",
        ),
        ({"disableExecuteApiEndpoint": "true"}, "leaves no way in"),
        ({"waf": "true", "wafRateLimit": "5"}, "out of range"),
        ({"authorizerReservedConcurrency": "-1"}, "out of range"),
    ],
)
def test_invalid_edge_combinations_fail_synth_clearly(
    context: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        settings(**context)


def test_edge_settings_are_read_from_the_context() -> None:
    edge = settings(
        apiEndpoint="private",
        apiVpcEndpointIds=f" {VPCE} , {VPC_ENDPOINTS[1]} ",
        domainName="API.Example.com",
        certificateArn=CERTIFICATE,
        disableExecuteApiEndpoint="true",
        waf=True,
    ).edge
    assert edge.private and edge.vpc_endpoint_ids == VPC_ENDPOINTS
    assert edge.domain_name == "api.example.com"
    assert edge.disable_execute_api_endpoint and edge.waf and edge.waf_rate_limit == 2000
    assert settings().edge.endpoint == "regional" and not settings().edge.waf
