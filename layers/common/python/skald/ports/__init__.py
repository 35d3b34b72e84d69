"""Ports: the Protocols the services need. Adapters (local, aws) implement them.

Every port has one conformance suite under tests/conformance, parametrised over its adapters.
All keys and rows are partitioned by account: no call crosses accounts. Import the names from
here (`from skald.ports import BlobStore`); each lives in one module:

- accounts.py: AccountStore: accounts, users, hashed API keys, the tombstones of deletions
- audit.py: AuditLog, the append-only audit trail
- blobs.py: BlobStore: file content and sidecars
- edge.py: UsagePlans: each account's API Gateway key, in its tier's usage plan
- index.py: SearchIndex and its records, filters, queries and hits
- jobs.py: JobQueue, its dedup claims, tenant jobs, settle counts, large payloads, and
  per-account counts and running slots (fairness)
- metrics.py: Metrics: requests, jobs and queue depth
- models.py: Embedder, LLM, Reranker, Clock
- recall.py: RecallLedger, the URIs each recent turn of a session recalled
- remote.py: RemoteFetcher: web pages and git repositories
- scheduling.py: Scheduler, one-shot timers
- sessions.py: SessionStore: sessions, messages, archives
- state.py: StateStore (accounts and tasks), TaskStore, Task
- usage.py: Meter (billable units recorded) and UsageLedger (their hourly cells, durably)
"""

from __future__ import annotations

from skald.ports.accounts import (
    Account,
    AccountStore,
    ApiKey,
    Deletion,
    PendingDeletion,
    ResolvedKey,
    User,
)
from skald.ports.audit import AuditLog
from skald.ports.blobs import BlobInfo, BlobListing, BlobNotFound, BlobPreconditionFailed, BlobStore
from skald.ports.edge import UsagePlans
from skald.ports.index import (
    IndexFilter,
    IndexHit,
    IndexQuery,
    IndexRecord,
    IndexUnsupported,
    IndexVectorMismatch,
    SearchIndex,
)
from skald.ports.jobs import (
    AccountJobs,
    AccountSettlement,
    AccountShares,
    DeadLetter,
    DedupClaims,
    Job,
    JobQueue,
    Lease,
    PayloadStore,
    QueueStats,
    SettleCounts,
    TenantJobs,
)
from skald.ports.metrics import Metrics
from skald.ports.models import LLM, ChatMessage, Clock, Embedder, Reranker
from skald.ports.recall import RECALL_LEDGER_MAX_TURNS, RecallLedger
from skald.ports.remote import FetchedPage, RemoteFetcher
from skald.ports.scheduling import Scheduler
from skald.ports.sessions import ArchiveRecord, SessionMessage, SessionRecord, SessionStore
from skald.ports.state import (
    TASK_FINAL,
    StateConflict,
    StateNotFound,
    StateStore,
    Task,
    TaskPage,
    TaskStatus,
    TaskStore,
)
from skald.ports.usage import Meter, UsageLedger

__all__ = [
    "Meter",
    "UsageLedger",
    "LLM",
    "RECALL_LEDGER_MAX_TURNS",
    "TASK_FINAL",
    "Account",
    "AccountJobs",
    "AccountSettlement",
    "AccountShares",
    "AccountStore",
    "ApiKey",
    "ArchiveRecord",
    "AuditLog",
    "BlobInfo",
    "BlobListing",
    "BlobNotFound",
    "BlobPreconditionFailed",
    "BlobStore",
    "ChatMessage",
    "Clock",
    "DeadLetter",
    "DedupClaims",
    "Deletion",
    "Embedder",
    "FetchedPage",
    "IndexFilter",
    "IndexHit",
    "IndexQuery",
    "IndexRecord",
    "IndexUnsupported",
    "IndexVectorMismatch",
    "Job",
    "JobQueue",
    "Lease",
    "Metrics",
    "PayloadStore",
    "PendingDeletion",
    "QueueStats",
    "RecallLedger",
    "RemoteFetcher",
    "Reranker",
    "ResolvedKey",
    "Scheduler",
    "SearchIndex",
    "SessionMessage",
    "SessionRecord",
    "SessionStore",
    "SettleCounts",
    "StateConflict",
    "StateNotFound",
    "StateStore",
    "Task",
    "TaskPage",
    "TaskStatus",
    "TaskStore",
    "TenantJobs",
    "UsagePlans",
    "User",
]
