"""Deploy settings read from CDK context (`-c key=value` or cdk.json).

Context values given on the command line always arrive as strings, values from cdk.json or
from tests may be typed: every reader below accepts both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from constructs import Node

Mode = Literal["dev", "saas", "customer"]
VpcKind = Literal["none", "new", "imported"]
SearchKind = Literal["domain", "serverless"]
ApiEndpoint = Literal["regional", "private"]

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LLM_MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
DEFAULT_EMBEDDING_MODEL = "amazon.titan-embed-text-v2:0"
# Titan Text Embeddings v2 returns 1024 floats unless asked otherwise; the index mapping and
# the app's embedder must agree on it.
DEFAULT_EMBEDDING_DIMENSION = 1024
# AWS ids: a prefix and 8 or 17 hex digits (CloudFormation validation rejects anything else).
_SUBNET_RE = re.compile(r"^subnet-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
_VPC_RE = re.compile(r"^vpc-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
_SG_RE = re.compile(r"^sg-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
_VPCE_RE = re.compile(r"^vpce-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
_CERT_RE = re.compile(r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]+$")
_ZONE_RE = re.compile(r"^Z[0-9A-Z]{1,31}$")
_DOMAIN_RE = re.compile(r"^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
# AWS WAF's bounds for a rate-based rule's limit (requests per IP per 5 minutes).
WAF_RATE_MIN, WAF_RATE_MAX = 10, 2_000_000_000


class SettingsError(ValueError):
    """A context value is missing, malformed or contradicts another one."""


@dataclass(frozen=True)
class Edge:
    """How the API meets its callers (docs/deploy.md, "The edge")."""

    # regional: a public REGIONAL endpoint; private: reachable only through the listed
    # interface VPC endpoints (execute-api), enforced by the API's resource policy.
    endpoint: ApiEndpoint = "regional"
    vpc_endpoint_ids: tuple[str, ...] = ()
    # A custom domain (TLS 1.2 policy) with the ACM certificate that covers it; for a
    # regional API an alias record in a hosted zone when one is named.
    domain_name: str | None = None
    certificate_arn: str | None = None
    hosted_zone_id: str | None = None
    hosted_zone_name: str | None = None
    # The default execute-api endpoint answers 403: callers must use the custom domain.
    disable_execute_api_endpoint: bool = False
    # A regional AWS WAF web ACL on the stage: a per-IP rate rule (requests per 5 minutes)
    # and AWS managed rule groups.
    waf: bool = False
    waf_rate_limit: int = 2000

    @property
    def private(self) -> bool:
        return self.endpoint == "private"


@dataclass(frozen=True)
class ImportedVpc:
    """A customer VPC referenced by ids only: no lookups, so synth needs no credentials."""

    vpc_id: str
    subnet_ids: tuple[str, ...]
    availability_zones: tuple[str, ...]
    security_group_id: str | None
    create_endpoints: bool


@dataclass(frozen=True)
class DeploySettings:
    mode: Mode
    stack_name: str
    vpc: VpcKind
    imported_vpc: ImportedVpc | None
    search: SearchKind
    assets_dir: Path
    bedrock_llm_model: str
    bedrock_embedding_model: str
    bedrock_rerank_model: str | None
    embedding_dimension: int
    scheduler_group: str
    alarm_email: str | None
    authorizer_cache_ttl: int
    api_rate_limit: int
    api_burst_limit: int
    worker_max_concurrency: int
    search_instance_type: str
    search_data_nodes: int
    # How long audit records are kept (their DynamoDB TTL), in days.
    audit_retention_days: int
    # Data-plane functions reach S3 and the account-partitioned state items with credentials
    # scoped to the caller's account (tenant roles; docs/deploy.md). On unless turned off.
    tenant_credentials: bool = True
    edge: Edge = Edge()
    # Concurrency kept for the authorizer alone (0: none), so a flood of requests on the other
    # functions cannot leave it without instances: every request goes through it first.
    authorizer_reserved_concurrency: int = 50

    @property
    def production(self) -> bool:
        """saas and customer installs keep data on delete and run multi-AZ."""
        return self.mode != "dev"

    @property
    def resource_prefix(self) -> str:
        """Lower-case stack name, usable in names that AWS constrains (aoss: 3-32, [a-z0-9-])."""
        prefix = re.sub(r"[^a-z0-9-]+", "-", self.stack_name.lower()).strip("-")
        return (prefix or "skald")[:20]

    @classmethod
    def from_context(cls, node: Node) -> DeploySettings:
        ctx = _Context(node)
        vpc_id = ctx.text("vpcId")
        mode = ctx.choice("mode", ("dev", "saas", "customer"), "customer" if vpc_id else "dev")
        imported = _imported_vpc(ctx, vpc_id) if vpc_id else None
        if mode == "customer" and imported is None:
            raise SettingsError("mode=customer needs -c vpcId=vpc-... -c subnetIds=subnet-a,...")
        if mode == "saas" and imported is not None:
            raise SettingsError("mode=saas creates its own VPC; drop vpcId or use mode=customer")
        if imported is not None:
            vpc: VpcKind = "imported"
        elif mode == "saas":
            vpc = "new"
        else:
            vpc = cast(VpcKind, ctx.choice("vpc", ("none", "new"), "none"))
        production = mode != "dev"
        return cls(
            mode=cast(Mode, mode),
            stack_name=ctx.text("stackName") or ("Skald" if production else "SkaldDev"),
            vpc=vpc,
            imported_vpc=imported,
            search=cast(SearchKind, ctx.choice("search", ("domain", "serverless"), "domain")),
            assets_dir=_resolve(ctx.text("assetsDir") or "build"),
            bedrock_llm_model=ctx.text("bedrockLlmModel") or DEFAULT_LLM_MODEL,
            bedrock_embedding_model=ctx.text("bedrockEmbeddingModel") or DEFAULT_EMBEDDING_MODEL,
            bedrock_rerank_model=ctx.text("bedrockRerankModel"),
            embedding_dimension=ctx.integer("embeddingDimension", DEFAULT_EMBEDDING_DIMENSION),
            scheduler_group=ctx.text("schedulerGroup") or "skald-idle-commit",
            alarm_email=ctx.text("alarmEmail"),
            authorizer_cache_ttl=ctx.integer("authorizerCacheTtl", 0, maximum=3600),
            api_rate_limit=ctx.integer("apiRateLimit", 200 if production else 50),
            api_burst_limit=ctx.integer("apiBurstLimit", 400 if production else 100),
            worker_max_concurrency=ctx.integer(
                "workerMaxConcurrency", 10 if production else 2, minimum=2, maximum=1000
            ),
            search_instance_type=ctx.text("searchInstanceType")
            or ("r6g.large.search" if production else "t3.medium.search"),
            search_data_nodes=ctx.integer("searchDataNodes", 2 if production else 1),
            audit_retention_days=ctx.integer("auditRetentionDays", 400, minimum=1, maximum=3650),
            tenant_credentials=ctx.flag("tenantCredentials", True),
            edge=_edge(ctx),
            authorizer_reserved_concurrency=ctx.integer(
                "authorizerReservedConcurrency", 50, maximum=1000
            ),
        )


def _edge(ctx: _Context) -> Edge:
    endpoint, vpces = _endpoint(ctx)
    domain, cert = _domain(ctx)
    zone_id, zone_name = _hosted_zone(ctx, domain, private=endpoint == "private")
    disable_default = ctx.flag("disableExecuteApiEndpoint", False)
    if disable_default and not domain:
        raise SettingsError(
            "disableExecuteApiEndpoint=true leaves no way in without a custom domain: "
            "add -c domainName= -c certificateArn="
        )
    return Edge(
        endpoint=endpoint,
        vpc_endpoint_ids=vpces,
        domain_name=domain,
        certificate_arn=cert,
        hosted_zone_id=zone_id,
        hosted_zone_name=zone_name,
        disable_execute_api_endpoint=disable_default,
        waf=ctx.flag("waf", False),
        waf_rate_limit=ctx.integer(
            "wafRateLimit", 2000, minimum=WAF_RATE_MIN, maximum=WAF_RATE_MAX
        ),
    )


def _endpoint(ctx: _Context) -> tuple[ApiEndpoint, tuple[str, ...]]:
    endpoint = cast(ApiEndpoint, ctx.choice("apiEndpoint", ("regional", "private"), "regional"))
    vpces = ctx.items("apiVpcEndpointIds")
    bad = [v for v in vpces if not _VPCE_RE.match(v)]
    if bad:
        raise SettingsError(f"apiVpcEndpointIds has malformed ids: {', '.join(bad)} (vpce-...)")
    if endpoint == "private" and not vpces:
        raise SettingsError(
            "apiEndpoint=private needs -c apiVpcEndpointIds=vpce-... (the interface endpoints "
            "of the execute-api service that may reach the API, comma-separated)"
        )
    if vpces and endpoint != "private":
        raise SettingsError("apiVpcEndpointIds is for a private API: add -c apiEndpoint=private")
    return endpoint, vpces


def _domain(ctx: _Context) -> tuple[str | None, str | None]:
    domain = (ctx.text("domainName") or "").lower() or None
    cert = ctx.text("certificateArn")
    if domain and not _DOMAIN_RE.match(domain):
        raise SettingsError(f"domainName {domain!r} is not a host name (api.example.com)")
    if cert and not _CERT_RE.match(cert):
        raise SettingsError(f"certificateArn {cert!r} is not an ACM certificate ARN")
    if bool(domain) != bool(cert):
        raise SettingsError(
            "a custom domain needs both -c domainName=api.example.com and "
            "-c certificateArn=arn:aws:acm:<region>:<account>:certificate/... (same region)"
        )
    return domain, cert


def _hosted_zone(
    ctx: _Context, domain: str | None, *, private: bool
) -> tuple[str | None, str | None]:
    zone_id, zone_name = ctx.text("hostedZoneId"), ctx.text("hostedZoneName")
    if not (zone_id or zone_name):
        return None, None
    if not domain:
        raise SettingsError("hostedZoneId/hostedZoneName make an alias for domainName: set it")
    if not (zone_id and zone_name):
        raise SettingsError("an alias record needs both -c hostedZoneId= and -c hostedZoneName=")
    if not _ZONE_RE.match(zone_id):
        raise SettingsError(f"hostedZoneId {zone_id!r} is not a Route 53 zone id (Z...)")
    if private:
        raise SettingsError(
            "a private custom domain resolves through the VPC endpoint's DNS: make its "
            "record in your private hosted zone (docs/deploy.md), not with hostedZoneId"
        )
    return zone_id, zone_name


def _imported_vpc(ctx: _Context, vpc_id: str) -> ImportedVpc:
    if not _VPC_RE.match(vpc_id):
        raise SettingsError(f"vpcId {vpc_id!r} is not a VPC id (vpc-...)")
    subnets = ctx.items("subnetIds")
    if not subnets:
        raise SettingsError("vpcId needs -c subnetIds=subnet-a,subnet-b (private subnets)")
    bad = [s for s in subnets if not _SUBNET_RE.match(s)]
    if bad:
        raise SettingsError(f"subnetIds has malformed ids: {', '.join(bad)}")
    azs = ctx.items("availabilityZones")
    if azs and len(azs) != len(subnets):
        raise SettingsError("availabilityZones must list one zone per subnet, in the same order")
    sg = ctx.text("securityGroupId")
    if sg and not _SG_RE.match(sg):
        raise SettingsError(f"securityGroupId {sg!r} is not a security group id (sg-...)")
    # A customer VPC usually has its own endpoints or a NAT already; a second interface
    # endpoint with private DNS for the same service would fail to create.
    create_endpoints = ctx.flag("createEndpoints", False)
    if create_endpoints and not azs:
        raise SettingsError(
            "createEndpoints=true places one endpoint per zone: add "
            "-c availabilityZones=<az>,<az>,... (one per subnet, same order)"
        )
    return ImportedVpc(
        vpc_id=vpc_id,
        subnet_ids=subnets,
        availability_zones=azs,
        security_group_id=sg,
        create_endpoints=create_endpoints,
    )


def _resolve(path: str) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() else REPO_ROOT / candidate


class _Context:
    def __init__(self, node: Node) -> None:
        self._node = node

    def _raw(self, key: str) -> Any:
        return self._node.try_get_context(key)

    def text(self, key: str) -> str | None:
        value = self._raw(key)
        if value is None:
            return None
        text = str(value).strip()
        return text or None

    def items(self, key: str) -> tuple[str, ...]:
        value = self._raw(key)
        if value is None:
            return ()
        parts = value if isinstance(value, list) else str(value).split(",")
        return tuple(p.strip() for p in map(str, parts) if p.strip())

    def choice(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.text(key) or default
        if value not in allowed:
            raise SettingsError(f"{key}={value!r}: expected one of {', '.join(allowed)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self._raw(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise SettingsError(f"{key}={value!r}: expected true or false")

    def integer(self, key: str, default: int, minimum: int = 0, maximum: int | None = None) -> int:
        value = self._raw(key)
        try:
            number = default if value is None else int(str(value).strip())
        except ValueError as exc:
            raise SettingsError(f"{key}={value!r}: expected an integer") from exc
        if number < minimum or (maximum is not None and number > maximum):
            raise SettingsError(f"{key}={number}: out of range [{minimum}, {maximum or 'inf'}]")
        return number
