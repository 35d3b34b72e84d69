"""Builds the adapter set and the services from Settings, once per process (a Lambda cold
start, or `skald serve`)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from skald.config import Settings
from skald.domain.identity import Identity
from skald.domain.uri import PUBLIC_SCOPES
from skald.ports import (
    LLM,
    BlobStore,
    Embedder,
    JobQueue,
    RecallLedger,
    Reranker,
    Scheduler,
    SearchIndex,
    SessionStore,
    StateStore,
)
from skald.services.accounts import AccountService
from skald.services.browse import BrowseService
from skald.services.content import ContentService
from skald.services.context import ContextService
from skald.services.filesystem import FsChange, VikingFS
from skald.services.matching import MatchingService
from skald.services.processing import ProcessingScheduler, wait_idle
from skald.services.resources import ResourceService
from skald.services.retrieval import RetrievalService
from skald.services.semantic import SemanticLimits, SemanticService
from skald.services.sessions import SessionService
from skald.services.tasks import TaskService

if TYPE_CHECKING:
    from skald.services.memory_commit import MemoryCommitService

log = logging.getLogger("skald")

# Semantic jobs leased together when several wait (a burst of writes): their shared parent
# directories are summarised and embedded once instead of once per job.
SEMANTIC_BATCH_JOBS = 16


@dataclass
class Adapters:
    blobs: BlobStore
    state: StateStore
    queue: JobQueue
    index: SearchIndex
    embedder: Embedder
    sessions: SessionStore
    llm: LLM | None = None
    reranker: Reranker | None = None
    scheduler: Scheduler | None = None
    recall: RecallLedger | None = None
    closers: list[Any] = field(default_factory=list)


class Container:
    def __init__(self, settings: Settings, adapters: Adapters) -> None:
        self.settings = settings
        self.adapters = adapters
        self.clock = time.time
        self.blobs = adapters.blobs
        self.state = adapters.state
        self.queue = adapters.queue
        self.index = adapters.index
        self.embedder = adapters.embedder
        self.llm = adapters.llm
        self.fs = VikingFS(self.blobs, max_write_bytes=settings.max_write_bytes)
        self.browse = BrowseService(self.fs)
        self.tasks = TaskService(self.state)
        self.scheduler = ProcessingScheduler(self.queue, self.tasks)
        self.resources = ResourceService(
            self.blobs, self.fs, max_upload_bytes=settings.max_upload_bytes,
            max_zip_entries=settings.max_zip_entries, max_zip_bytes=settings.max_zip_bytes)
        self.content = ContentService(self.fs, self.resources, self.scheduler,
                                      wait_timeout_s=settings.wait_timeout_s)
        self.semantic = SemanticService(
            self.fs, self.index, self.embedder, self.llm,
            SemanticLimits(settings.abstract_max_chars, settings.overview_max_chars,
                           settings.section_max_chars))
        self.session_store = adapters.sessions
        self.sessions = SessionService(
            self.session_store, self.fs, self.tasks, self.queue,
            max_message_bytes=settings.max_message_bytes, on_removed=self._forget,
            scheduler=adapters.scheduler)
        self.retrieval = RetrievalService(self.fs, self.index, self.embedder, llm=self.llm,
                                          reranker=adapters.reranker,
                                          recent_messages=self.sessions.recent_texts)
        recall = adapters.recall
        if recall is None:
            from skald.adapters.local.recall_ledger import BlobRecallLedger

            recall = BlobRecallLedger(self.blobs)
        # LLM steps of context assembly never wait longer than the configured LLM timeout.
        self.context = ContextService(
            self.retrieval, self.fs, self.sessions, recall, llm=self.llm,
            expansion_timeout_s=min(5.0, settings.llm_timeout_s),
            rewrite_timeout_s=min(20.0, settings.llm_timeout_s))
        self.matching = MatchingService(self.fs)
        self.accounts = AccountService(self.state, settings.root_api_key,
                                       on_account_deleted=self._purge_account,
                                       index=self.index, sessions=self.session_store)
        self._workers: Any = None
        self.local_stack: Any = None  # aws-local: the emulators and the SQS pollers
        self._lock = threading.Lock()
        self._stop_timer = threading.Event()
        self._timer: threading.Thread | None = None

    @cached_property
    def memory_commit(self) -> MemoryCommitService:
        """Built on first use: only the memory worker needs the extractor (its rule tables
        are not worth loading on every HTTP cold start)."""
        from skald.services.extraction import DeterministicExtractor, Extractor, LLMExtractor
        from skald.services.memory_commit import MemoryCommitService

        extractor: Extractor = DeterministicExtractor()
        if self.llm is not None:
            extractor = LLMExtractor(self.llm, fallback=extractor)
        return MemoryCommitService(self.session_store, self.sessions, self.fs, self.semantic,
                                   self.tasks, extractor, self.llm)

    # ---------------------------------------------------------------- lifecycle

    def _purge_account(self, account_id: str) -> None:
        for blob in list(self.blobs.iter_all(f"{account_id}/")):
            self.blobs.delete(blob.key)
        for scope in PUBLIC_SCOPES:
            self.index.delete_prefix(account_id, f"viking://{scope}")
        self.session_store.delete_account_sessions(account_id)

    def _forget(self, identity: Identity, uris: list[str]) -> None:
        """Removed subtrees leave the index through the usual semantic job."""
        change = FsChange(identity.account_id, identity.user_id, removed=list(uris))
        self.scheduler.submit(identity, change, task_type="rm", internal=True)

    def start_idle_timer(self, interval_s: float = 1.0) -> None:
        """Local mode: the idle auto-commit timer. Deadlines live in the state store, so a
        restart picks up where it left off."""
        def tick() -> None:
            while not self._stop_timer.wait(interval_s):
                try:
                    self.sessions.enqueue_due_commits(self.clock())
                except Exception:  # the timer must survive a transient failure
                    log.exception("idle auto-commit tick failed")

        self._timer = threading.Thread(target=tick, name="skald-idle-timer", daemon=True)
        self._timer.start()

    def start_workers(self) -> None:
        """Drain the job queues inside this process: worker threads on the SQLite queue, or,
        in aws-local, SQS pollers feeding the worker Lambda handlers."""
        if self.local_stack is not None:
            from skald.jobs.lambda_workers import make_auto_commit_handler, make_sqs_worker
            from skald.services.processing import QUEUE_AUTOCOMMIT, QUEUE_MEMORY, QUEUE_SEMANTIC

            attempts = self.settings.job_max_attempts
            worker = make_sqs_worker(lambda: self, max_attempts=attempts)
            self.local_stack.drain({
                QUEUE_SEMANTIC: worker, QUEUE_MEMORY: worker,
                QUEUE_AUTOCOMMIT: make_auto_commit_handler(lambda: self,
                                                           max_attempts=attempts)})
            return
        from skald.adapters.local.workers import JobWorkerPool
        from skald.jobs.registry import BATCH_HANDLERS, HANDLERS, job_died
        from skald.ports import Job
        from skald.services.processing import QUEUE_SEMANTIC, QUEUES

        def bind(kind: str) -> Any:
            def run(job: Job) -> None:
                HANDLERS[kind](self, job.payload)
            return run

        def bind_batch(kind: str) -> Any:
            def run(jobs: list[Job]) -> list[str | None]:
                return BATCH_HANDLERS[kind](self, [job.payload for job in jobs])
            return run

        with self._lock:
            if self._workers is not None:
                return
            release = getattr(self.queue, "release_leases", None)
            if callable(release):
                release()  # leases of a previous process of this data dir are dead
            pool = JobWorkerPool(self.queue, {k: bind(k) for k in HANDLERS},
                                 queues=list(QUEUES), threads=self.settings.worker_threads,
                                 batch_handlers={k: bind_batch(k) for k in BATCH_HANDLERS},
                                 batch_sizes={QUEUE_SEMANTIC: SEMANTIC_BATCH_JOBS})
            pool.on_dead(lambda job, error: job_died(self, job.kind, job.payload, error))
            pool.start()
            self._workers = pool

    def stop(self) -> None:
        self._stop_timer.set()
        if self._timer is not None:
            self._timer.join(timeout=5)
        with self._lock:
            if self._workers is not None:
                self._workers.stop()
                self._workers = None
        for closer in self.adapters.closers:
            try:
                closer()
            except Exception:  # closing is best effort at shutdown
                log.exception("error while closing an adapter")

    def wait_for_queues(self, timeout_s: float) -> dict[str, Any]:
        drained = wait_idle(self.queue, timeout_s)
        status: dict[str, Any] = dict(self.scheduler.queue_status())
        if not drained:
            status["timed_out"] = True
        return status

    def readiness(self) -> dict[str, str]:
        checks: dict[str, str] = {}
        for name, probe in (("storage", lambda: self.blobs.head("_health/probe")),
                            ("state", lambda: self.state.get_account("_health")),
                            ("index", lambda: self.index.count("_health")),
                            ("queue", lambda: self.queue.stats("semantic"))):
            try:
                probe()
                checks[name] = "ok"
            except Exception as exc:  # readiness reports, it does not raise
                checks[name] = f"error: {exc}"
        return checks


def build_container(settings: Settings) -> Container:
    """local: data dir + SQLite + embedded index; aws: S3, DynamoDB, SQS, OpenSearch, Bedrock
    from the environment; aws-local: the aws adapters against emulators started here."""
    if settings.backend == "local":
        from skald.adapters.local.factory import build_local_adapters

        return Container(settings, build_local_adapters(settings))
    if settings.backend == "aws-local":
        from skald.adapters.aws.local_stack import LocalAwsStack

        stack = LocalAwsStack(settings)
        container = build_container(stack.start())
        container.local_stack = stack
        container.adapters.closers.append(stack.stop)
        return container
    from skald.adapters.aws.factory import build_aws_adapters

    return Container(settings, build_aws_adapters(settings))
