"""The edge around the REST API (docs/deploy.md, "The edge"): a private endpoint's resource
policy, a custom domain with a TLS 1.2 policy, an optional AWS WAF web ACL, and one usage plan
per plan tier (skald/domain/plans) that throttles each account by the key the authorizer
names (its `usageIdentifierKey`)."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_iam as iam
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_route53_targets as targets
from aws_cdk import aws_wafv2 as waf
from constructs import Construct

from infra.settings import DeploySettings, Edge
from skald.domain.plans import TIERS, edge_key_name, edge_key_value, edge_plan_name, edge_throttle

ROOT_ACCOUNT = "_root"  # the root key's account (skald.services.tenancy.accounts)
INVOKE = "execute-api:Invoke"
# Every method of every stage, in the shorthand API Gateway resource policies accept.
ANY_METHOD = "execute-api:/*"
SECURITY_POLICY = "TLS_1_2"


def private_policy(vpc_endpoint_ids: tuple[str, ...]) -> iam.PolicyDocument:
    """Invoke allowed through the listed interface endpoints only: an explicit deny for any
    other source wins over the allow (a private API without such a condition is open to every
    VPC endpoint of every account)."""
    return iam.PolicyDocument(
        statements=[
            iam.PolicyStatement(
                effect=iam.Effect.ALLOW,
                principals=[iam.AnyPrincipal()],
                actions=[INVOKE],
                resources=[ANY_METHOD],
                conditions={"StringEquals": {"aws:SourceVpce": list(vpc_endpoint_ids)}},
            ),
            iam.PolicyStatement(
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=[INVOKE],
                resources=[ANY_METHOD],
                conditions={"StringNotEquals": {"aws:SourceVpce": list(vpc_endpoint_ids)}},
            ),
        ]
    )


class UsagePlans(Construct):
    """One usage plan per tier on the API's stage, named `<stack>-<tier>` (the app finds them
    by name); a tier with a rate throttles at it, the others (unlimited) only by the stage.
    The root key's API Gateway key is made here, in the unlimited plan, so root can call the
    API as soon as it is deployed; every other account's key is the app's (EdgeKeys)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, namespace: str, api: apigw.RestApi
    ) -> None:
        super().__init__(scope, construct_id)
        self.namespace = namespace
        self.plans: dict[str, apigw.UsagePlan] = {}
        stage = apigw.UsagePlanPerApiStage(api=api, stage=api.deployment_stage)
        for tier, plan in TIERS.items():
            throttle = edge_throttle(plan)
            self.plans[tier] = apigw.UsagePlan(
                self,
                f"Plan-{tier}",
                name=edge_plan_name(namespace, tier),
                description=f"Skald accounts on the {tier} plan",
                throttle=apigw.ThrottleSettings(rate_limit=throttle[0], burst_limit=throttle[1])
                if throttle
                else None,
                api_stages=[stage],
            )
        root = apigw.CfnApiKey(
            self,
            "RootKey",
            name=edge_key_name(namespace, ROOT_ACCOUNT),
            # Not a credential: with the AUTHORIZER key source the gateway never takes it from
            # a client (skald/domain/plans/edge.py).
            value=edge_key_value(namespace, ROOT_ACCOUNT),
            enabled=True,
            description="Skald root key's usage plan key (unlimited plan)",
        )
        apigw.CfnUsagePlanKey(
            self,
            "RootKeyPlan",
            key_id=root.ref,
            key_type="API_KEY",
            usage_plan_id=self.plans["unlimited"].usage_plan_id,
        )


def custom_domain(scope: Construct, edge: Edge, api: apigw.RestApi) -> Construct:
    """The API under `edge.domain_name` with a TLS 1.2 security policy."""
    assert edge.domain_name and edge.certificate_arn
    if edge.private:
        return _private_domain(scope, edge, api)
    domain = apigw.DomainName(
        scope,
        "Domain",
        domain_name=edge.domain_name,
        certificate=acm.Certificate.from_certificate_arn(
            scope, "Certificate", edge.certificate_arn
        ),
        endpoint_type=apigw.EndpointType.REGIONAL,
        security_policy=apigw.SecurityPolicy.TLS_1_2,
        mapping=api,
    )
    if edge.hosted_zone_id and edge.hosted_zone_name:
        zone = route53.HostedZone.from_hosted_zone_attributes(
            scope,
            "Zone",
            hosted_zone_id=edge.hosted_zone_id,
            zone_name=edge.hosted_zone_name,
        )
        route53.ARecord(
            scope,
            "DomainAlias",
            zone=zone,
            record_name=edge.domain_name,
            target=route53.RecordTarget.from_alias(targets.ApiGatewayDomain(domain)),
        )
    return domain


