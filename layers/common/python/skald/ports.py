"""Ports: the Protocols the services need. Adapters (local, aws) implement them.

Every port has one conformance suite under tests/conformance, parametrised over its adapters.
All keys and rows are partitioned by account: no call crosses accounts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from skald.domain.netguard import FetchLimits
from skald.ports_accounts import Account as Account
from skald.ports_accounts import AccountStore as AccountStore
from skald.ports_accounts import ApiKey as ApiKey
from skald.ports_accounts import Deletion as Deletion
from skald.ports_accounts import PendingDeletion as PendingDeletion
from skald.ports_accounts import ResolvedKey as ResolvedKey
from skald.ports_accounts import User as User
from skald.ports_audit import AuditLog as AuditLog
from skald.ports_blobs import BlobInfo as BlobInfo
from skald.ports_blobs import BlobListing as BlobListing
from skald.ports_blobs import BlobNotFound as BlobNotFound
from skald.ports_blobs import BlobPreconditionFailed as BlobPreconditionFailed
from skald.ports_blobs import BlobStore as BlobStore
from skald.ports_metrics import Metrics as Metrics
from skald.ports_sessions import ArchiveRecord as ArchiveRecord
from skald.ports_sessions import SessionMessage as SessionMessage
from skald.ports_sessions import SessionRecord as SessionRecord
from skald.ports_sessions import SessionStore as SessionStore

# --------------------------------------------------------------------------------------------
# State: accounts, users and hashed keys (ports_accounts.py, imported above), tasks.


class StateConflict(Exception):
    """A conditional state write failed (already exists, or a version changed)."""


class StateNotFound(KeyError):
    """The row does not exist."""


@dataclass
class Task:
    task_id: str
    task_type: str  # add_resource | write | session_commit | reindex | rm | mv ...
    status: str  # pending | running | cancelling | completed | failed | cancelled
    account_id: str
    user_id: str
    created_at: float
    updated_at: float
    resource_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    stage: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    internal: bool = False


@dataclass(frozen=True)
class TaskPage:
    items: list[Task]
    next_cursor: str | None


@runtime_checkable
class TaskStore(Protocol):
    def create_task(self, task: Task) -> None: ...

    def get_task(self, task_id: str) -> Task | None: ...

    def update_task(self, task_id: str, **changes: Any) -> Task:
        """Sets the given fields and `updated_at`; raises StateNotFound."""
        ...

    def list_tasks(
        self,
        account_id: str,
        *,
        user_id: str | None = None,
        task_type: str | None = None,
        status: str | None = None,
        resource_id: str | None = None,
        include_internal: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> TaskPage:
        """Newest first."""
        ...

    def delete_tasks(self, account_id: str, *, user_id: str | None = None,
                     limit: int = 500) -> int:
        """Deletes up to `limit` tasks of the account (of one user when `user_id` is set);
        returns how many went (0: none left)."""
        ...


@runtime_checkable
class StateStore(AccountStore, TaskStore, Protocol):
    """Everything that must be transactional."""


# --------------------------------------------------------------------------------------------
# Jobs: durable background work (semantic processing, memory extraction, auto-commit).


@dataclass(frozen=True)
class Job:
    job_id: str
    queue: str
    kind: str
    payload: dict[str, Any]
    attempts: int  # deliveries so far, including this one
    dedup_key: str | None = None


@dataclass(frozen=True)
class Lease:
    job: Job
    receipt: str  # proves the lease; a stale receipt cannot ack or nack


@dataclass(frozen=True)
class QueueStats:
    pending: int  # waiting, including delayed retries
    inflight: int  # leased, not yet acked
    processed: int  # acked
    failed_attempts: int  # nacks
    dead: int  # dead-lettered


@dataclass(frozen=True)
class DeadLetter:
    job: Job
    error: str
    failed_at: float


@runtime_checkable
class JobQueue(Protocol):
    def enqueue(self, queue: str, kind: str, payload: dict[str, Any], *,
                dedup_key: str | None = None, delay_s: float = 0.0) -> str:
        """Returns the job id. A pending job with the same (queue, dedup_key) is not duplicated:
        its id is returned instead."""
        ...

    def lease(self, queue: str, *, max_jobs: int = 1, visibility_s: float = 60.0) -> list[Lease]:
        """Takes up to `max_jobs` visible jobs; they reappear after `visibility_s` unless acked."""
        ...

    def ack(self, lease: Lease) -> bool:
        """Done. False when the receipt is stale (the lease expired and the job moved on)."""
        ...

    def nack(self, lease: Lease, error: str) -> None:
        """Failed: retried with backoff, dead-lettered after the queue's max attempts."""
        ...

    def extend(self, lease: Lease, visibility_s: float) -> bool: ...

    def stats(self, queue: str) -> QueueStats: ...

    def depth(self, queue: str) -> int:
        """Jobs not done yet (waiting, delayed or in flight), cheaply: what back-pressure
        watches. An approximation on SQS (its queue attributes)."""
        ...

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadLetter]: ...


