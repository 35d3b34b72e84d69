"""The Skald stack: wires the constructs together, decides who may do what, and exports the
values an operator needs after deploy."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.api import Api
from infra.functions import Functions
from infra.network import Network
from infra.observability import Observability
from infra.search import INDEX_NAME, Search
from infra.settings import DeploySettings
from infra.storage import Storage
from infra.workers import Workers


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
            api_environment={"SKALD_ROOT_API_KEY_SECRET_ARN": self.storage.root_api_key.secret_arn},
        )
        self.workers.add_consumers(self.functions.create_worker)
        self._grant()
        self.api = Api(
            self,
            "Api",
            settings=settings,
            content=self.functions.http["content"],
            search=self.functions.http["search"],
            sessions=self.functions.http["sessions"],
            authorizer=self.functions.authorizer,
        )
        self.observability = Observability(
            self,
            "Observability",
            settings=settings,
            key=self.storage.key,
            api=self.api.rest_api,
            functions=self.functions.all,
            workers=self.workers.functions,
            dead_letter_queues=self.workers.dead_letter_queues,
        )
        self._outputs()

    def _environment(self) -> dict[str, str]:
        """What every function's config (pydantic-settings, prefix SKALD_) reads."""
        settings, storage, workers = self.settings, self.storage, self.workers
        env = {
            "SKALD_BACKEND": "aws",
            "SKALD_BUCKET": storage.bucket.bucket_name,
            "SKALD_STATE_TABLE": storage.state_table.table_name,
            "SKALD_IDEMPOTENCY_TABLE": storage.idempotency_table.table_name,
            "SKALD_SEMANTIC_QUEUE_URL": workers.queues["semantic"].queue_url,
            "SKALD_MEMORY_QUEUE_URL": workers.queues["memory"].queue_url,
            "SKALD_AUTOCOMMIT_QUEUE_URL": workers.queues["autocommit"].queue_url,
            "SKALD_AUTOCOMMIT_QUEUE_ARN": workers.queues["autocommit"].queue_arn,
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
            "POWERTOOLS_SERVICE_NAME": "skald",
            "POWERTOOLS_METRICS_NAMESPACE": "Skald",
        }
        if settings.bedrock_rerank_model:
            env["SKALD_BEDROCK_RERANK_MODEL"] = settings.bedrock_rerank_model
        return env

    def _grant(self) -> None:
        """Least privilege, function by function: every grant names its actions and resources."""
        storage, workers, search, fns = self.storage, self.workers, self.search, self.functions
        content, search_fn, sessions = (fns.http[k] for k in ("content", "search", "sessions"))
        # Read side: the search function never writes.
        storage.grant_blobs(search_fn, write=False)
        storage.grant_state(search_fn, write=False)
        search.grant(_role(search_fn), write=False)
        fns.grant_bedrock(search_fn, rerank=True)

        # Writers: content (fs, resources, admin), sessions, and the three workers.
        writers = [content, sessions, *workers.functions.values()]
        for fn in writers:
            storage.grant_blobs(fn, write=True)
            storage.grant_state(fn, write=True)
            storage.grant_idempotency(fn)
            search.grant(_role(fn), write=True)
            fns.grant_bedrock(fn)

        for fn in (content, search_fn, sessions):
            storage.grant_root_api_key(fn)
        storage.grant_key_lookup(fns.authorizer)
        storage.grant_root_api_key(fns.authorizer)

        workers.grant_send(content, "semantic", "memory")
        workers.grant_send(sessions, "semantic", "memory")
        workers.grant_scheduling(sessions)
        workers.grant_send(workers.functions["semantic"], "semantic")
        workers.grant_send(workers.functions["memory"], "semantic")
        workers.grant_send(workers.functions["autocommit"], "semantic", "memory")
        search.seal()

    def _outputs(self) -> None:
        outputs = {
            "ApiUrl": self.api.rest_api.url,
            "RootApiKeySecretArn": self.storage.root_api_key.secret_arn,
            "BucketName": self.storage.bucket.bucket_name,
            "StateTableName": self.storage.state_table.table_name,
            "SearchEndpoint": self.search.endpoint,
            "AlarmTopicArn": self.observability.topic.topic_arn,
        }
        for name, value in outputs.items():
            CfnOutput(self, name, value=value)


def _role(fn: lambda_.Function) -> iam.IRole:
    # Always set: Functions.create gives every function its own role.
    assert fn.role is not None
    return fn.role
