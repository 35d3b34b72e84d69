"""The AWS adapter set (SKALD_BACKEND=aws): S3, DynamoDB, SQS, EventBridge Scheduler,
OpenSearch and Bedrock. Each adapter is built when a composition first asks for it, from the
environment the catalogue says its port needs; clients are shared between adapters."""

from __future__ import annotations

from typing import Any

from skald import catalog
from skald.adapters.factory import CachingFactory, SetupReport, embedding_dimension, require
from skald.adapters.local.factory import build_embedder, build_llm
from skald.ports import (
    LLM,
    AuditLog,
    BlobStore,
    Embedder,
    JobQueue,
    RecallLedger,
    Reranker,
    Scheduler,
    SearchIndex,
    SessionStore,
    StateStore,
    UsageLedger,
    UsagePlans,
)


class AwsAdapterFactory(CachingFactory):
    def client(self, service: str, **config: Any) -> Any:
        """A boto3 client, one per service (and configuration) for the whole factory.
        Creating one sends nothing: the first request does."""
        key = f"client:{service}:{sorted(config.items())}"
        with self._lock:
            if key not in self._built:
                import boto3
                from botocore.config import Config

                kwargs: dict[str, Any] = {
                    "config": Config(retries={"max_attempts": 3, "mode": "standard"}, **config)
                }
                if self.settings.aws_endpoint_url:
                    kwargs["endpoint_url"] = self.settings.aws_endpoint_url
                self._built[key] = boto3.client(service, **kwargs)  # type: ignore[call-overload]
            return self._built[key]

    def _s3(self) -> Any:
        """The S3 client, with a connection for each GET the blob store's read-ahead keeps in
        flight (botocore's default pool holds 10) and a few for other threads."""
        from skald.adapters.aws.s3.blobstore import READ_AHEAD

        return self._routed("s3", self.client("s3", max_pool_connections=READ_AHEAD + 4))

    def _table(self, port: str) -> tuple[Any, str]:
        require(self.settings, port)
        assert self.settings.state_table
        return self._routed("dynamodb", self.client("dynamodb")), self.settings.state_table

    def _routed(self, service: str, base: Any) -> Any:
        """`base`, or with a tenant role configured, the client sending each call with the
        current tenant's credentials or `base`'s (skald.adapters.aws.tenancy.clients)."""
        if not self.settings.tenant_role_arn:
            return base
        from skald.adapters.aws.tenancy.clients import RoutedClient

        key = f"routed:{service}"
        with self._lock:
            if key not in self._built:
                self._built[key] = RoutedClient(base, self.tenant_sessions(), service)
            return self._built[key]

    def tenant_sessions(self) -> Any:
        """The tenant role's credentials per account (one cache for S3 and DynamoDB)."""
        from skald.adapters.aws.tenancy.clients import TenantSessions

        settings = self.settings
        assert settings.tenant_role_arn
        with self._lock:
            if "tenant-sessions" not in self._built:
                self._built["tenant-sessions"] = TenantSessions(
                    self.client("sts"),
                    settings.tenant_role_arn,
                    duration_s=settings.tenant_session_s,
                    max_accounts=settings.tenant_cache_size,
                )
            return self._built["tenant-sessions"]

    def blobs(self) -> BlobStore:
        from skald.adapters.aws.s3.blobstore import S3BlobStore

        require(self.settings, catalog.BLOBS)
        assert self.settings.bucket
        return S3BlobStore(self._s3(), self.settings.bucket)

    def state(self) -> StateStore:
        from skald.adapters.aws.dynamo.statestore import DynamoStateStore

        return DynamoStateStore(*self._table(catalog.STATE))

    def sessions(self) -> SessionStore:
        from skald.adapters.aws.dynamo.sessionstore import DynamoSessionStore

        return DynamoSessionStore(*self._table(catalog.SESSIONS))

    def audit(self) -> AuditLog:
        from skald.adapters.aws.dynamo.audit import DynamoAuditLog

        return DynamoAuditLog(*self._table(catalog.AUDIT))

    def usage_ledger(self) -> UsageLedger:
        """The usage cells, items of the state table (not a catalogue port: it goes where
        the state store goes)."""
        from skald.adapters.aws.dynamo.usage import DynamoUsageLedger

        with self._lock:
            if "usage" not in self._built:
                self._built["usage"] = DynamoUsageLedger(*self._table(catalog.STATE))
            ledger: UsageLedger = self._built["usage"]
            return ledger

    def recall(self) -> RecallLedger:
        from skald.adapters.aws.dynamo.extras import DynamoRecallLedger

        return DynamoRecallLedger(*self._table(catalog.RECALL))

    def queue(self) -> JobQueue:
        from skald.adapters.aws.dynamo.account_jobs import DynamoAccountCounts
        from skald.adapters.aws.dynamo.extras import DynamoDedupRegistry, DynamoJobCounters
        from skald.adapters.aws.sqs.jobqueue import S3PayloadStore, SqsJobQueue

        dynamo, table = self._table(catalog.QUEUE)
        assert self.settings.bucket  # required by the queue port (large payloads)
        payloads = S3PayloadStore(
            self._s3(),
            self.settings.bucket,
            queues={q.name for q in catalog.QUEUES if q.large_payloads},
        )
        urls = {q.name: str(self.settings.queue_urls.get(q.name)) for q in catalog.QUEUES}
        # Only the functions that report dead letters are told where the DLQs are.
        dlqs = dict(self.settings.dlq_urls)
        return SqsJobQueue(
            self.client("sqs"),
            urls,
            dlq_urls=dlqs,
            counters=DynamoJobCounters(dynamo, table),
            dedup=DynamoDedupRegistry(dynamo, table),
            max_attempts=self.settings.job_max_attempts,
            payloads=payloads,
            default_kinds={q.name: q.default_kind for q in catalog.QUEUES if q.default_kind},
            accounts=DynamoAccountCounts(
                dynamo, table, retention_days=max(q.retention_days for q in catalog.QUEUES)
            ),
        )

    def search_client(self) -> Any:
        from skald.adapters.aws.opensearch.index import build_client

        require(self.settings, catalog.INDEX)
        assert self.settings.opensearch_endpoint
        return build_client(self.settings.opensearch_endpoint, auth=self.settings.opensearch_auth)

    def index(self) -> SearchIndex:
        from skald.adapters.aws.opensearch.index import OpenSearchIndex

        # Through the alias `skald admin init` manages; nothing is created here.
        index = OpenSearchIndex(
            self.search_client(),
            self.settings.opensearch_index,
            dimension=embedding_dimension(self.settings),
            hybrid_pipeline=self.settings.opensearch_hybrid_pipeline,
            serverless=self.settings.opensearch_auth == "sigv4-aoss",
        )
        self.on_close(index.close)
        return index

    def embedder(self) -> Embedder:
        settings = self.settings
        if settings.embedding_provider != "bedrock":
            return build_embedder(settings)
        from skald.adapters.models.bedrock import BedrockTitanEmbedder

        return BedrockTitanEmbedder(
            self.client("bedrock-runtime"),
            model_id=settings.bedrock_embedding_model,
            dimension=settings.embedding_dimension,
        )

    def llm(self) -> LLM | None:
        settings = self.settings
        if settings.llm_provider != "bedrock" or not settings.bedrock_llm_model:
            return build_llm(settings)
        from skald.adapters.models.bedrock import BedrockConverseLLM

        return BedrockConverseLLM(
            self.client("bedrock-runtime", read_timeout=int(settings.llm_timeout_s) + 5),
            model_id=settings.bedrock_llm_model,
        )

    def reranker(self) -> Reranker | None:
        if not self.settings.bedrock_rerank_model:
            return None
        import boto3

        from skald.adapters.models.bedrock import BedrockReranker

        region = boto3.session.Session().region_name or "us-east-1"
        return BedrockReranker(
            self.client("bedrock-agent-runtime"),
            model_arn=self.settings.bedrock_rerank_model,
            region=region,
        )

    def scheduler(self) -> Scheduler | None:
        settings = self.settings
        target = settings.queue_arns.get(catalog.QUEUE_AUTOCOMMIT)
        if not (settings.scheduler_group and target and settings.scheduler_role_arn):
            return None  # no idle timers: sessions still commit on their thresholds
        from skald.adapters.aws.scheduler import EventBridgeScheduler

        return EventBridgeScheduler(
            self.client("scheduler"),
            group=settings.scheduler_group,
            target_arn=target,
            role_arn=settings.scheduler_role_arn,
        )

    def edge(self) -> UsagePlans | None:
        settings = self.settings
        if not settings.edge_namespace:
            return None  # no usage plans (aws-local): nothing to keep in step
        from skald.adapters.aws.edge import ApiGatewayUsagePlans

        return ApiGatewayUsagePlans(self.client("apigateway"), settings.edge_namespace)

    def setup(self) -> SetupReport:
        from skald.adapters.aws.setup import run_setup

        return run_setup(
            self.settings,
            self.client,
            self.search_client,
            ready_timeout_s=self.settings.setup_wait_s,
        )
