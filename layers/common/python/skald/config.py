"""Settings from the environment (prefix SKALD_) and `skald serve` flags."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from skald import catalog


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SKALD_", extra="ignore")

    backend: Literal["local", "aws", "aws-local"] = "local"
    data_dir: Path = Path(".skald")
    host: str = "127.0.0.1"
    port: int = 1933
    root_api_key: str | None = None
    root_api_key_secret_arn: str | None = None
    # How long a warm instance may trust what it learnt of a key (the authorizer's identity
    # cache, the root key read from its secret, the workers' view of removed tenants): a
    # revocation, a role change or a removal takes effect within this bound everywhere.
    auth_cache_ttl_s: float = Field(default=2.0, ge=0.0, le=60.0)

    # Limits
    max_write_bytes: int = 16 * 1024 * 1024
    max_upload_bytes: int = 64 * 1024 * 1024
    max_request_bytes: int = 80 * 1024 * 1024
    max_message_bytes: int = 256 * 1024
    max_zip_entries: int = 10_000
    max_zip_bytes: int = 512 * 1024 * 1024
    # A zipped directory with more files or bytes than these is written by the fetch worker
    # (the request answers with a task); unset: by backend (services/ingest/imports.py
    # INLINE_LIMITS: 200 files or 16 MiB on AWS, 500 files or 64 MiB in `skald serve`).
    import_inline_max_entries: int | None = Field(default=None, ge=0)
    import_inline_max_bytes: int | None = Field(default=None, ge=0)
    # `skald serve`: a request head (line + headers) above this size or header count gets 431.
    max_header_bytes: int = 64 * 1024
    max_header_count: int = 100

    # Back-pressure, per account: requests that queue background work are refused (429,
    # Retry-After) while the caller's account has this many jobs queued or running (0: never),
    # unless its plan's `jobs_in_flight` says otherwise; its count is re-read at most this often.
    max_queued_jobs: int = 1000
    queue_depth_cache_s: float = 2.0
    retry_after_s: int = 5

    # Plans: the tier of an account whose settings name none (domain/plans TIERS); the
    # default, "unlimited", limits nothing.
    default_plan: str = "unlimited"
    # The request rate limit of each account's plan, in the app: None is on for `skald serve`
    # (every backend) and off in the Lambda functions behind API Gateway, whose usage plans
    # limit instead.
    app_rate_limits: bool | None = None
    # How long a quota's count (sessions, index records) read for an account is trusted.
    quota_count_ttl_s: float = Field(default=5.0, ge=0.0, le=300.0)

    # Metering: recorded usage waits in memory (at most this many distinct hourly cells; past
    # it new cells are dropped and counted) and is flushed to the ledger this often, at the
    # end of each Lambda invocation and at shutdown. The limits re-read an account's totals
    # at most every usage_totals_ttl_s.
    usage_buffer_cells: int = Field(default=50_000, ge=1)
    usage_flush_s: float = Field(default=10.0, ge=0.0)
    usage_totals_ttl_s: float = Field(default=2.0, ge=0.0, le=300.0)

    # Tests only: mounts GET /api/v1/debug/fault, which fails with an unexpected error.
    fault_injection: bool = False

    # Audit trail: how long a record is kept (DynamoDB TTL on AWS; pruned locally).
    audit_retention_days: int = Field(default=400, ge=1, le=3650)

    # Background work
    worker_threads: int = 2
    job_max_attempts: int = 5  # = the SQS redrive maxReceiveCount of the deployed queues
    job_backoff_s: float = 0.5
    # Fairness: a long job (a large folder's semantic processing) works this long, then hands
    # the rest to a new job queued behind the other accounts' jobs (None: until done).
    job_slice_s: float | None = 10.0
    # Worker Lambdas: the concurrency of a queue's event source mapping (the stack sets it),
    # the jobs of one account run at once on a queue (None: half of that), and how long a
    # job over that cap is put back for.
    worker_max_concurrency: int = 10
    worker_account_concurrency: int | None = None
    worker_defer_s: float = 5.0
    # Local worker pool: the time a job may take (None: no limit). A semantic job short of it
    # hands the rest of its files to a new job, as one does on Lambda at the invocation's end.
    job_time_budget_s: float | None = None
    wait_timeout_s: float = 600.0
    # Half-done commits older than this are finished (or rolled back) by the periodic
    # recovery; longer than any live commit request may take.
    commit_recovery_grace_s: float = 120.0
    # Tests only: crash points to arm, "point=exit|raise,..." (services/faults.py).
    fault_points: str | None = None

    # Remote sources (add_resource of a URL): caps of one fetch. Loopback addresses are
    # refused like every internal address unless `fetch_allow_loopback` is set, which only
    # tests serving fixtures from 127.0.0.1 do; the cloud backend refuses to start with it.
    fetch_timeout_s: float = 120.0
    fetch_max_bytes: int = 64 * 1024 * 1024
    fetch_max_files: int = 5000
    fetch_max_redirects: int = 5
    fetch_allow_loopback: bool = False

    # Semantic processing
    abstract_max_chars: int = 256
    overview_max_chars: int = 4000
    section_max_chars: int = 2000

    # Models
    embedding_provider: Literal["onnx", "openai", "bedrock"] = "onnx"
    embedding_base_url: str | None = None
    embedding_model: str | None = None
    embedding_api_key: str | None = None
    embedding_dimension: int = 384
    # The bundled model's weight matrices multiplied as int8 (faster, vectors very close to
    # float32's); false multiplies them in float32, as the model is written; unset: int8 where
    # the CPU has VNNI instructions.
    onnx_int8_matmuls: bool | None = None
    llm_provider: Literal["none", "openai", "bedrock"] | None = None
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    llm_timeout_s: float = 30.0
    # The LLM accepts images (an OpenAI-compatible vision model, or a Bedrock model with
    # image input): added images then get a caption in their description.
    llm_vision: bool = False

    # AWS
    bucket: str | None = None
    state_table: str | None = None
    # By queue name, for every queue of the catalogue: its URL (SKALD_<NAME>_QUEUE_URL), its
    # DLQ's (SKALD_<NAME>_DLQ_URL: set for the functions that report or sweep dead letters)
    # and, for a queue EventBridge Scheduler targets, its ARN (SKALD_<NAME>_QUEUE_ARN).
    queue_urls: dict[str, str] = Field(default_factory=dict)
    dlq_urls: dict[str, str] = Field(default_factory=dict)
    queue_arns: dict[str, str] = Field(default_factory=dict)
    scheduler_group: str | None = None
    scheduler_role_arn: str | None = None
    opensearch_endpoint: str | None = None
    opensearch_auth: Literal["none", "sigv4-es", "sigv4-aoss", "basic"] = "none"
    opensearch_index: str = "skald-records"  # an alias: `skald admin init` manages it
    opensearch_hybrid_pipeline: str | None = None  # server-side hybrid fusion when set
    bedrock_embedding_model: str = "amazon.titan-embed-text-v2:0"
    bedrock_llm_model: str | None = None
    bedrock_rerank_model: str | None = None
    idempotency_table: str | None = None
    # The edge's usage plans (domain/plans/edge.py): the deployment's name in its API Gateway
    # keys and usage plans. Unset: no usage plans, no edge keys (`skald serve`, aws-local).
    edge_namespace: str | None = None
    # Tenant-scoped credentials: S3 and account-partitioned DynamoDB calls in an account's
    # scope go with this role's credentials, tagged with the account (the CDK app gives each
    # data-plane function its own tenant role). Unset: every call goes with the process's
    # own credentials (`skald serve --backend aws-local` unless asked: moto enforces no IAM).
    tenant_role_arn: str | None = None
    tenant_session_s: int = 3600  # 900 to 3600: role chaining caps a session at one hour
    tenant_cache_size: int = 1000  # accounts whose credentials a process keeps
    # How long setup waits for a fresh search endpoint (or its access policy) to answer.
    setup_wait_s: float = 0.0
    aws_endpoint_url: str | None = Field(default=None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            QueueVariables(settings_cls),
            dotenv_settings,
            file_secret_settings,
        )

    def env_value(self, env: str) -> object:
        """The value these settings hold for variable `env` (None when unset)."""
        for q in catalog.QUEUES:
            for name, values in (
                (q.url_env, self.queue_urls),
                (q.dlq_url_env, self.dlq_urls),
                (q.arn_env, self.queue_arns),
            ):
                if env == name:
                    return values.get(q.name)
        return getattr(self, field_name(env), None)

    def queue_variables(self) -> dict[str, str]:
        """The queue settings as the variables that set them (SKALD_<NAME>_QUEUE_URL, ...)."""
        out: dict[str, str] = {}
        for q in catalog.QUEUES:
            for env, values in (
                (q.url_env, self.queue_urls),
                (q.dlq_url_env, self.dlq_urls),
                (q.arn_env, self.queue_arns),
            ):
                if env and q.name in values:
                    out[env] = values[q.name]
        return out

    @model_validator(mode="after")
    def _no_loopback_fetch_in_the_cloud(self) -> Settings:
        if self.fetch_allow_loopback and self.backend == "aws":
            raise ValueError(
                "SKALD_FETCH_ALLOW_LOOPBACK is for tests of `skald serve` only; "
                "the aws backend never fetches from loopback"
            )
        return self

    @property
    def llm_enabled(self) -> bool:
        if self.llm_provider == "none":
            return False
        if self.llm_provider == "bedrock":
            return bool(self.bedrock_llm_model)
        return bool(self.llm_base_url and self.llm_model)


class QueueVariables(PydanticBaseSettingsSource):
    """The variables of each catalogue queue, from the environment: the catalogue names them
    (a new worker's follow from its entry)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # the three mappings come whole, from __call__

    def __call__(self) -> dict[str, Any]:
        def read(env: str | None) -> str | None:
            return os.environ.get(env) if env else None

        found: dict[str, dict[str, str]] = {"queue_urls": {}, "dlq_urls": {}, "queue_arns": {}}
        for q in catalog.QUEUES:
            for key, env in (
                ("queue_urls", q.url_env),
                ("dlq_urls", q.dlq_url_env),
                ("queue_arns", q.arn_env),
            ):
                if value := read(env):
                    found[key][q.name] = value
        return {key: values for key, values in found.items() if values}


def field_name(env: str) -> str:
    """The Settings field an environment variable fills (`SKALD_BUCKET` -> `bucket`)."""
    return env.removeprefix("SKALD_").lower()