@runtime_checkable
class DedupClaims(Protocol):
    """A queue that holds a job's dedup claim until the job starts (SQS: a FIFO-less queue
    has no dedup of its own). lease() releases it for pulled jobs; a worker that is handed
    jobs (a Lambda event source mapping) calls mark_started itself."""

    def mark_started(self, job: Job) -> None: ...


@runtime_checkable
class TenantJobs(Protocol):
    """A queue that can drop the jobs of a removed account or user that are not running:
    waiting ones and dead letters (an SQS queue reaches its dead-letter queues only; its
    waiting messages are dropped by the workers as they arrive)."""

    def purge_tenant(self, account_id: str, user_id: str | None = None, *,
                     limit: int = 1000) -> int:
        """Removes up to `limit` such jobs (and their stored payloads); returns how many."""
        ...


@runtime_checkable
class SettleCounts(Protocol):
    """A queue whose counts of settled jobs are kept beside it (SQS: in DynamoDB). ack and
    nack count the jobs pulled by lease(); a worker handed its jobs by an event source mapping,
    which deletes or re-delivers each message itself, counts them with `count_settled` before
    the mapping does so: the count moves while the message is still in flight."""

    def count_settled(self, queue: str, outcome: str) -> None:
        """`outcome`: "processed" (done) or "failed_attempts" (failed, to retry or dead)."""
        ...


