"""The Skald stack: wires the constructs together, decides who may do what, and exports the
values an operator needs after deploy. Which functions exist, the environment each one gets
and what each one may touch all follow from the catalogue (skald/catalog.py)."""

from __future__ import annotations

from aws_cdk import CfnOutput, Duration, Stack, triggers
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra import access
from infra.api import Api
from infra.functions import Functions
from infra.nag import allow_wildcard_resource
from infra.network import Network
from infra.observability import Observability
from infra.search import INDEX_NAME, Search
from infra.settings import DeploySettings
from infra.storage import Storage
from infra.workers import Workers
from skald import catalog

# How long the setup function waits for a fresh search endpoint (or a data access policy
# still propagating) before it gives up.
SETUP_WAIT_S = 300


class SkaldStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, settings: DeploySettings) -> None:
        super().__init__(
            scope,
            construct_id,
            description=f"Skald context database ({settings.mode} mode, {settings.search} search)",
        )
        self.settings = settings
        self.network = (
            Network(self, "Network", settings=settings) if settings.vpc != "none" else None
        )
        self.storage = Storage(self, "Storage", settings=settings)
        self.workers = Workers(self, "Workers", settings=settings)
        self.search = Search(
            self, "Search", settings=settings, network=self.network, key=self.storage.key
        )
        self.functions = Functions(
            self,
            "Functions",
            settings=settings,
            network=self.network,
            environment=self._environment(),
        )
        self.workers.add_consumers(self.functions.by_name)
        self._grant()
        self.api = Api(
            self,
            "Api",
            settings=settings,
            functions=self.functions.http,
            authorizer=self.functions.authorizer,
        )
        self.setup_trigger = self._setup_trigger()
        self.observability = Observability(
            self,
            "Observability",
            settings=settings,
            key=self.storage.key,
            api=self.api.rest_api,
            functions=self.functions.runtime,
            workers=self.workers.functions,
            dead_letter_queues=self.workers.dead_letter_queues,
        )
        self._outputs()

    def _environment(self) -> dict[str, str]:
        """The value of every variable a function may read (pydantic-settings, prefix
        SKALD_); each function gets the ones the catalogue lists for it."""
        settings, storage, workers = self.settings, self.storage, self.workers
        [attempts] = {q.max_receive_count for q in catalog.QUEUES}  # one setting for all
        env = {
            "SKALD_BACKEND": "aws",
            "SKALD_BUCKET": storage.bucket.bucket_name,
            "SKALD_STATE_TABLE": storage.state_table.table_name,
            "SKALD_IDEMPOTENCY_TABLE": storage.idempotency_table.table_name,
            "SKALD_ROOT_API_KEY_SECRET_ARN": storage.root_api_key.secret_arn,
            "SKALD_JOB_MAX_ATTEMPTS": str(attempts),
            "SKALD_WORKER_MAX_CONCURRENCY": str(settings.worker_max_concurrency),
            "SKALD_SCHEDULER_GROUP": workers.schedule_group.schedule_group_name,
            "SKALD_SCHEDULER_ROLE_ARN": workers.scheduler_role.role_arn,
            "SKALD_OPENSEARCH_ENDPOINT": self.search.endpoint,
            "SKALD_OPENSEARCH_AUTH": self.search.auth,
            "SKALD_OPENSEARCH_INDEX": INDEX_NAME,
            "SKALD_EMBEDDING_PROVIDER": "bedrock",
            "SKALD_BEDROCK_EMBEDDING_MODEL": settings.bedrock_embedding_model,
            "SKALD_EMBEDDING_DIMENSION": str(settings.embedding_dimension),
            "SKALD_LLM_PROVIDER": "bedrock",
            "SKALD_BEDROCK_LLM_MODEL": settings.bedrock_llm_model,
            "SKALD_SETUP_WAIT_S": str(SETUP_WAIT_S),
            "SKALD_AUDIT_RETENTION_DAYS": str(settings.audit_retention_days),
            # The usage plans' and account keys' names (infra/edge.py, domain/plans/edge.py).
            catalog.EDGE_NAMESPACE_ENV: settings.stack_name,
            "POWERTOOLS_SERVICE_NAME": "skald",
            "POWERTOOLS_METRICS_NAMESPACE": "Skald",
        }
        for q in catalog.QUEUES:
            env[q.url_env] = workers.queues[q.name].queue_url
            env[q.dlq_url_env] = workers.dead_letter_queues[q.name].queue_url
            if q.arn_env:
                env[q.arn_env] = workers.queues[q.name].queue_arn
        if settings.bedrock_rerank_model:
            env["SKALD_BEDROCK_RERANK_MODEL"] = settings.bedrock_rerank_model
        return env

    def _setup_trigger(self) -> triggers.Trigger:
        """`skald admin init` at deploy time: once the search domain (with its access policy),
        the table and the queues exist, and before the API takes traffic. It runs again
        whenever the setup function changes (its code, its layer, its environment), so a new
        release's index mapping is applied by the deploy itself."""
        [spec] = catalog.functions("setup")
        trigger = triggers.Trigger(
            self,
            "SetupTrigger",
            handler=self.functions.setup,
            timeout=Duration.seconds(spec.timeout_s),
            execute_after=[self.storage, self.workers, self.search],
            execute_before=[self.api],
        )
        return trigger

    def _grant(self) -> None:
        """Least privilege, function by function, from what the catalogue says each one uses,
        sends to, drains and observes (infra/access.py): every grant names its actions and
        resources."""
        for spec in catalog.FUNCTIONS:
            access.check_levels(spec)
            fn = self.functions.by_name[spec.name]
            # A data-plane function's data grants go to its tenant role (access.py).
            tenant = self.functions.tenant_roles.get(spec.name)
            self._grant_storage(spec, fn, scoped=tenant is not None)
            self._grant_services(spec, fn)
            self._grant_queues(spec, fn)
            if tenant is not None:
                self._grant_tenant(spec, tenant)
        self.search.seal()

    def _grant_storage(self, spec: catalog.Function, fn: lambda_.Function, *, scoped: bool) -> None:
        storage = self.storage
        blobs = access.own_blobs(spec, tenant=scoped)
        if blobs is not None:
            storage.grant_blobs(fn, blobs)
        for system in access.system_blobs(spec, tenant=scoped):
            storage.grant_system_blobs(fn, system)
        for payloads in access.job_payloads(spec):
            storage.grant_job_payloads(fn, payloads)
        table = access.own_table(spec, tenant=scoped)
        if table is not None:
            storage.grant_state(fn, table)
        control = access.control_table(spec, tenant=scoped)
        if control is not None:
            storage.grant_control_state(fn, control)

    def _grant_services(self, spec: catalog.Function, fn: lambda_.Function) -> None:
        """The search domain, Bedrock, the scheduler, the root key and idempotency records."""
        uses = spec.uses
        if catalog.INDEX in uses:
            self.search.grant(_role(fn), uses[catalog.INDEX])
        self.functions.grant_bedrock(
            fn,
            embedding=catalog.EMBEDDER in uses,
            llm=catalog.LLM in uses,
            rerank=catalog.RERANKER in uses,
        )
        if catalog.SCHEDULER in uses:
            self.workers.grant_scheduling(fn, uses[catalog.SCHEDULER])
        if catalog.ROOT_KEY in uses:
            self.storage.grant_root_api_key(fn)
        if catalog.IDEMPOTENCY in uses:
            self.storage.grant_idempotency(fn)
        if catalog.EDGE in uses:
            self._grant_edge(fn, uses[catalog.EDGE])

    def _grant_edge(self, fn: lambda_.Function, level: str) -> None:
        """API Gateway's management API for the account keys and their usage plans. Its
        resources are paths; the plans' ids are not named: a function's policy naming them
        would make a cycle (plans -> stage -> methods -> function -> its policy)."""
        stack = Stack.of(self)
        for path, actions in access.edge(level):
            arn = f"arn:{stack.partition}:apigateway:{stack.region}::{path}"
            fn.add_to_role_policy(iam.PolicyStatement(actions=list(actions), resources=[arn]))
            if "*" in path:
                allow_wildcard_resource(
                    fn,
                    f"arn:<AWS::Partition>:apigateway:<AWS::Region>::{path}",
                    "API keys and usage plan keys are addressed by ids API Gateway makes at "
                    "run time; the plans' ids cannot be named without a dependency cycle.",
                )

    def _grant_queues(self, spec: catalog.Function, fn: lambda_.Function) -> None:
        workers = self.workers
        if spec.sends:
            workers.grant_send(fn, *spec.sends)
        observed = access.observed_queues(spec)
        if observed:
            workers.grant_observe(fn, *observed)
        if spec.inspects:
            workers.grant_inspect(fn, *spec.inspects)
        if spec.sweeps:
            workers.grant_sweep(fn, *spec.sweeps)

    def _grant_tenant(self, spec: catalog.Function, tenant: iam.Role) -> None:
        scoped_blobs = access.scoped_blobs(spec)
        if scoped_blobs is not None:
            self.storage.grant_tenant_blobs(tenant, scoped_blobs)
        scoped_table = access.scoped_table(spec)
        if scoped_table is not None:
            self.storage.grant_tenant_state(tenant, scoped_table)

    def _outputs(self) -> None:
        outputs = {
            "ApiUrl": self.api.rest_api.url,
            "RootApiKeySecretArn": self.storage.root_api_key.secret_arn,
            "BucketName": self.storage.bucket.bucket_name,
            "StateTableName": self.storage.state_table.table_name,
            "SearchEndpoint": self.search.endpoint,
            "AlarmTopicArn": self.observability.topic.topic_arn,
        }
        domain = self.settings.edge.domain_name
        if domain:
            outputs["ApiDomainUrl"] = f"https://{domain}/"
        # `skald admin edge-sync` reads it (SKALD_EDGE_NAMESPACE) to find the usage plans.
        outputs["EdgeNamespace"] = self.settings.stack_name
        for name, value in outputs.items():
            CfnOutput(self, name, value=value)


def _role(fn: lambda_.Function) -> iam.IRole:
    # Always set: Functions.create gives every function its own role.
    assert fn.role is not None
    return fn.role