def _private_domain(scope: Construct, edge: Edge, api: apigw.RestApi) -> Construct:
    """A private custom domain (AWS::ApiGateway::DomainNameV2): reachable through the listed
    VPC endpoints only (its own execute-api policy and one access association each), mapped
    to the private API, whose resource policy admits the same endpoints."""
    domain = apigw.CfnDomainNameV2(
        scope,
        "PrivateDomain",
        domain_name=edge.domain_name,
        certificate_arn=edge.certificate_arn,
        security_policy=SECURITY_POLICY,
        endpoint_configuration=apigw.CfnDomainNameV2.EndpointConfigurationProperty(
            types=["PRIVATE"]
        ),
        policy=private_policy(edge.vpc_endpoint_ids).to_json(),
    )
    apigw.CfnBasePathMappingV2(
        scope,
        "PrivateDomainMapping",
        domain_name_arn=domain.attr_domain_name_arn,
        rest_api_id=api.rest_api_id,
        stage=api.deployment_stage.stage_name,
    )
    for index, vpce in enumerate(edge.vpc_endpoint_ids):
        apigw.CfnDomainNameAccessAssociation(
            scope,
            f"PrivateDomainAccess{index}",
            access_association_source=vpce,
            access_association_source_type="VPCE",
            domain_name_arn=domain.attr_domain_name_arn,
        )
    return domain


# AWS managed rule groups on the web ACL, in priority order after the rate rule, and the rules
# of each that only count. Skald's request bodies are customer content stored as sent (files,
# documents, messages): the API never renders them as HTML, resolves them as paths or fetches
# them as URLs (URL imports go through its own network guard), so the groups' body rules would
# refuse legitimate writes (a Markdown page with an HTML sample, a note about "../" paths or
# about Log4Shell) and protect nothing. SizeRestrictions_BODY would refuse every body over
# 8 KB: every upload, every write of a larger file. Counted, they stay visible in the metrics.
_BODY_RULES_COUNTED = (
    "SizeRestrictions_BODY",
    "CrossSiteScripting_BODY",
    "GenericLFI_BODY",
    "GenericRFI_BODY",
    "EC2MetaDataSSRF_BODY",
)
MANAGED_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("AWSManagedRulesAmazonIpReputationList", ()),
    ("AWSManagedRulesCommonRuleSet", _BODY_RULES_COUNTED),
    ("AWSManagedRulesKnownBadInputsRuleSet", ("Log4JRCE_BODY", "JavaDeserializationRCE_BODY")),
)


def _visibility(name: str) -> waf.CfnWebACL.VisibilityConfigProperty:
    return waf.CfnWebACL.VisibilityConfigProperty(
        cloud_watch_metrics_enabled=True, metric_name=name, sampled_requests_enabled=True
    )


def web_acl(scope: Construct, settings: DeploySettings, api: apigw.RestApi) -> waf.CfnWebACL:
    """A regional web ACL on the API's stage: a per-IP rate rule, then the managed groups."""
    prefix = settings.resource_prefix
    rules = [
        waf.CfnWebACL.RuleProperty(
            name="RatePerIp",
            priority=0,
            action=waf.CfnWebACL.RuleActionProperty(block={}),
            statement=waf.CfnWebACL.StatementProperty(
                rate_based_statement=waf.CfnWebACL.RateBasedStatementProperty(
                    aggregate_key_type="IP", limit=settings.edge.waf_rate_limit
                )
            ),
            visibility_config=_visibility(f"{prefix}-rate-per-ip"),
        )
    ]
    for priority, (group, counted) in enumerate(MANAGED_GROUPS, start=1):
        rules.append(
            waf.CfnWebACL.RuleProperty(
                name=group,
                priority=priority,
                override_action=waf.CfnWebACL.OverrideActionProperty(none={}),
                statement=waf.CfnWebACL.StatementProperty(
                    managed_rule_group_statement=waf.CfnWebACL.ManagedRuleGroupStatementProperty(
                        vendor_name="AWS",
                        name=group,
                        rule_action_overrides=[
                            waf.CfnWebACL.RuleActionOverrideProperty(
                                name=rule,
                                action_to_use=waf.CfnWebACL.RuleActionProperty(count={}),
                            )
                            for rule in counted
                        ]
                        or None,
                    )
                ),
                visibility_config=_visibility(f"{prefix}-{group}"),
            )
        )
    acl = waf.CfnWebACL(
        scope,
        "WebAcl",
        scope="REGIONAL",
        default_action=waf.CfnWebACL.DefaultActionProperty(allow={}),
        visibility_config=_visibility(f"{prefix}-api"),
        rules=rules,
        description=f"Skald API, stack {Stack.of(scope).stack_name}",
    )
    waf.CfnWebACLAssociation(
        scope,
        "WebAclAssociation",
        resource_arn=api.deployment_stage.stage_arn,
        web_acl_arn=acl.attr_arn,
    )
    return acl
