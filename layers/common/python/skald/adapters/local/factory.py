"""The embedded adapter set: a data directory, SQLite files and the packaged embedder, each
built when a composition first asks for it."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from skald.adapters.factory import CachingFactory, SetupError, SetupReport, embedding_dimension
from skald.config import Settings
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

T = TypeVar("T")


def build_embedder(settings: Settings) -> Embedder:
    if settings.embedding_provider == "openai":
        from skald.adapters.models.openai_embedder import OpenAICompatibleEmbedder

        if not settings.embedding_base_url or not settings.embedding_model:
            raise ValueError(
                "SKALD_EMBEDDING_BASE_URL and SKALD_EMBEDDING_MODEL are required "
                "for the openai embedding provider"
            )
        return OpenAICompatibleEmbedder(
            settings.embedding_base_url,
            settings.embedding_model,
            settings.embedding_api_key,
            dimension=settings.embedding_dimension,
        )
    from skald.adapters.models.onnx_embedder import OnnxMiniLMEmbedder

    return OnnxMiniLMEmbedder(int8_matmuls=settings.onnx_int8_matmuls)


def build_llm(settings: Settings) -> LLM | None:
    if settings.llm_provider in (None, "openai") and settings.llm_base_url and settings.llm_model:
        from skald.adapters.models.openai_llm import OpenAICompatibleLLM

        return OpenAICompatibleLLM(
            settings.llm_base_url,
            settings.llm_model,
            settings.llm_api_key,
            timeout_s=settings.llm_timeout_s,
        )
    return None


class LocalAdapterFactory(CachingFactory):
    """Opening a store creates its schema, so setup() is opening each of them once."""

    @property
    def root(self) -> Path:
        root = self.settings.data_dir
        root.mkdir(parents=True, exist_ok=True)
        return root

    def _closing(self, adapter: T) -> T:
        close = getattr(adapter, "close", None)
        if callable(close):
            self.on_close(close)
        return adapter

    def blobs(self) -> BlobStore:
        from skald.adapters.local.blobs.blobstore import LocalBlobStore

        return LocalBlobStore(self.root / "blobs")

    def state(self) -> StateStore:
        from skald.adapters.local.sqlite.statestore import SqliteStateStore

        return self._closing(SqliteStateStore(self.root / "state.db"))

    def sessions(self) -> SessionStore:
        from skald.adapters.local.sqlite.sessionstore import SqliteSessionStore

        return self._closing(SqliteSessionStore(self.root / "state.db"))

    def audit(self) -> AuditLog:
        from skald.adapters.local.sqlite.audit_log import SqliteAuditLog

        return self._closing(SqliteAuditLog(self.root / "state.db"))

    def usage_ledger(self) -> UsageLedger:
        """The usage cells, tables of the state database (not a catalogue port: it goes
        where the state store goes)."""
        from skald.adapters.local.sqlite.usage_ledger import SqliteUsageLedger

        with self._lock:
            if "usage" not in self._built:
                self._built["usage"] = self._closing(SqliteUsageLedger(self.root / "state.db"))
            ledger: UsageLedger = self._built["usage"]
            return ledger

    def recall(self) -> RecallLedger:
        from skald.adapters.local.blobs.recall_ledger import BlobRecallLedger

        blobs: BlobStore = self.build("blobs")
        return BlobRecallLedger(blobs)

    def queue(self) -> JobQueue:
        from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue

        return self._closing(
            SqliteJobQueue(
                self.root / "queue.db",
                max_attempts=self.settings.job_max_attempts,
                backoff_base_s=self.settings.job_backoff_s,
            )
        )

    def index(self) -> SearchIndex:
        from skald.adapters.local.index.searchindex import LocalSearchIndex

        return self._closing(
            LocalSearchIndex(self.root / "index.db", dimension=embedding_dimension(self.settings))
        )

    def embedder(self) -> Embedder:
        return build_embedder(self.settings)

    def llm(self) -> LLM | None:
        return build_llm(self.settings)

    def reranker(self) -> Reranker | None:
        return None

    def scheduler(self) -> Scheduler | None:
        return None  # `skald serve` runs an in-process idle timer instead

    def edge(self) -> UsagePlans | None:
        return None  # no gateway: `skald serve` enforces request rates in the app

    def setup(self) -> SetupReport:
        report = SetupReport("local")
        report.steps.append(f"data dir {self.root}: ok")
        try:
            for port, name in (
                ("state", "state.db"),
                ("sessions", "state.db (sessions)"),
                ("queue", "queue.db"),
                ("index", "index.db"),
            ):
                self.build(port)
                report.steps.append(f"{name}: ok")
        except ValueError as exc:  # e.g. an index of another vector size
            raise SetupError(str(exc)) from exc
        return report
