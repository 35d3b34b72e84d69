"""Search: an OpenSearch Service domain (default) or an OpenSearch Serverless VECTORSEARCH
collection. Either way only the function roles registered with grant() may reach it."""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_opensearchserverless as aoss
from aws_cdk import aws_opensearchservice as opensearch
from constructs import Construct

from infra.nag import suppress
from infra.network import Network
from infra.settings import DeploySettings, SettingsError
from skald import catalog

# The alias the app reads and writes through; setup keeps `<alias>-v<hash>` behind it.
INDEX_NAME = "skald-records"
# On a domain, IAM sees HTTP methods: every search, count, bulk write, refresh and
# delete-by-query the adapter sends is a POST. Index, alias and pipeline management is setup's.
_ES = {
    catalog.READ: ["es:ESHttpPost"],
    catalog.WRITE: ["es:ESHttpPost"],
    catalog.ADMIN: [
        "es:ESHttpGet",
        "es:ESHttpHead",
        "es:ESHttpPost",
        "es:ESHttpPut",
        "es:ESHttpDelete",
    ],
}
_AOSS_READ = ["aoss:DescribeIndex", "aoss:ReadDocument"]
_AOSS = {
    catalog.READ: _AOSS_READ,
    catalog.WRITE: [*_AOSS_READ, "aoss:WriteDocument"],
    catalog.ADMIN: [*_AOSS_READ, "aoss:WriteDocument", "aoss:CreateIndex", "aoss:DeleteIndex"],
}
# Aliases (and pipelines) are collection items in OpenSearch Serverless.
_AOSS_COLLECTION_ADMIN = [
    "aoss:DescribeCollectionItems",
    "aoss:CreateCollectionItems",
    "aoss:UpdateCollectionItems",
]


