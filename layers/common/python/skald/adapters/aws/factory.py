"""The AWS adapter set (SKALD_BACKEND=aws): S3, DynamoDB, SQS, EventBridge Scheduler,
OpenSearch and Bedrock, built once per Lambda cold start from the environment."""

from __future__ import annotations

from typing import Any

from skald.adapters.aws.dynamo_extras import (
    DynamoDedupRegistry,
    DynamoJobCounters,
    DynamoRecallLedger,
)
from skald.adapters.aws.dynamo_sessionstore import DynamoSessionStore
from skald.adapters.aws.dynamo_statestore import DynamoStateStore
from skald.adapters.aws.opensearch_index import OpenSearchIndex, build_client
from skald.adapters.aws.s3_blobstore import S3BlobStore
from skald.adapters.aws.scheduler import EventBridgeScheduler
from skald.adapters.aws.sqs_jobqueue import SqsJobQueue
from skald.config import Settings
from skald.container import Adapters
from skald.ports import LLM, Embedder, Reranker
from skald.services.processing import QUEUE_AUTOCOMMIT, QUEUE_MEMORY, QUEUE_SEMANTIC
from skald.services.sessions import JOB_AUTO_COMMIT


def _require(settings: Settings, *names: str) -> None:
    missing = [f"SKALD_{n.upper()}" for n in names if not getattr(settings, n)]
    if missing:
        raise ValueError(f"the aws backend needs {', '.join(missing)}")


def _client(service: str, settings: Settings, **config: Any) -> Any:
    import boto3
    from botocore.config import Config

    kwargs: dict[str, Any] = {"config": Config(retries={"max_attempts": 3, "mode": "standard"},
                                               **config)}
    if settings.aws_endpoint_url:
        kwargs["endpoint_url"] = settings.aws_endpoint_url
    client: Any = boto3.client(service, **kwargs)  # type: ignore[call-overload]
    return client


def build_models(settings: Settings) -> tuple[Embedder, LLM | None, Reranker | None]:
    from skald.adapters.local.factory import build_embedder, build_llm

    embedder: Embedder
    if settings.embedding_provider == "bedrock":
        from skald.adapters.models.bedrock import BedrockTitanEmbedder

        embedder = BedrockTitanEmbedder(_client("bedrock-runtime", settings),
                                        model_id=settings.bedrock_embedding_model,
                                        dimension=settings.embedding_dimension)
    else:
        embedder = build_embedder(settings)
    llm: LLM | None = None
    if settings.llm_provider == "bedrock" and settings.bedrock_llm_model:
        from skald.adapters.models.bedrock import BedrockConverseLLM

        llm = BedrockConverseLLM(_client("bedrock-runtime", settings,
                                         read_timeout=int(settings.llm_timeout_s) + 5),
                                 model_id=settings.bedrock_llm_model)
    else:
        llm = build_llm(settings)
    reranker: Reranker | None = None
    if settings.bedrock_rerank_model:
        import boto3

        from skald.adapters.models.bedrock import BedrockReranker

        region = boto3.session.Session().region_name or "us-east-1"
        reranker = BedrockReranker(_client("bedrock-agent-runtime", settings),
                                   model_arn=settings.bedrock_rerank_model, region=region)
    return embedder, llm, reranker


def build_aws_adapters(settings: Settings) -> Adapters:
    _require(settings, "bucket", "state_table", "semantic_queue_url", "memory_queue_url",
             "autocommit_queue_url", "opensearch_endpoint")
    assert settings.bucket and settings.state_table and settings.opensearch_endpoint
    dynamo = _client("dynamodb", settings)
    table = settings.state_table
    queue = SqsJobQueue(
        _client("sqs", settings),
        {QUEUE_SEMANTIC: str(settings.semantic_queue_url),
         QUEUE_MEMORY: str(settings.memory_queue_url),
         QUEUE_AUTOCOMMIT: str(settings.autocommit_queue_url)},
        counters=DynamoJobCounters(dynamo, table), dedup=DynamoDedupRegistry(dynamo, table),
        max_attempts=settings.job_max_attempts,
        default_kinds={QUEUE_AUTOCOMMIT: JOB_AUTO_COMMIT})
    embedder, llm, reranker = build_models(settings)
    index = OpenSearchIndex(
        build_client(settings.opensearch_endpoint, auth=settings.opensearch_auth),
        settings.opensearch_index, dimension=embedder.dimension,
        serverless=settings.opensearch_auth == "sigv4-aoss")
    index.ensure_index()
    scheduler = None
    if settings.scheduler_group and settings.autocommit_queue_arn and \
            settings.scheduler_role_arn:
        scheduler = EventBridgeScheduler(_client("scheduler", settings),
                                         group=settings.scheduler_group,
                                         target_arn=settings.autocommit_queue_arn,
                                         role_arn=settings.scheduler_role_arn)
    return Adapters(
        blobs=S3BlobStore(_client("s3", settings), settings.bucket),
        state=DynamoStateStore(dynamo, table), queue=queue, index=index, embedder=embedder,
        sessions=DynamoSessionStore(dynamo, table), llm=llm, reranker=reranker,
        scheduler=scheduler, recall=DynamoRecallLedger(dynamo, table),
        closers=[index.close])
