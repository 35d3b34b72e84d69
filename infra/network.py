"""Network: a new isolated VPC with endpoints, or a customer VPC imported by ids."""

from __future__ import annotations

from aws_cdk import Annotations, Fn, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.settings import DeploySettings, ImportedVpc

# Everything the functions call that is not in the VPC itself. Secrets Manager (root key) and
# X-Ray (active tracing) are needed on top of the data-plane services.
_INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "Sqs": ec2.InterfaceVpcEndpointAwsService.SQS,
    # No named constant in aws-cdk-lib for EventBridge Scheduler yet.
    "Scheduler": ec2.InterfaceVpcEndpointAwsService("scheduler"),
    "BedrockRuntime": ec2.InterfaceVpcEndpointAwsService.BEDROCK_RUNTIME,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "Kms": ec2.InterfaceVpcEndpointAwsService.KMS,
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
    "XRay": ec2.InterfaceVpcEndpointAwsService.XRAY,
}


class Network(Construct):
    """The VPC, the subnets the functions and the search cluster use, and the function SG."""

    vpc: ec2.IVpc
    subnets: list[ec2.ISubnet]
    function_sg: ec2.ISecurityGroup

    def __init__(self, scope: Construct, construct_id: str, *, settings: DeploySettings) -> None:
        super().__init__(scope, construct_id)
        if settings.imported_vpc is not None:
            self._import(settings.imported_vpc)
        else:
            self._create(settings)
        if settings.bedrock_rerank_model and self._owns_endpoints(settings):
            # Rerank is served by the agent-runtime API, not bedrock-runtime.
            self._interface_endpoint(
                "BedrockAgentRuntime", ec2.InterfaceVpcEndpointAwsService.BEDROCK_AGENT_RUNTIME
            )
        if settings.tenant_credentials and self._owns_endpoints(settings):
            # Tenant-scoped credentials: the data-plane functions call STS AssumeRole (the
            # SDKs use the regional endpoint, which private DNS points here).
            self._interface_endpoint("Sts", ec2.InterfaceVpcEndpointAwsService.STS)

    @property
    def subnet_selection(self) -> ec2.SubnetSelection:
        return ec2.SubnetSelection(subnets=self.subnets)

    @staticmethod
    def _owns_endpoints(settings: DeploySettings) -> bool:
        imported = settings.imported_vpc
        return imported is None or imported.create_endpoints

    def _create(self, settings: DeploySettings) -> None:
        flow_logs = logs.LogGroup(
            self,
            "FlowLogs",
            retention=logs.RetentionDays.THREE_MONTHS
            if settings.production
            else logs.RetentionDays.ONE_WEEK,
            removal_policy=RemovalPolicy.RETAIN if settings.production else RemovalPolicy.DESTROY,
        )
        vpc = ec2.Vpc(
            self,
            "Vpc",
            # Env-agnostic synth resolves at most two zones; two is also what the search
            # domain's zone awareness uses.
            max_azs=2,
            nat_gateways=0,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=22
                )
            ],
            # The restriction is applied by a CDK custom-resource Lambda; nothing in this VPC
            # uses the default security group, so we skip that extra function.
            restrict_default_security_group=False,
            # Rejected flows are what an investigation needs; accepted ones would log every
            # endpoint call of every function.
            flow_logs={
                "Rejected": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                    traffic_type=ec2.FlowLogTrafficType.REJECT,
                )
            },
        )
        self.vpc = vpc
        self.subnets = list(vpc.isolated_subnets)
        isolated = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[isolated]
        )
        vpc.add_gateway_endpoint(
            "DynamoDb", service=ec2.GatewayVpcEndpointAwsService.DYNAMODB, subnets=[isolated]
        )
        self.function_sg = ec2.SecurityGroup(
            self,
            "FunctionSg",
            vpc=vpc,
            description="Skald Lambda functions",
            # Isolated subnets have no route out; egress only reaches the endpoints and the
            # search cluster, so an egress allow-list would add rules without adding safety.
            allow_all_outbound=True,
        )
        for name, service in _INTERFACE_ENDPOINTS.items():
            self._interface_endpoint(name, service)

    def _import(self, imported: ImportedVpc) -> None:
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=imported.vpc_id,
            # Only used to group subnets, which we pass explicitly; unknown zones stay a
            # deploy-time list rather than a guess.
            availability_zones=list(imported.availability_zones) or Fn.get_azs(),
        )
        if imported.availability_zones:
            self.subnets = [
                ec2.Subnet.from_subnet_attributes(
                    self, f"Subnet{i}", subnet_id=subnet_id, availability_zone=zone
                )
                for i, (subnet_id, zone) in enumerate(
                    zip(imported.subnet_ids, imported.availability_zones, strict=True)
                )
            ]
        else:
            self.subnets = [
                ec2.Subnet.from_subnet_id(self, f"Subnet{i}", subnet_id)
                for i, subnet_id in enumerate(imported.subnet_ids)
            ]
        for subnet in self.subnets:
            # Route tables only matter to gateway endpoints, which we never add to a
            # customer VPC.
            Annotations.of(subnet).acknowledge_warning(
                "@aws-cdk/aws-ec2:noSubnetRouteTableId", "no gateway endpoints in customer VPCs"
            )
        if imported.security_group_id:
            # Immutable: we never add rules to a group the customer owns.
            self.function_sg = ec2.SecurityGroup.from_security_group_id(
                self, "FunctionSg", imported.security_group_id, mutable=False
            )
        else:
            self.function_sg = ec2.SecurityGroup(
                self,
                "FunctionSg",
                vpc=self.vpc,
                description="Skald Lambda functions",
                allow_all_outbound=True,
            )
        if imported.create_endpoints:
            # Gateway endpoints need the customer's route tables, so only interface ones here.
            for name, service in _INTERFACE_ENDPOINTS.items():
                self._interface_endpoint(name, service)

    def _interface_endpoint(self, name: str, service: ec2.InterfaceVpcEndpointAwsService) -> None:
        endpoint = ec2.InterfaceVpcEndpoint(
            self,
            f"{name}Endpoint",
            vpc=self.vpc,
            service=service,
            subnets=self.subnet_selection,
            private_dns_enabled=True,
            open=False,
        )
        endpoint.connections.allow_default_port_from(self.function_sg, "Skald functions")