class Search(Construct):
    endpoint: str
    auth: str  # SKALD_OPENSEARCH_AUTH: how the app signs its requests

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploySettings,
        network: Network | None,
        key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        self._settings = settings
        self._network = network
        self._roles: dict[str, list[iam.IRole]] = {level: [] for level in _ES}
        self._sealed = False
        if settings.search == "domain":
            self._create_domain(key)
        else:
            self._create_collection(key)

    def grant(self, role: iam.IRole, access: str) -> None:
        """Let a function role read, write or (setup) manage the records index."""
        assert not self._sealed, "grant() after seal(): the role would not be in the policy"
        self._roles[access].append(role)
        if self._settings.search == "serverless":
            # The data-plane entry point; what it may do inside is the data-access policy's job.
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=["aoss:APIAccessAll"], resources=[self.arn])
            )

    def seal(self) -> None:
        """Write the resource-side policy naming every granted role; call after all grants."""
        self._sealed = True
        if self._settings.search == "domain":
            cfn = self.domain.node.default_child
            assert isinstance(cfn, opensearch.CfnDomain)
            cfn.access_policies = self._domain_access_policy()
        else:
            aoss.CfnAccessPolicy(
                self,
                "DataAccessPolicy",
                name=f"{self._settings.resource_prefix}-data",
                type="data",
                policy=self._collection_access_policy(),
            )

    # -- OpenSearch Service domain ----------------------------------------------------------

    def _create_domain(self, key: kms.IKey) -> None:
        settings, network = self._settings, self._network
        production = settings.production
        # Named, so the access policy can name the domain without a reference cycle.
        name = f"{settings.resource_prefix}-search"[:28]
        stack = Stack.of(self)
        self.arn = stack.format_arn(
            service="es",
            resource="domain",
            resource_name=name,
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        retention = logs.RetentionDays.THREE_MONTHS if production else logs.RetentionDays.ONE_WEEK
        log_removal = RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY
        log_groups = {
            kind: logs.LogGroup(
                self, f"{kind}Logs", retention=retention, removal_policy=log_removal
            )
            for kind in ("SlowSearch", "SlowIndex", "App")
        }
        # Written by the service; a plain resource policy instead of the custom resource the
        # Domain construct would otherwise add.
        logs.ResourcePolicy(
            self,
            "LogsPolicy",
            policy_statements=[
                iam.PolicyStatement(
                    principals=[iam.ServicePrincipal("es.amazonaws.com")],
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                    resources=[group.log_group_arn for group in log_groups.values()],
                    conditions={
                        "StringEquals": {"aws:SourceAccount": stack.account},
                        "ArnLike": {"aws:SourceArn": self.arn},
                    },
                )
            ],
        )

        subnets: list[ec2.ISubnet] = network.subnets if network else []
        zone_aware = (
            production
            and settings.search_data_nodes >= 2
            and (network is None or len(subnets) >= 2)
        )
        imported = settings.imported_vpc
        if zone_aware and imported is not None:
            if not imported.availability_zones:
                raise SettingsError(
                    "search=domain spans two zones: add -c availabilityZones=<az>,<az>,... "
                    "(one per subnet, same order), or use -c search=serverless"
                )
            subnets = _one_per_zone(subnets)
            zone_aware = len(subnets) >= 2
        domain_sg = None
        if network is not None:
            domain_sg = ec2.SecurityGroup(
                self,
                "DomainSg",
                vpc=network.vpc,
                description="Skald search domain: HTTPS from the functions only",
                allow_all_outbound=False,
            )
            domain_sg.add_ingress_rule(network.function_sg, ec2.Port.tcp(443), "Skald functions")

        domain = opensearch.Domain(
            self,
            "Domain",
            domain_name=name,
            version=opensearch.EngineVersion.OPENSEARCH_2_19,
            capacity=opensearch.CapacityConfig(
                data_nodes=settings.search_data_nodes,
                data_node_instance_type=settings.search_instance_type,
                master_nodes=3 if production else None,
                master_node_instance_type="m6g.large.search" if production else None,
                multi_az_with_standby_enabled=False,
            ),
            ebs=opensearch.EbsOptions(
                volume_size=100 if production else 10, volume_type=ec2.EbsDeviceVolumeType.GP3
            ),
            zone_awareness=opensearch.ZoneAwarenessConfig(
                enabled=zone_aware, availability_zone_count=2 if zone_aware else None
            ),
            encryption_at_rest=opensearch.EncryptionAtRestOptions(enabled=True, kms_key=key),
            node_to_node_encryption=True,
            enforce_https=True,
            tls_security_policy=opensearch.TLSSecurityPolicy.TLS_1_2,
            logging=opensearch.LoggingOptions(
                slow_search_log_enabled=True,
                slow_search_log_group=log_groups["SlowSearch"],
                slow_index_log_enabled=True,
                slow_index_log_group=log_groups["SlowIndex"],
                app_log_enabled=True,
                app_log_group=log_groups["App"],
            ),
            suppress_logs_resource_policy=True,
            removal_policy=RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY,
            vpc=network.vpc if network else None,
            # One subnet per zone the domain spans.
            vpc_subnets=[ec2.SubnetSelection(subnets=subnets[: 2 if zone_aware else 1])]
            if network
            else None,
            security_groups=[domain_sg] if domain_sg else None,
        )
        self.endpoint = f"https://{domain.domain_endpoint}"
        self.auth = "sigv4-es"
        self.domain = domain

        suppress(
            domain,
            "OS3",
            "Access is limited to the named Skald function roles (SigV4) "
            "and, in a VPC, to the function security group; callers have no fixed IPs.",
        )
        if network is None:
            suppress(
                domain,
                "OS1",
                "dev mode without a VPC (-c vpc=none): public endpoint, "
                "but every request must be SigV4-signed by a Skald function role.",
            )
        if not production:
            suppress(
                domain,
                "OS4",
                "dev mode: one data node; saas/customer modes run three dedicated masters.",
            )
        if not zone_aware:
            suppress(
                domain, "OS7", "dev mode or a single customer subnet: one zone; saas runs two."
            )

    def _domain_access_policy(self) -> object:
        statements = []
        for level, roles in self._roles.items():
            actions = _ES[level]
            if roles:
                statements.append(
                    iam.PolicyStatement(
                        principals=[iam.ArnPrincipal(role.role_arn) for role in roles],
                        actions=actions,
                        resources=[f"{self.arn}/*"],
                    )
                )
        return iam.PolicyDocument(statements=statements)

    # -- OpenSearch Serverless collection ---------------------------------------------------

    def _create_collection(self, key: kms.IKey) -> None:
        settings, network = self._settings, self._network
        stack = Stack.of(self)
        prefix = settings.resource_prefix
        name = f"{prefix}-records"
        self._collection_name = name
        collection_rule = [{"ResourceType": "collection", "Resource": [f"collection/{name}"]}]

        encryption = aoss.CfnSecurityPolicy(
            self,
            "EncryptionPolicy",
            name=f"{prefix}-enc",
            type="encryption",
            policy=stack.to_json_string(
                {"Rules": collection_rule, "AWSOwnedKey": False, "KmsARN": key.key_arn}
            ),
        )
        network_rule: dict[str, object] = {"Rules": collection_rule}
        if network is not None:
            sg = ec2.SecurityGroup(
                self,
                "EndpointSg",
                vpc=network.vpc,
                description="Skald search collection endpoint: HTTPS from the functions only",
                allow_all_outbound=False,
            )
            sg.add_ingress_rule(network.function_sg, ec2.Port.tcp(443), "Skald functions")
            endpoint = aoss.CfnVpcEndpoint(
                self,
                "VpcEndpoint",
                name=f"{prefix}-vpce",
                vpc_id=network.vpc.vpc_id,
                subnet_ids=[subnet.subnet_id for subnet in network.subnets],
                security_group_ids=[sg.security_group_id],
            )
            network_rule |= {"AllowFromPublic": False, "SourceVPCEs": [endpoint.attr_id]}
        else:
            # dev without a VPC: reachable from the internet, still gated by IAM + data policy.
            network_rule |= {"AllowFromPublic": True}
        network_policy = aoss.CfnSecurityPolicy(
            self,
            "NetworkPolicy",
            name=f"{prefix}-net",
            type="network",
            policy=stack.to_json_string([network_rule]),
        )
        collection = aoss.CfnCollection(
            self,
            "Collection",
            name=name,
            type="VECTORSEARCH",
            # Standby replicas double the minimum OCUs: worth it for the hosted service only.
            standby_replicas="ENABLED" if settings.production else "DISABLED",
        )
        # A collection cannot be created before a matching encryption policy exists.
        collection.add_resource_dependency(encryption)
        collection.add_resource_dependency(network_policy)
        collection.apply_removal_policy(
            RemovalPolicy.RETAIN if settings.production else RemovalPolicy.DESTROY
        )
        self.arn = collection.attr_arn
        self.endpoint = collection.attr_collection_endpoint
        self.auth = "sigv4-aoss"
        self.collection = collection

    def _collection_access_policy(self) -> str:
        name = self._collection_name
        indexes = [f"index/{name}/{INDEX_NAME}*"]
        entries = []
        for level, roles in self._roles.items():
            if not roles:
                continue
            rules: list[dict[str, object]] = [
                {"ResourceType": "index", "Resource": indexes, "Permission": _AOSS[level]}
            ]
            if level == catalog.ADMIN:
                rules.append(
                    {
                        "ResourceType": "collection",
                        "Resource": [f"collection/{name}"],
                        "Permission": _AOSS_COLLECTION_ADMIN,
                    }
                )
            entries.append({"Rules": rules, "Principal": [role.role_arn for role in roles]})
        return Stack.of(self).to_json_string(entries)


def _one_per_zone(subnets: list[ec2.ISubnet]) -> list[ec2.ISubnet]:
    """The first subnet of each zone, in the order given."""
    chosen: dict[str, ec2.ISubnet] = {}
    for subnet in subnets:
        chosen.setdefault(subnet.availability_zone, subnet)
    return list(chosen.values())
