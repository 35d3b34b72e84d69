"""The embedded adapter set: a data directory, SQLite files and the packaged embedder."""

from __future__ import annotations

from skald.adapters.local.blobstore import LocalBlobStore
from skald.adapters.local.jobqueue import SqliteJobQueue
from skald.adapters.local.recall_ledger import BlobRecallLedger
from skald.adapters.local.searchindex import LocalSearchIndex
from skald.adapters.local.sessionstore import SqliteSessionStore
from skald.adapters.local.statestore import SqliteStateStore
from skald.config import Settings
from skald.container import Adapters
from skald.ports import LLM, Embedder


def build_embedder(settings: Settings) -> Embedder:
    if settings.embedding_provider == "openai":
        from skald.adapters.models.openai_embedder import OpenAICompatibleEmbedder

        if not settings.embedding_base_url or not settings.embedding_model:
            raise ValueError("SKALD_EMBEDDING_BASE_URL and SKALD_EMBEDDING_MODEL are required "
                             "for the openai embedding provider")
        return OpenAICompatibleEmbedder(settings.embedding_base_url, settings.embedding_model,
                                        settings.embedding_api_key,
                                        dimension=settings.embedding_dimension)
    from skald.adapters.models.onnx_embedder import OnnxMiniLMEmbedder

    return OnnxMiniLMEmbedder()


def build_llm(settings: Settings) -> LLM | None:
    if settings.llm_provider in (None, "openai") and settings.llm_base_url and \
            settings.llm_model:
        from skald.adapters.models.openai_llm import OpenAICompatibleLLM

        return OpenAICompatibleLLM(settings.llm_base_url, settings.llm_model,
                                   settings.llm_api_key, timeout_s=settings.llm_timeout_s)
    return None


def build_local_adapters(settings: Settings) -> Adapters:
    root = settings.data_dir
    root.mkdir(parents=True, exist_ok=True)
    embedder = build_embedder(settings)
    state = SqliteStateStore(root / "state.db")
    queue = SqliteJobQueue(root / "queue.db", max_attempts=settings.job_max_attempts,
                           backoff_base_s=settings.job_backoff_s)
    index = LocalSearchIndex(root / "index.db", dimension=embedder.dimension)
    sessions = SqliteSessionStore(root / "state.db")
    blobs = LocalBlobStore(root / "blobs")
    adapters = Adapters(blobs=blobs, state=state, queue=queue,
                        index=index, embedder=embedder, sessions=sessions,
                        llm=build_llm(settings), recall=BlobRecallLedger(blobs))
    for thing in (index, queue, sessions, state):
        close = getattr(thing, "close", None)
        if callable(close):
            adapters.closers.append(close)
    return adapters