@runtime_checkable
class PayloadStore(Protocol):
    """A queue that sends large payloads by reference (SQS: over its message size they go to
    S3). A worker handed the raw message body resolves it and says when the job is done."""

    def open_payload(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """The payload itself (`payload` when it is not a reference); None when the stored
        one is gone."""
        ...

    def payload_done(self, payload: dict[str, Any]) -> None:
        """Removes a stored payload (best effort)."""
        ...


# --------------------------------------------------------------------------------------------
# Models.


@runtime_checkable
class Embedder(Protocol):
    @property
    def dimension(self) -> int: ...

    @property
    def model_id(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """L2-normalised vectors, one per text."""
        ...


@dataclass(frozen=True)
class ChatMessage:
    role: str  # system | user | assistant
    content: str
    # (format, bytes) of images for a vision-capable model; format: png | jpeg | gif | webp
    images: tuple[tuple[str, bytes], ...] = ()


@runtime_checkable
class LLM(Protocol):
    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        json_schema: dict[str, Any] | None = None,
        max_tokens: int = 1024,
        timeout_s: float = 30.0,
    ) -> str:
        """The assistant's text. With `json_schema`, a JSON document conforming to it.
        `timeout_s` bounds the whole call, the adapter's retries included."""
        ...


@runtime_checkable
class Reranker(Protocol):
    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """A relevance score per document, same order."""
        ...


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float: ...


# --------------------------------------------------------------------------------------------
# Search index: derived, rebuildable records (one per uri, level and section).


@dataclass
class IndexRecord:
    account: str
    uri: str  # canonical viking:// URI the hit resolves to (a file, or a .abstract.md/.overview.md)
    level: int  # 0 = L0 abstract, 1 = L1 overview, 2 = file
    context_type: str  # memory | resource | skill
    parent: str  # URI of the containing directory
    ancestors: list[str]  # every directory URI above `uri`, "viking://resources" included
    text: str  # what BM25 indexes
    abstract: str = ""  # short summary returned with hits
    vector: list[float] | None = None
    section: int = 0  # 0 = the whole file; n > 0 = n-th heading-aware section of a long file
    line_start: int | None = None  # 1-based line span of the section in the file
    line_end: int | None = None
    tags: list[str] = field(default_factory=list)  # "k=v"
    memory_type: str | None = None
    owner: str | None = None  # user id owning a user-space record
    peer: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass
class IndexFilter:
    """Applied before ranking: a filter never empties a top-k that other records could fill."""

    scopes: list[str] = field(default_factory=list)  # URI prefixes: the URI itself or any ancestor
    exclude_scopes: list[str] = field(default_factory=list)
    context_types: list[str] | None = None
    levels: list[int] | None = None
    tags_all: list[str] = field(default_factory=list)  # every tag must be present
    time_field: str = "updated_at"  # or "created_at"
    since: float | None = None
    until: float | None = None
    # Metadata filter tree: {"op":"and"|"or","conds":[...]} or
    # {"op":"must"|"must_not","field":F,"conds":[values]} or
    # {"op":"range","field":F,"gte"|"gt"|"lte"|"lt":v} or {"op":"prefix","field":F,"prefix":p}.
    # Fields: uri, parent, context_type, level, memory_type, owner, peer, tags, created_at,
    # updated_at.
    tree: dict[str, Any] | None = None


@dataclass
class IndexQuery:
    account: str
    # "dense" | "lexical" | "hybrid", or "recent": every record passing the filter, newest
    # first by the filter's time_field, ties by (uri, level, section), each scored 0.
    mode: str
    limit: int
    vector: list[float] | None = None  # required for dense / hybrid
    text: str | None = None  # required for lexical / hybrid
    filter: IndexFilter = field(default_factory=IndexFilter)
    score_threshold: float | None = None
    # Instead of `vector`: a vector still being computed (the query's embedding, running in
    # another thread). An adapter that can start with the keyword side of a hybrid search
    # asks for it only then, so both overlap.
    vector_source: Callable[[], list[float]] | None = None

    def dense_vector(self) -> list[float] | None:
        """`vector`, or what `vector_source` gives (asked once)."""
        if self.vector is None and self.vector_source is not None:
            self.vector = self.vector_source()
            self.vector_source = None
        return self.vector


@dataclass
class IndexHit:
    record: IndexRecord
    # dense: cosine; lexical: bm25/(bm25+1) in [0, 1); hybrid: normalised RRF in (0, 1]
    score: float
    dense_score: float | None = None
    lexical_score: float | None = None


class IndexUnsupported(Exception):
    """The backend cannot run this kind of query (e.g. k-NN on an engine without it)."""


class IndexVectorMismatch(ValueError):
    """A vector's size is not the index's: the embedder and the index were set up for
    different models. A deployment's mistake, not the caller's: reindex, or configure the
    model the index was built with."""


@runtime_checkable
class SearchIndex(Protocol):
    def upsert(self, records: Sequence[IndexRecord]) -> None:
        """Insert or replace by (account, uri, level, section)."""
        ...

    def delete_uris(self, account: str, uris: Sequence[str]) -> int:
        """Removes every level and section of each URI; returns how many records went. Once
        it returns, no search finds them (read your deletes: a removal answers after it;
        OpenSearch Serverless, which has no refresh control, excepted)."""
        ...

    def delete_prefix(self, account: str, prefix: str) -> int:
        """Removes the records at `prefix` and below it; returns how many went. Searches stop
        finding them before it returns, as with `delete_uris`."""
        ...

    def replace_sections(self, account: str, uri: str, level: int,
                         records: Sequence[IndexRecord]) -> None:
        """Atomically replaces every section record of (uri, level) by `records`."""
        ...

    def replace_many(self, account: str,
                     sets: Mapping[tuple[str, int], Sequence[IndexRecord]]) -> None:
        """`replace_sections` for every (uri, level) of `sets`, in one write (atomic where
        the backend is): a batch of files costs one transaction or bulk request, not one
        per file."""
        ...

    def get(self, account: str, uri: str) -> list[IndexRecord]: ...

    def head(self, account: str, uri: str) -> IndexRecord | None:
        """The first record of `uri` (lowest level, then section), without its vector; None
        when it has none. What a reader of one field of a file (its abstract) asks for: a
        large document has thousands of sections."""
        ...

    def heads(self, account: str, uris: Sequence[str]) -> dict[str, IndexRecord]:
        """`head` of each URI in one call (one request to a remote engine: a directory's
        refresh asks for every listed file's abstract); URIs with no record are left out."""
        ...

    def get_many(self, account: str, uris: Sequence[str]) -> dict[str, list[IndexRecord]]:
        """`get` of each URI in one call (one request to a remote engine for a few URIs);
        every URI asked for is a key, with [] when it has no record. Vectors included: meant
        for URIs with few records (a directory's sidecars), not for large documents."""
        ...

    def search(self, query: IndexQuery) -> list[IndexHit]:
        """Best first. Raises MalformedFilter (skald.domain.index_filter) for a filter it
        cannot apply, IndexVectorMismatch for a query vector of another size than the
        index's and IndexUnsupported for a mode the backend lacks."""
        ...

    def count(self, account: str, flt: IndexFilter | None = None) -> int: ...

    def scroll(self, account: str, flt: IndexFilter | None = None, *, limit: int = 100,
               cursor: str | None = None) -> tuple[list[IndexRecord], str | None]:
        """One page of the records `flt` matches, in a stable order, without their vectors;
        the second value is the cursor of the next page (None on the last one). Raises
        ValueError for a cursor this index did not hand out or a limit below 1."""
        ...


# --------------------------------------------------------------------------------------------
# Sessions (SessionRecord, SessionMessage, ArchiveRecord, SessionStore): ports_sessions.py,
# imported above.


# --------------------------------------------------------------------------------------------
# One-shot timers (idle auto-commit). Locally the deadlines live in the session rows and an
# in-process timer polls them; on AWS each is an EventBridge Scheduler one-shot schedule.


@runtime_checkable
class Scheduler(Protocol):
    def schedule_once(self, name: str, at: float, payload: dict[str, Any]) -> None:
        """Creates or moves the one-shot timer `name` to fire at epoch `at` with `payload`
        (delivered to the auto-commit queue)."""
        ...

    def cancel(self, name: str) -> bool:
        """False when no such timer exists."""
        ...


# --------------------------------------------------------------------------------------------
# Recall ledger: which URIs context assembly returned in each recent turn of a session, so the
# next turns can leave them out (`dedup_turns`). Locally a JSON blob in the session directory;
# on AWS a DynamoDB item.

RECALL_LEDGER_MAX_TURNS = 100  # history kept per session; older turns are forgotten


@runtime_checkable
class RecallLedger(Protocol):
    def recent(self, account: str, user: str, session_id: str, turns: int) -> list[set[str]]:
        """The URIs of each of the last `turns` recorded turns, newest first (fewer when the
        session has fewer; empty for an unknown session)."""
        ...

    def record(self, account: str, user: str, session_id: str, uris: Sequence[str],
               now: float) -> int:
        """Appends one turn with `uris` (possibly none) and returns its number: 1 for the
        first turn of the session, then strictly increasing, also under concurrent writers.
        Only the newest RECALL_LEDGER_MAX_TURNS turns are kept."""
        ...


# --------------------------------------------------------------------------------------------
# Remote sources: web pages and git repositories, fetched by the fetch worker under the
# address rules of domain/netguard (every address resolved and checked, every redirect too).


@dataclass(frozen=True)
class FetchedPage:
    url: str            # after redirects
    content_type: str   # the media type, lowercase, without parameters
    data: bytes


@runtime_checkable
class RemoteFetcher(Protocol):
    def get(self, url: str, limits: FetchLimits) -> FetchedPage:
        """One http(s) resource. Raises FetchFailed naming the cause."""
        ...

    def clone(self, url: str, ref: str | None, limits: FetchLimits) -> list[tuple[str, bytes]]:
        """The files of a git repository's `ref` (default branch when None) as (relative
        path, bytes), without the repository's metadata or links. Raises FetchFailed."""
        ...
