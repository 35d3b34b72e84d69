"""Functions: the common layer, one role + log group per function, the three HTTP functions
and the API authorizer. Worker functions are made here too (see Workers.add_consumers)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.nag import allow_wildcard_resource, suppress
from infra.network import Network
from infra.settings import DeploySettings
from infra.workers import WorkerSpec

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


@dataclass(frozen=True)
class FunctionSpec:
    construct_id: str
    asset: str  # folder under <assetsDir>/functions
    handler: str
    description: str
    # API Gateway gives up after 29 s; a longer Lambda would only burn money.
    timeout: Duration = Duration.seconds(29)
    memory_mb: int = 1024


HTTP_FUNCTIONS = {
    "content": FunctionSpec(
        "Content",
        "content",
        "handler.handler",
        "Skald API: fs, content, resources, tasks, system, admin",
    ),
    "search": FunctionSpec(
        "Search", "search", "handler.handler", "Skald API: find, search, grep, glob"
    ),
    "sessions": FunctionSpec("Sessions", "sessions", "handler.handler", "Skald API: sessions"),
}
AUTHORIZER = FunctionSpec(
    "Authorizer",
    "authorizer",
    "handler.handler",
    "Skald API key authorizer",
    timeout=Duration.seconds(10),
    memory_mb=512,
)


class Functions(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploySettings,
        network: Network | None,
        environment: dict[str, str],
        api_environment: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self._settings = settings
        self._network = network
        self._environment = environment
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
        self.http = {
            key: self.create(spec, api_environment) for key, spec in HTTP_FUNCTIONS.items()
        }
        self.authorizer = self.create(AUTHORIZER, api_environment)

    def create(
        self, spec: FunctionSpec, extra_env: dict[str, str] | None = None
    ) -> lambda_.Function:
        """A function with its own role and log group, the common layer, tracing, and the VPC
        when there is one."""
        role = iam.Role(
            self,
            f"{spec.construct_id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Skald {spec.construct_id} function",
        )
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
        if network is not None:
            # What AWSLambdaVPCAccessExecutionRole grants; EC2 offers no resource scoping here.
            role.add_to_policy(iam.PolicyStatement(actions=_ENI_ACTIONS, resources=["*"]))
        fn = lambda_.Function(
            self,
            spec.construct_id,
            description=spec.description,
            runtime=RUNTIME,
            architecture=lambda_.Architecture.X86_64,
            code=lambda_.Code.from_asset(str(_asset_dir(self._assets / "functions" / spec.asset))),
            handler=spec.handler,
            layers=[self.layer],
            role=role,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            tracing=lambda_.Tracing.ACTIVE,
            timeout=spec.timeout,
            memory_size=spec.memory_mb,
            environment={**self._environment, **(extra_env or {})},
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

    def create_worker(self, spec: WorkerSpec) -> lambda_.Function:
        return self.create(
            FunctionSpec(
                construct_id=spec.construct_id,
                asset="workers",
                handler=spec.handler,
                description=f"Skald worker: {spec.queue} queue",
                timeout=spec.timeout,
                memory_mb=spec.memory_mb,
            )
        )

    def grant_bedrock(self, grantee: iam.IGrantable, *, rerank: bool = False) -> None:
        """InvokeModel on the configured embedding and LLM models (and the reranker)."""
        settings = self._settings
        models = [settings.bedrock_embedding_model, settings.bedrock_llm_model]
        if rerank and settings.bedrock_rerank_model:
            models.append(settings.bedrock_rerank_model)
            # The Rerank API has no resource type; the model itself is still scoped below.
            grantee.grant_principal.add_to_principal_policy(
                iam.PolicyStatement(actions=["bedrock:Rerank"], resources=["*"])
            )
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
