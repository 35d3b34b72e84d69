"""Storage: the data key, the blob bucket (+ its access-log bucket), the state and idempotency
tables, and the generated root API key. Each grant names its actions one by one: which ones
a function gets is infra/access.py's to say."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.access import (
    IDEMPOTENCY,
    ROOT_KEY,
    ROOT_KEY_KEY,
    BlobAccess,
    PayloadAccess,
    SystemBlobAccess,
    TableAccess,
    table_key,
)
from infra.nag import allow_wildcard_resource, arn_token, suppress
from infra.settings import DeploySettings
from skald.adapters.aws.tenancy.rules import (
    CONTROL_PLANE_PARTITIONS,
    TAG_KEY,
    tenant_blob_prefix,
    tenant_partitions,
)
from skald.catalog import JOB_PAYLOAD_EXPIRY_DAYS, JOB_PAYLOAD_PREFIX

UPLOADS_PREFIX = "_uploads/"
# The account a tenant role's session is for (its session tag), as a policy variable.
TENANT = f"${{aws:PrincipalTag/{TAG_KEY}}}"


class Storage(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, settings: DeploySettings) -> None:
        super().__init__(scope, construct_id)
        production = settings.production
        removal = RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY

        # One customer-managed key for the data at rest (bucket, tables, secret, alarm topic,
        # search). It outlives the stack everywhere: the retained bucket is unreadable without it.
        self.key = kms.Key(
            self,
            "DataKey",
            description=f"{settings.stack_name}: Skald data at rest",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )

        self.log_bucket = s3.Bucket(
            self,
            "AccessLogs",
            # S3 server access logging can only deliver to SSE-S3 buckets.
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365 if production else 30))],
            removal_policy=RemovalPolicy.RETAIN,
        )

        self.bucket = s3.Bucket(
            self,
            "Blobs",
            versioned=True,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            # Bucket keys cut the KMS request per object down to one per bucket and period.
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            server_access_logs_bucket=self.log_bucket,
            server_access_logs_prefix="blobs/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-uploads",
                    prefix=UPLOADS_PREFIX,
                    expiration=Duration.days(1),
                ),
                # Job payloads too large for a message live as long as their job; this
                # removes what a missed delete leaves (longer than any queue's retention).
                s3.LifecycleRule(
                    id="expire-job-payloads",
                    prefix=JOB_PAYLOAD_PREFIX,
                    expiration=Duration.days(JOB_PAYLOAD_EXPIRY_DAYS),
                ),
                s3.LifecycleRule(
                    id="expire-noncurrent",
                    noncurrent_version_expiration=Duration.days(30),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
            ],
            # Never deleted with the stack, whatever the mode: it holds the customers' content.
            removal_policy=RemovalPolicy.RETAIN,
        )

        pitr = dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True)
        self.state_table = dynamodb.Table(
            self,
            "State",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            point_in_time_recovery_specification=pitr,
            time_to_live_attribute="ttl",
            deletion_protection=production,
            removal_policy=removal,
        )
        # gsi1: API-key hash -> identity, and per-account task listing.
        self.state_table.add_global_secondary_index(
            index_name="gsi1",
            partition_key=dynamodb.Attribute(name="gsi1pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="gsi1sk", type=dynamodb.AttributeType.STRING),
        )
        # idle: sparse index of open sessions by last activity, for the auto-commit sweep.
        self.state_table.add_global_secondary_index(
            index_name="idle",
            partition_key=dynamodb.Attribute(name="idle_pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="idle_at", type=dynamodb.AttributeType.NUMBER),
        )

        self.idempotency_table = dynamodb.Table(
            self,
            "Idempotency",
            partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            point_in_time_recovery_specification=pitr,
            time_to_live_attribute="expiration",
            deletion_protection=False,
            # Only in-flight/recent job records: nothing worth keeping (or protecting) once the
            # stack is gone, and a protected table would make stack deletion fail.
            removal_policy=RemovalPolicy.DESTROY,
        )

        self.root_api_key = secretsmanager.Secret(
            self,
            "RootApiKey",
            description=f"{settings.stack_name}: Skald ROOT API key (admin routes only)",
            encryption_key=self.key,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=64, exclude_punctuation=True, include_space=False
            ),
            removal_policy=removal,
        )
        suppress(
            self.root_api_key,
            "SMG4",
            "The root key is a bearer credential held by operators: an automatic rotation "
            "would lock them out silently. Rotate it by hand (docs/operations.md, 'Keys').",
        )
        suppress(
            self.log_bucket,
            "S1",
            "This is the access-log target bucket; logging it into itself would loop.",
        )

    # -- grants -----------------------------------------------------------------------------

    def grant_blobs(self, grantee: iam.IGrantable, access: BlobAccess) -> None:
        _allow(grantee, list(access.bucket), [self.bucket.bucket_arn])
        if access.objects:
            _allow(grantee, list(access.objects), [self.bucket.arn_for_objects("*")])
            allow_wildcard_resource(
                grantee,
                f"{arn_token(self.bucket)}/*",
                "Object keys are chosen at runtime ({account}/{path}); tenant isolation is the "
                "app's account prefix, the bucket is the boundary this role gets.",
            )
        self._grant_key(grantee, "s3", access.key)

    def grant_job_payloads(self, grantee: iam.IGrantable, access: PayloadAccess) -> None:
        """The objects of one queue's job payloads (skald.adapters.aws.sqs.payloads), under their
        own prefix."""
        prefix = f"{JOB_PAYLOAD_PREFIX}{access.queue}/*"
        _allow(grantee, list(access.objects), [self.bucket.arn_for_objects(prefix)])
        allow_wildcard_resource(
            grantee,
            f"{arn_token(self.bucket)}/{prefix}",
            "Job payload objects are keyed by job id, chosen when the job is queued; the grant "
            "is limited to the prefix of the queue's payloads.",
        )
        self._grant_key(grantee, "s3", access.key)

    def grant_state(self, grantee: iam.IGrantable, access: TableAccess) -> None:
        """The state table's items (and DescribeTable), and Query on the indexes listed."""
        table_arn = self.state_table.table_arn
        if access.actions:
            _allow(grantee, sorted(access.actions), [table_arn])
        if access.indexes:
            _allow(
                grantee,
                ["dynamodb:Query"],
                [f"{table_arn}/index/{name}" for name in access.indexes],
            )
        self._grant_key(grantee, "dynamodb", table_key(access))

    def grant_system_blobs(self, grantee: iam.IGrantable, access: SystemBlobAccess) -> None:
        """System objects under one prefix (outside every account), listed below it only."""
        _allow(
            grantee,
            list(access.bucket),
            [self.bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": f"{access.prefix}*"}},
        )
        if access.objects:
            _allow(
                grantee, list(access.objects), [self.bucket.arn_for_objects(f"{access.prefix}*")]
            )
            allow_wildcard_resource(
                grantee,
                f"{arn_token(self.bucket)}/{access.prefix}*",
                "System objects keyed at runtime (watch ids, the readiness probe's key), under "
                "their own prefix.",
            )
        self._grant_key(grantee, "s3", access.key)

    def grant_control_state(self, grantee: iam.IGrantable, access: TableAccess) -> None:
        """Actions on the state table's control-plane items only (tasks, dedup claims, job
        counters): IAM refuses them on any account's partition."""
        _allow(
            grantee,
            sorted(access.actions),
            [self.state_table.table_arn],
            conditions={
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(CONTROL_PLANE_PARTITIONS)},
                "Null": {"dynamodb:LeadingKeys": "false"},
            },
        )
        self._grant_key(grantee, "dynamodb", table_key(access))

    def grant_tenant_blobs(self, grantee: iam.IGrantable, access: BlobAccess) -> None:
        """A tenant role's blob access: `access` on the tagged account's objects only, and a
        listing only below the account's prefix."""
        prefix = tenant_blob_prefix(TENANT)
        _allow(
            grantee,
            list(access.bucket),
            [self.bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": f"{prefix}*"}},
        )
        if access.objects:
            _allow(grantee, list(access.objects), [self.bucket.arn_for_objects(f"{prefix}*")])
            allow_wildcard_resource(
                grantee,
                # cdk-nag prints a policy variable ${x} as <x>
                f"{arn_token(self.bucket)}/<aws:PrincipalTag/{TAG_KEY}>/*",
                "The objects of the one account the session is tagged with ({account}/{path}).",
            )
        self._grant_key(grantee, "s3", access.key)

    def grant_tenant_state(self, grantee: iam.IGrantable, access: TableAccess) -> None:
        """A tenant role's state-table access: `access`'s item actions on the tagged
        account's partitions and on the control plane's (a commit's transaction writes its
        task, a user's its key guard), never on another account's."""
        actions = sorted(access.actions - {"dynamodb:DescribeTable"})
        if not actions:
            return
        _allow(
            grantee,
            actions,
            [self.state_table.table_arn],
            conditions={
                "ForAllValues:StringLike": {
                    "dynamodb:LeadingKeys": [*tenant_partitions(TENANT), *CONTROL_PLANE_PARTITIONS]
                },
                # ForAllValues holds for a request naming no partition at all: it must name some.
                "Null": {"dynamodb:LeadingKeys": "false"},
            },
        )
        self._grant_key(grantee, "dynamodb", table_key(access))

    def grant_idempotency(self, grantee: iam.IGrantable) -> None:
        _allow(grantee, sorted(IDEMPOTENCY.actions), [self.idempotency_table.table_arn])
        self._grant_key(grantee, "dynamodb", table_key(IDEMPOTENCY))

    def grant_root_api_key(self, grantee: iam.IGrantable) -> None:
        _allow(grantee, list(ROOT_KEY), [self.root_api_key.secret_arn])
        self._grant_key(grantee, "secretsmanager", ROOT_KEY_KEY)

    def _grant_key(self, grantee: iam.IGrantable, service: str, actions: tuple[str, ...]) -> None:
        # Callers of a service that encrypts with this key need the key too; kms:ViaService
        # keeps that permission usable only through the named service.
        if not actions:
            return
        region = Stack.of(self).region
        _allow(
            grantee,
            list(actions),
            [self.key.key_arn],
            conditions={"StringEquals": {"kms:ViaService": f"{service}.{region}.amazonaws.com"}},
        )


def _allow(
    grantee: iam.IGrantable,
    actions: list[str],
    resources: list[str],
    conditions: dict[str, dict[str, str | list[str]]] | None = None,
) -> None:
    grantee.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(actions=actions, resources=resources, conditions=conditions)
    )
