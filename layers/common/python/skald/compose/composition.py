"""The services of one entry point, each built on first use over its lazily built adapters.

Routers and job handlers reach the services through a Composition (`c.retrieval`,
`c.sessions`, ...). Building one costs nothing: a service is made at its first access and
an adapter at the first call a service makes on it, so a cold start pays only for what the
entry point's first request uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skald import catalog
from skald.compose.business import BusinessServices
from skald.compose.lazy import LazyPorts, service
from skald.domain.access.identity import Identity
from skald.domain.paths.uri import VikingURI
from skald.ports import Metrics

if TYPE_CHECKING:
    from skald.services.audit import AuditTrail
    from skald.services.context.service import ContextService
    from skald.services.fs.browse import BrowseService
    from skald.services.fs.filesystem import VikingFS
    from skald.services.fs.parsing import ParsingService
    from skald.services.ingest.content import ContentService
    from skald.services.ingest.fetch import RemoteSources
    from skald.services.ingest.packs import PackService
    from skald.services.ingest.processing import ProcessingScheduler, QueueStatus
    from skald.services.ingest.resources import ResourceService
    from skald.services.ingest.semantic import SemanticService
    from skald.services.ingest.watches import WatchService
    from skald.services.operations.consistency import ConsistencyService
    from skald.services.operations.index_inspector import IndexInspector
    from skald.services.operations.observer import ObserverService
    from skald.services.operations.stats import StatsService
    from skald.services.retrieval.matching import MatchingService
    from skald.services.retrieval.service import RetrievalService
    from skald.services.sessions.memory import MemoryCommitService
    from skald.services.sessions.recovery import CommitRecovery
    from skald.services.sessions.service import SessionService
    from skald.services.sessions.tool_results import ToolResultService
    from skald.services.skills.search import SkillSearch
    from skald.services.skills.service import SkillService
    from skald.services.tasks import TaskService
    from skald.services.tenancy import JobGate, RootKey, TenantDeletion, TenantPurge
    from skald.services.tenancy.accounts import AccountService

# Files the semantic worker reads and describes at once on a remote store: each costs three
# sequential round trips to S3, so several at once keep a group of small files ready in about
# the time the model takes to embed the group before it. Locally a read takes
# microseconds: one thread, running beside the model, is enough.
REMOTE_READ_WORKERS = 8


def _http_status(code: str) -> int:
    """The status the HTTP edge answers an error code with (for audit records; imported
    when an action first fails, so entry points without the API never load it)."""
    from skald.api.envelope import STATUS_BY_CODE

    return STATUS_BY_CODE.get(code, 500)


class Composition(BusinessServices, LazyPorts):
    """The services of one entry point over its adapters (LazyPorts: settings, flags, the
    adapters as typed properties)."""

    @property
    def auth_mode(self) -> str:
        return "api_key" if self.authorizer_only else self.accounts.auth_mode

    # ---------------------------------------------------------------- services (built on use)

    @service
    def parsing(self) -> ParsingService:
        """Document and media parsing; the parser libraries are imported on first use."""
        from skald.adapters.parsers.library import LibraryParsers
        from skald.services.fs.parsing import ParsingService

        s = self.settings
        return ParsingService(
            self._lazy(catalog.BLOBS),
            LibraryParsers(),
            llm=self.llm,
            vision=s.llm_vision,
            caption_timeout_s=s.llm_timeout_s,
        )

    @service
    def fs(self) -> VikingFS:
        from skald.services.fs.filesystem import VikingFS

        return VikingFS(
            self._lazy(catalog.BLOBS),
            max_write_bytes=self.settings.max_write_bytes,
            text_view=self._text_view,
        )

    def _text_view(self, identity: Identity, uri: VikingURI, data: bytes, raw: bool) -> str:
        # Late-bound: the parsing service is built when a read needs a parsed view, not with
        # every VikingFS.
        return self.parsing.read_view(identity, uri, data, raw)

    @service
    def browse(self) -> BrowseService:
        from skald.services.fs.browse import BrowseService

        return BrowseService(self.fs, self.parsing)

    @service
    def tasks(self) -> TaskService:
        from skald.services.tasks import TaskService

        return TaskService(self._lazy(catalog.STATE))

    @service
    def scheduler(self) -> ProcessingScheduler:
        from skald.services.ingest.forgetting import Forgetting
        from skald.services.ingest.processing import ProcessingScheduler

        # Removed paths leave the index before the removal answers, where the entry point may
        # delete index records (the catalogue's INDEX write); elsewhere (the fetch worker)
        # their semantic job removes them.
        forget = Forgetting(self._lazy(catalog.INDEX)).forget if self._writes_index() else None
        return ProcessingScheduler(self._lazy(catalog.QUEUE), self.tasks, forget=forget)

    def _writes_index(self) -> bool:
        try:
            uses = catalog.function(self.name).uses
        except KeyError:  # `skald serve`: every port
            return True
        return uses.get(catalog.INDEX) in (catalog.WRITE, catalog.ADMIN)

    @service
    def resources(self) -> ResourceService:
        from skald.services.faults import Faults
        from skald.services.ingest.resources import ResourceService

        s = self.settings
        return ResourceService(
            self._lazy(catalog.BLOBS),
            self.fs,
            max_upload_bytes=s.max_upload_bytes,
            max_zip_entries=s.max_zip_entries,
            max_zip_bytes=s.max_zip_bytes,
            faults=Faults.from_spec(s.fault_points),
            quotas=self.quotas,
        )

    @service
    def remote(self) -> RemoteSources:
        """Remote sources: requests queue fetches, the fetch worker runs them."""
        from skald.domain.sources.netguard import FetchLimits
        from skald.services.ingest.fetch import RemoteSources

        s = self.settings

        def fetcher() -> Any:
            from skald.adapters.fetch.network import NetworkFetcher

            return NetworkFetcher()

        limits = FetchLimits(
            timeout_s=s.fetch_timeout_s,
            max_bytes=s.fetch_max_bytes,
            max_files=s.fetch_max_files,
            max_redirects=s.fetch_max_redirects,
            allow_loopback=s.fetch_allow_loopback,
        )
        return RemoteSources(
            self.fs,
            self.resources,
            self.tasks,
            self._lazy(catalog.QUEUE),
            self.scheduler,
            fetcher,
            limits,
        )

    @service
    def watches(self) -> WatchService:
        from skald.services.ingest.watches import WatchService

        return WatchService(
            self._lazy(catalog.BLOBS), lambda: self.remote, audit=self.audit, quotas=self.quotas
        )

    @service
    def content(self) -> ContentService:
        from skald.services.ingest.content import ContentService

        return ContentService(
            self.fs,
            self.resources,
            self.scheduler,
            wait_timeout_s=self.settings.wait_timeout_s,
            remote=lambda: self.remote,
            watches=lambda: self.watches,
            audit=self.audit,
            quotas=self.quotas,
            imports=lambda: self.imports,
        )

    @service
    def skills(self) -> SkillService:
        from skald.services.skills.service import SkillService

        return SkillService(
            self.fs,
            self.resources,
            self.scheduler,
            wait_timeout_s=self.settings.wait_timeout_s,
            audit=self.audit,
            quotas=self.quotas,
        )

    @service
    def skill_search(self) -> SkillSearch:
        from skald.services.skills.search import SkillSearch

        return SkillSearch(self.fs, self.retrieval)

    @service
    def packs(self) -> PackService:
        from skald.domain.sources.packs import PackLimits
        from skald.services.ingest.packs import PackService

        s = self.settings
        return PackService(
            self.fs,
            self.resources,
            self.scheduler,
            limits=PackLimits(
                max_entries=s.max_zip_entries,
                max_total_bytes=s.max_zip_bytes,
                max_file_bytes=s.max_write_bytes,
            ),
            audit=self.audit,
            quotas=self.quotas,
        )

    @service
    def semantic(self) -> SemanticService:
        from skald.services.ingest.semantic import SemanticService
        from skald.services.ingest.semantic_files import SemanticLimits

        s = self.settings
        return SemanticService(
            self.fs,
            self._lazy(catalog.INDEX),
            self._lazy(catalog.EMBEDDER),
            self.llm,
            SemanticLimits(
                s.abstract_max_chars,
                s.overview_max_chars,
                s.section_max_chars,
                read_workers=1 if s.backend == "local" else REMOTE_READ_WORKERS,
            ),
            self.parsing,
        )

    @service
    def sessions(self) -> SessionService:
        from skald.services.faults import Faults
        from skald.services.sessions.service import SessionService

        return SessionService(
            self._lazy(catalog.SESSIONS),
            self.fs,
            self.tasks,
            self._lazy(catalog.QUEUE),
            max_message_bytes=self.settings.max_message_bytes,
            on_removed=self._forget,
            scheduler=self.adapters.optional(catalog.SCHEDULER),
            faults=Faults.from_spec(self.settings.fault_points),
            audit=self.audit,
            quotas=self.quotas,
        )

    @service
    def commit_recovery(self) -> CommitRecovery:
        from skald.services.sessions.recovery import CommitRecovery

        return CommitRecovery(self._lazy(catalog.SESSIONS), self.sessions.committer)

    @service
    def retrieval(self) -> RetrievalService:
        from skald.services.retrieval.service import RetrievalService

        return RetrievalService(
            self.fs,
            self._lazy(catalog.INDEX),
            self._lazy(catalog.EMBEDDER),
            llm=self.llm,
            reranker=self.adapters.optional(catalog.RERANKER),
            recent_messages=self.sessions.recent_texts,
        )

    @service
    def context(self) -> ContextService:
        from skald.services.context.service import ContextService

        # LLM steps of context assembly never wait longer than the configured LLM timeout.
        timeout = self.settings.llm_timeout_s
        return ContextService(
            self.retrieval,
            self.fs,
            self.sessions,
            self._lazy(catalog.RECALL),
            llm=self.llm,
            expansion_timeout_s=min(5.0, timeout),
            rewrite_timeout_s=min(20.0, timeout),
        )

    @service
    def matching(self) -> MatchingService:
        from skald.services.retrieval.matching import MatchingService

        return MatchingService(self.fs)

    @service
    def audit(self) -> AuditTrail:
        """The audit trail; its log is built when the first action is recorded (an entry
        point the catalogue gives no audit port fails loudly there, never silently)."""
        from skald.services.audit import AuditTrail
        from skald.services.faults import Faults

        return AuditTrail(
            self._lazy(catalog.AUDIT),
            retention_days=self.settings.audit_retention_days,
            status_of=_http_status,
            faults=Faults.from_spec(self.settings.fault_points),
        )

    @service
    def accounts(self) -> AccountService:
        from skald.services.tenancy.accounts import AccountService

        allowed = self.adapters.allows
        return AccountService(
            self._lazy(catalog.STATE),
            self._root_key(),
            deletions=lambda: self.tenant_deletion,
            audit=self.audit if allowed(catalog.AUDIT) else None,
            # usage counts, where this entry point reaches those stores
            index=self._lazy(catalog.INDEX) if allowed(catalog.INDEX) else None,
            sessions=self._lazy(catalog.SESSIONS) if allowed(catalog.SESSIONS) else None,
            edge=lambda: self.edge_keys,
        )

    def _root_key(self) -> RootKey | None:
        """Behind an authorizer no key is ever checked here, so no root key is needed.
        A key from a secret is read again after the auth cache bound (a rotated root key)."""
        from skald.services.tenancy.root_key import RootKey

        s = self.settings
        if self.authorizer_only:
            return None
        if s.root_api_key:
            return RootKey.fixed(s.root_api_key)
        if s.root_api_key_secret_arn:
            from skald.adapters.aws.secrets import SecretValue

            secret = SecretValue(s.root_api_key_secret_arn, endpoint_url=s.aws_endpoint_url)
            return RootKey(secret.root_api_key, ttl_s=s.auth_cache_ttl_s)
        return None

    @service
    def tenant_deletion(self) -> TenantDeletion:
        from skald.services.tenancy.deletion import TenantDeletion

        # A purge whose task has not moved for twice the purge worker's timeout lost its job.
        stale = 2.0 * catalog.function("purge").timeout_s
        return TenantDeletion(
            self._lazy(catalog.STATE),
            self.tasks,
            lambda: self.queue,
            self.clock,
            stale_after_s=stale,
        )

    @service
    def tenant_purge(self) -> TenantPurge:
        from skald.services.faults import Faults
        from skald.services.tenancy.purge import PurgeStores, TenantPurge

        stores = PurgeStores(
            state=self._lazy(catalog.STATE),
            blobs=self._lazy(catalog.BLOBS),
            index=self._lazy(catalog.INDEX),
            sessions=self._lazy(catalog.SESSIONS),
            queue=self.queue,
            scheduler=self.adapters.optional(catalog.SCHEDULER),
            remove_watches=lambda a, u: self.watches.remove_owned(a, u),
            remove_uploads=lambda a, u: self.resources.remove_uploads(a, u),
            remove_edge_key=lambda a: self.edge_keys.remove(a),
            remove_usage=self._remove_usage,
        )
        return TenantPurge(stores, self.tasks, faults=Faults.from_spec(self.settings.fault_points))

    def _remove_usage(self, account_id: str) -> int:
        """A removed account's usage: what this process still holds is flushed first, so no
        cell of it is written back after the purge."""
        ledger = self.usage_ledger
        if ledger is None:
            return 0
        flush = getattr(self.meter, "flush", None)
        if flush is not None:
            flush()
        return ledger.purge_account(account_id)

    @service
    def job_gate(self) -> JobGate:
        """Workers drop the jobs of removed tenants."""
        from skald.services.tenancy.gate import JobGate

        return JobGate(lambda: self.state, ttl_s=self.settings.auth_cache_ttl_s)

    @service
    def memory_commit(self) -> MemoryCommitService:
        """Only the memory worker needs the extractor (its rule tables are not worth loading
        anywhere else)."""
        from skald.services.extraction import DeterministicExtractor, Extractor, LLMExtractor
        from skald.services.sessions.memory import MemoryCommitService

        extractor: Extractor = DeterministicExtractor()
        if self.llm is not None:
            extractor = LLMExtractor(self.llm, fallback=extractor)
        return MemoryCommitService(
            self._lazy(catalog.SESSIONS),
            self.sessions,
            self.fs,
            self.semantic,
            self.tasks,
            extractor,
            self.llm,
        )

    # ---------------------------------------------------------------- operations

    @service
    def metrics(self) -> Metrics:
        """Prometheus series in `skald serve` (scraped at /metrics); EMF lines elsewhere."""
        if self.name == "serve":
            from skald.adapters.local.metrics import PrometheusMetrics

            return PrometheusMetrics()
        from skald.adapters.aws.metrics import EmfMetrics

        return EmfMetrics()

    @service
    def observer(self) -> ObserverService:
        from skald.adapters.factory import embedding_dimension, model_names
        from skald.services.operations.observer import ObserverService

        return ObserverService(
            backend=self.settings.backend,
            index_name=self.settings.opensearch_index,
            dimension=embedding_dimension(self.settings),
            queue_status=self.scheduler.queue_status,
            index=self._lazy(catalog.INDEX),
            readiness=self.readiness,
            metrics=self.metrics,
            models=lambda: model_names(self.settings),
        )

    @service
    def stats(self) -> StatsService:
        from skald.services.operations.stats import StatsService

        return StatsService(
            self.fs, self._lazy(catalog.INDEX), self.sessions, self._lazy(catalog.SESSIONS)
        )

    @service
    def tool_results(self) -> ToolResultService:
        from skald.services.sessions.tool_results import ToolResultService

        return ToolResultService(self.sessions, self._lazy(catalog.SESSIONS))

    @service
    def inspector(self) -> IndexInspector:
        from skald.services.operations.index_inspector import IndexInspector

        return IndexInspector(self._lazy(catalog.INDEX))

    @service
    def consistency(self) -> ConsistencyService:
        from skald.services.operations.consistency import ConsistencyService

        return ConsistencyService(self.fs, self._lazy(catalog.INDEX))

    def recover_commits(self, grace_s: float | None = None) -> dict[str, int]:
        """Finishes (or rolls back) half-done commits older than `grace_s` (default: the
        configured grace). `skald serve` runs it with 0 at startup, before the workers."""
        grace = self.settings.commit_recovery_grace_s if grace_s is None else grace_s
        return self.commit_recovery.run(grace_s=grace)

    def _forget(self, identity: Identity, uris: list[str]) -> None:
        """Removed subtrees leave the index at once, their summaries above are refreshed by
        the usual semantic job (ProcessingScheduler.submit)."""
        from skald.services.fs.entries import FsChange

        change = FsChange(identity.account_id, identity.user_id, removed=list(uris))
        self.scheduler.submit(identity, change, task_type="rm", internal=True)

    def wait_for_queues(
        self, timeout_s: float, identity: Identity | None = None
    ) -> tuple[bool, QueueStatus]:
        """(whether every queue drained within `timeout_s`, the queues' counters)."""
        from skald.services.ingest.processing import wait_idle

        # A half-done commit (its memory job not queued yet) is work in flight too.
        idle = wait_idle(
            self.queue,
            timeout_s,
            busy_elsewhere=lambda: bool(self.session_store.stale_commits(None, limit=1)),
        )
        return idle, self.scheduler.queue_status(identity)

    def readiness(self) -> dict[str, str]:
        checks: dict[str, str] = {}
        for name, probe in (
            ("storage", lambda: self.blobs.head(f"{catalog.HEALTH_PREFIX}probe")),
            ("state", lambda: self.state.get_account("_health")),
            ("index", lambda: self.index.count("_health")),
            ("queue", lambda: self.queue.stats(catalog.QUEUE_SEMANTIC)),
        ):
            try:
                probe()
                checks[name] = "ok"
            except Exception as exc:  # readiness reports, it does not raise
                checks[name] = f"error: {exc}"
        return checks
