"""The background workers of the catalogue (skald/catalog.py): each a queue, its job kinds and
the function draining it. Plain data, like the catalogue: infra reads it without importing
the product.

A background worker has one name, used by its queue, its function, its entry file
(functions/workers/<name>.py), its job module (skald/jobs/<name>.py, whose JOBS maps each kind
to its handlers), its CDK construct (<Name>) and its job kinds (<name>.<verb>). A worker is
one `Worker` entry in WORKERS: its queue, its function, the list of every queue and its
settings (SKALD_<NAME>_QUEUE_URL, ...) follow from it (`catalog.derive`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from skald.resource_access import (
    BLOBS,
    COMMIT,
    EDGE,
    EMBEDDER,
    EXTRACT,
    IDEMPOTENCY,
    INDEX,
    LLM,
    PROGRESS,
    PURGE,
    PUT,
    QUEUE,
    SCHEDULER,
    SESSIONS,
    STATE,
    TASKS,
    USE,
    WATCHES_PREFIX,
    WRITE,
    Access,
)

# -- queues and job kinds ----------------------------------------------------------------------

QUEUE_SEMANTIC = "semantic"
QUEUE_MEMORY = "memory"
QUEUE_AUTOCOMMIT = "autocommit"
QUEUE_FETCH = "fetch"
QUEUE_PURGE = "purge"

# Indexes changed files, drops removed ones, refreshes the summaries above them.
JOB_SEMANTIC = "semantic.process"
# Commit phase 2: extracts memories from an archive.
JOB_MEMORY = "memory.extract"
# Commits a session whose idle deadline passed (phase 1: archive, then a memory job).
JOB_AUTO_COMMIT = "autocommit.commit"
# Finishes or rolls back commits left half-done; a rate schedule sends it on AWS.
JOB_RECOVER_COMMITS = "autocommit.recover"
# Fetches a remote source (web page, git repository) into its reserved root.
JOB_FETCH = "fetch.source"
# Writes an uploaded archive too large for a request into its reserved root, resumably.
JOB_IMPORT = "fetch.import"
# Queues the re-fetch of every watch that is due; a rate schedule sends it on AWS (the timer
# of `skald serve` runs the same sweep in process).
JOB_WATCHES_DUE = "fetch.watches_due"
# Removes everything a deleted user or account owned (its payload names the target).
JOB_PURGE = "purge.tenant"
# Re-queues the purges whose job was lost; a rate schedule sends it on AWS (the timer of
# `skald serve` runs the same sweep in process).
JOB_RESUME_PURGES = "purge.resume"

# The kinds of the release before each worker had one name: jobs it queued still carry them
# (SQLite queue rows, SQS messages and dead letters, the rate schedules' envelopes until the
# stack is updated, idle timers already armed). The job runners take each as its new kind.
# Removable once no job of that release can remain (a dead letter lives 14 days).
KIND_ALIASES: dict[str, str] = {
    "session.extract_memories": JOB_MEMORY,
    "session.auto_commit": JOB_AUTO_COMMIT,
    "session.recover_commits": JOB_RECOVER_COMMITS,
    "resource.fetch": JOB_FETCH,
    "resource.watches_due": JOB_WATCHES_DUE,
    "tenant.purge": JOB_PURGE,
    "tenant.resume_purges": JOB_RESUME_PURGES,
}

# -- the workers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobKind:
    kind: str  # "<worker>.<verb>"
    # Dropped, not run, when its account or user is being deleted or gone (workers check);
    # the purge itself works on a tombstoned tenant.
    gated: bool = True

    @property
    def queue(self) -> str:
        """The queue it goes to: its worker's, the kind's first part."""
        return self.kind.partition(".")[0]


@dataclass(frozen=True, eq=False)
class Worker:
    """A background worker: its queue (with a DLQ), its job kinds and the function that
    drains the queue, all under `name`."""

    name: str
    # The queue's name in queue status (GET /api/v1/observer/queue, `ov observer queue`): a
    # wire name, OpenViking's observer label, which clients read; not a name of the worker.
    wire_label: str
    description: str  # the function's
    uses: dict[str, Access]  # the function's resources, at the narrowest level
    jobs: tuple[JobKind, ...]
    sends: tuple[str, ...] = ()  # queues its jobs enqueue on
    # queues whose dead letters of a removed tenant it deletes (with their stored payloads)
    sweeps: tuple[str, ...] = ()
    system_blobs: dict[str, Access] = field(default_factory=dict)  # as catalog.Function's
    internet: bool = False  # as catalog.Function's
    # -- its queue
    # EventBridge Scheduler targets it by ARN (SKALD_<NAME>_QUEUE_ARN): the idle timers
    scheduled: bool = False
    default_kind: str | None = None  # kind of a message without attributes (Scheduler's)
    batch_size: int = 10  # SQS records per worker invocation
    local_batch: int = 1  # jobs leased together by `skald serve`'s worker threads
    max_receive_count: int = 5  # redrive to the DLQ after this many receives
    # Its jobs carry a dedup key: a sender claims it in the state table (and releases it when
    # the send fails), the worker releases it when the job starts.
    dedup: bool = False
    # Its payloads may exceed one SQS message (a semantic job lists every file it processes):
    # those go to the bucket under `_jobs/<queue>/` (skald.adapters.aws.sqs.payloads). Its
    # senders may put objects there, its worker read and delete them.
    large_payloads: bool = False
    retention_days: int = 4
    dlq_retention_days: int = 14

    @property
    def worker(self) -> str:
        """The function that drains its queue: itself."""
        return self.name

    @property
    def construct_id(self) -> str:
        return self.name.capitalize()

    @property
    def url_env(self) -> str:
        return f"SKALD_{self.name.upper()}_QUEUE_URL"

    @property
    def dlq_url_env(self) -> str:
        return f"SKALD_{self.name.upper()}_DLQ_URL"

    @property
    def arn_env(self) -> str | None:
        return f"SKALD_{self.name.upper()}_QUEUE_ARN" if self.scheduled else None


# A worker's queue is described by its worker entry: one per worker.
Queue = Worker

# observes / inspects / sweeps: every worker's queue (FUNCTIONS spells them out)
EVERY_QUEUE = ("*",)

WORKERS = (
    # L0/L1 summaries call the LLM once per directory level, then embed: minutes, not seconds.
    # It writes sidecars and parsed views and never deletes a blob. A job running short of
    # time queues the rest of its work on its own queue (a folder larger than one invocation).
    # Semantic jobs waiting together (a burst of writes) share their parent directories'
    # summaries and embeddings when leased as one batch.
    Worker(
        QUEUE_SEMANTIC,
        "Semantic",
        "Skald worker: semantic queue (summaries and index)",
        uses={
            BLOBS: PUT,
            STATE: PROGRESS,
            QUEUE: USE,
            INDEX: WRITE,
            EMBEDDER: USE,
            LLM: USE,
            IDEMPOTENCY: USE,
        },
        jobs=(JobKind(JOB_SEMANTIC),),
        sends=(QUEUE_SEMANTIC,),
        local_batch=16,
        large_payloads=True,
    ),
    # One extraction job per archive. Extraction may retry the LLM up to four times on
    # unparsable output. It indexes what it writes itself (no semantic job), and deletes an
    # archive's failure note once it succeeds.
    Worker(
        QUEUE_MEMORY,
        "SessionCommit",
        "Skald worker: memory queue (memory extraction)",
        uses={
            BLOBS: WRITE,
            STATE: PROGRESS,
            SESSIONS: EXTRACT,
            QUEUE: USE,
            INDEX: WRITE,
            EMBEDDER: USE,
            LLM: USE,
            IDEMPOTENCY: USE,
        },
        jobs=(JobKind(JOB_MEMORY),),
        dedup=True,
    ),
    # Phase 1 of a commit only: archive + enqueue the extraction job; and the sweep of
    # half-done commits. EventBridge Scheduler delivers idle timers here and cannot set
    # message attributes; the idle sweep of `skald serve` enqueues one job per session.
    Worker(
        QUEUE_AUTOCOMMIT,
        "AutoCommit",
        "Skald worker: autocommit queue (idle sessions)",
        uses={BLOBS: PUT, STATE: TASKS, SESSIONS: COMMIT, QUEUE: USE, IDEMPOTENCY: USE},
        jobs=(JobKind(JOB_AUTO_COMMIT), JobKind(JOB_RECOVER_COMMITS)),
        sends=(QUEUE_MEMORY,),
        scheduled=True,
        default_kind=JOB_AUTO_COMMIT,
        dedup=True,
    ),
    # Fetches remote sources (the only function that reaches the internet: in a customer VPC
    # its subnets need a NAT route), writes their files and queues their processing; it
    # removes a failed fetch's reserved root and a watched source's removed files. The watch
    # sweep (a rate schedule) creates each due watch's task and queues its fetch. One remote
    # source per job: a fetch holds its files in memory until they are written. A fetch that
    # failed for a stated cause ends its task at once; only crashes retry. It also imports
    # uploaded archives too large for a request (services/ingest/imports.py): the upload in
    # hand, a chunk of files at a time, checkpointed in the task; short of time, a job queues
    # its continuation on its own queue.
    Worker(
        QUEUE_FETCH,
        "Fetch",
        "Skald worker: fetch queue (web pages, git repositories)",
        uses={BLOBS: WRITE, STATE: TASKS, QUEUE: USE, IDEMPOTENCY: USE},
        jobs=(JobKind(JOB_FETCH), JobKind(JOB_WATCHES_DUE), JobKind(JOB_IMPORT)),
        sends=(QUEUE_SEMANTIC, QUEUE_FETCH),
        system_blobs={WATCHES_PREFIX: PUT},
        internet=True,
        batch_size=1,
    ),
    # Removes what a deleted user or account owned, in every store: every version of its
    # objects, its index records, sessions (and their idle timers), tasks, dead letters, then
    # its row. A purge short of time queues its own continuation; the purge sweep (a rate
    # schedule) re-queues a purge whose job was lost. It works in the removed account's
    # scope: a purge cannot reach another account's objects or items. One purge per job, each
    # resumable: a crash or a timeout re-runs it from its start (its steps find what they
    # removed already gone). Deduplicated on the purge's task.
    Worker(
        QUEUE_PURGE,
        "Purge",
        "Skald worker: purge queue (removed users and accounts)",
        uses={
            BLOBS: PURGE,
            STATE: PURGE,
            SESSIONS: PURGE,
            QUEUE: USE,
            INDEX: WRITE,
            SCHEDULER: PURGE,
            IDEMPOTENCY: USE,
            # a removed account's key leaves its usage plan and is deleted
            EDGE: PURGE,
        },
        jobs=(JobKind(JOB_PURGE, gated=False), JobKind(JOB_RESUME_PURGES, gated=False)),
        sends=(QUEUE_PURGE,),
        sweeps=EVERY_QUEUE,
        system_blobs={WATCHES_PREFIX: PURGE},
        batch_size=1,
        dedup=True,
    ),
)
