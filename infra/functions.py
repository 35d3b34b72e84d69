"""Functions: the common layer, and one function per catalogue entry (skald/catalog.py), each
with its own role and log group: the HTTP functions, the API authorizer, the workers and the
deploy-time setup function. Names, handlers, memory, timeouts and the environment each one
gets all come from the catalogue. Each data-plane function (catalog.tenant_scoped) also gets
a tenant role, which only its own role may assume, with the account as a session tag: the
stack grants that role the function's data actions on the tagged account's items only."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.nag import allow_wildcard_resource, suppress
from infra.network import Network
from infra.settings import DeploySettings, SettingsError
from skald import catalog
from skald.adapters.aws.tenancy.rules import TAG_KEY

RUNTIME = lambda_.Runtime.PYTHON_3_12
# Cross-region inference profile ids carry a geography in front of the model id.
_PROFILE_GEOGRAPHIES = ("us", "us-gov", "eu", "apac", "jp", "au", "ca", "global")
_ENI_ACTIONS = [
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
]


def function_environment(spec: catalog.Function, values: Mapping[str, str]) -> dict[str, str]:
    """The variables the catalogue says `spec` reads, with their values for this stack."""
    names = catalog.environment(spec)
    missing = [n for n in names if n not in values and n not in catalog.OPTIONAL_ENV]
    if missing:
        raise SettingsError(f"no value for {', '.join(missing)} ({spec.name} function)")
    return {n: values[n] for n in names if n in values}


class Functions(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploySettings,
        network: Network | None,
        environment: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self._settings = settings
        self._network = network
        self._assets = settings.assets_dir
        self.layer = lambda_.LayerVersion(
            self,
            "CommonLayer",
            code=lambda_.Code.from_asset(str(_asset_dir(self._assets / "layer"))),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[lambda_.Architecture.X86_64],
            description="Skald: the skald package and its runtime dependencies",
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.all: list[lambda_.Function] = []
        self.tenant_roles: dict[str, iam.Role] = {}  # function name -> its tenant role
        self.by_name = {spec.name: self.create(spec, environment) for spec in catalog.FUNCTIONS}
        self.http = {spec.name: self.by_name[spec.name] for spec in catalog.functions("http")}
        self.workers = {spec.name: self.by_name[spec.name] for spec in catalog.functions("worker")}
        [authorizer] = catalog.functions("authorizer")
        self.authorizer = self.by_name[authorizer.name]
        [setup] = catalog.functions("setup")
        self.setup = self.by_name[setup.name]

    @property
    def runtime(self) -> list[lambda_.Function]:
        """The functions that serve traffic or jobs (not the deploy-time setup)."""
        return [fn for fn in self.all if fn is not self.setup]

    def create(self, spec: catalog.Function, values: Mapping[str, str]) -> lambda_.Function:
        """A function with its own role and log group, the common layer, tracing, and the VPC
        when there is one; a data-plane function its tenant role too."""
        role = iam.Role(
            self,
            f"{spec.construct_id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Skald {spec.construct_id} function",
        )
        if self._settings.tenant_credentials and catalog.tenant_scoped(spec):
            tenant_role = self._tenant_role(spec, role)
            values = {**values, catalog.TENANT_ROLE_ENV: tenant_role.role_arn}
        environment = function_environment(spec, values)
        log_group = logs.LogGroup(
            self,
            f"{spec.construct_id}Logs",
            retention=logs.RetentionDays.THREE_MONTHS
            if self._settings.production
            else logs.RetentionDays.TWO_WEEKS,
            removal_policy=RemovalPolicy.RETAIN
            if self._settings.production
            else RemovalPolicy.DESTROY,
        )
        # Instead of the AWS-managed basic execution policy, which may write to any log group.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[log_group.log_group_arn],
            )
        )
        network = self._network
        if network is not None and spec.internet and self._settings.imported_vpc is None:
            # The VPC this stack creates has isolated subnets (no NAT): a function that
            # fetches from the internet runs outside it. In a customer VPC it stays inside and
            # egresses through the customer's NAT.
            network = None
        if network is not None:
            # What AWSLambdaVPCAccessExecutionRole grants; EC2 offers no resource scoping here.
            role.add_to_policy(iam.PolicyStatement(actions=_ENI_ACTIONS, resources=["*"]))
        fn = lambda_.Function(
            self,
            spec.construct_id,
            description=spec.description,
            runtime=RUNTIME,
            architecture=lambda_.Architecture.X86_64,
            code=lambda_.Code.from_asset(str(_asset_dir(self._assets / "functions" / spec.code))),
            handler=spec.handler,
            layers=[self.layer],
            role=role,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            tracing=lambda_.Tracing.ACTIVE,
            timeout=Duration.seconds(spec.timeout_s),
            memory_size=spec.memory_mb,
            environment=environment,
            reserved_concurrent_executions=self._reserved_concurrency(spec),
            vpc=network.vpc if network else None,
            vpc_subnets=network.subnet_selection if network else None,
            security_groups=[network.function_sg] if network else None,
        )
        allow_wildcard_resource(
            fn,
            "*",
            "X-Ray PutTraceSegments/PutTelemetryRecords, the Lambda VPC ENI actions and "
            "bedrock:Rerank have no resource-level scoping.",
        )
        suppress(
            fn,
            "L1",
            "Pinned to python3.12: the common layer is built from cp312 "
            "manylinux wheels (scripts/build_lambda_assets.py).",
        )
        self.all.append(fn)
        return fn

    def _reserved_concurrency(self, spec: catalog.Function) -> int | None:
        """The authorizer's own share of the account's concurrency: every request runs it
        first, so a flood on the other functions must not leave it without instances."""
        if spec.kind != "authorizer":
            return None
        return self._settings.authorizer_reserved_concurrency or None

    def _tenant_role(self, spec: catalog.Function, role: iam.Role) -> iam.Role:
        """The role `spec`'s function assumes per account. Only that function's role may
        assume it, and only with one session tag, naming the account (at least one
        character); the tenant role's policies read it (infra/stack.py grants them)."""
        tenant = iam.Role(
            self,
            f"{spec.construct_id}TenantRole",
            assumed_by=iam.ArnPrincipal(role.role_arn)
            .with_session_tags()
            .with_conditions(
                {
                    "StringLike": {f"aws:RequestTag/{TAG_KEY}": "?*"},
                    "ForAllValues:StringEquals": {"aws:TagKeys": [TAG_KEY]},
                }
            ),
            # Role chaining caps a session at one hour whatever the role allows.
            max_session_duration=Duration.hours(1),
            description=f"Skald {spec.construct_id} function, scoped to one account",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["sts:AssumeRole", "sts:TagSession"], resources=[tenant.role_arn]
            )
        )
        self.tenant_roles[spec.name] = tenant
        return tenant

    def grant_bedrock(
        self, grantee: iam.IGrantable, *, embedding: bool, llm: bool, rerank: bool
    ) -> None:
        """InvokeModel on the configured models a function uses (catalogue ports)."""
        settings = self._settings
        models = [settings.bedrock_embedding_model] if embedding else []
        if llm:
            models.append(settings.bedrock_llm_model)
        if rerank and settings.bedrock_rerank_model:
            models.append(settings.bedrock_rerank_model)
            # The Rerank API has no resource type; the model itself is still scoped below.
            grantee.grant_principal.add_to_principal_policy(
                iam.PolicyStatement(actions=["bedrock:Rerank"], resources=["*"])
            )
        if not models:
            return
        resources = [arn for model in models for arn in self._model_arns(model)]
        for arn in resources:
            if ":bedrock:*:" in arn:
                allow_wildcard_resource(
                    grantee,
                    arn.replace(Stack.of(self).partition, "<AWS::Partition>"),
                    "A cross-region inference profile serves its model from any region of "
                    "its geography; only that one model is allowed.",
                )
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=["bedrock:InvokeModel"], resources=resources)
        )

    def _model_arns(self, model_id: str) -> list[str]:
        stack = Stack.of(self)
        geography, _, base_model = model_id.partition(".")
        if geography in _PROFILE_GEOGRAPHIES and base_model:
            # An inference profile routes to the model in any region of its geography.
            profile = stack.format_arn(
                service="bedrock",
                resource="inference-profile",
                resource_name=model_id,
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            )
            models = f"arn:{stack.partition}:bedrock:*::foundation-model/{base_model}"
            return [profile, models]
        return [
            stack.format_arn(
                service="bedrock",
                account="",
                resource="foundation-model",
                resource_name=model_id,
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            )
        ]


def _asset_dir(path: Path) -> Path:
    if not path.is_dir():
        raise FileNotFoundError(
            f"{path} is missing: run `make lambda-assets` (or pass -c assetsDir=...)"
        )
    return path
