"""The catalogue of Skald's deployable parts: workers (each a queue, its job kinds and the
function draining it), the other functions, and the resources they use.

One table read by the code and by `infra/` alike: the job registry and the local worker pool
(which worker's job module runs which kind, batch sizes), the settings (each queue's
variables), the compositions (which adapters an entry point may build), aws-local (which
queues exist, which worker drains each) and the CDK app (which functions exist, their
handlers, the API paths each one serves, the environment each one gets and the grants it
needs; memory and timeouts are skald/sizes.py's). Nothing here imports from skald but those
sizes: it is plain data, so infra can read it without importing the product.

A function `uses` resources, each with an access level; a resource is an adapter port
(`blobs`, `index`, ...) or a deploy-time resource the function reads directly (`root_key`,
`idempotency`). The access level says what the function does there, as narrowly as the
code paths of that function allow (LEVELS): its grants follow from them and from the queues it
sends to, drains and observes; its environment follows from what it uses (`environment`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from skald.sizes import SIZES, UNMEASURED, Size

# -- resources and access levels ---------------------------------------------------------------

BLOBS = "blobs"  # BlobStore (S3 / data dir)
STATE = "state"  # StateStore: accounts, users, keys, tasks
SESSIONS = "sessions"  # SessionStore: sessions, messages, archives
RECALL = "recall"  # RecallLedger: what context mode recalled per session
QUEUE = "queue"  # JobQueue (SQS / SQLite)
INDEX = "index"  # SearchIndex (OpenSearch / embedded)
EMBEDDER = "embedder"
LLM = "llm"
RERANKER = "reranker"
SCHEDULER = "scheduler"  # one-shot idle timers (EventBridge Scheduler)
ROOT_KEY = "root_key"  # the root API key's secret
IDEMPOTENCY = "idempotency"  # the worker idempotency table
AUDIT = "audit"  # AuditLog: the audit trail of admin and destructive actions

PORTS = (BLOBS, STATE, SESSIONS, RECALL, QUEUE, INDEX, EMBEDDER, LLM, RERANKER, SCHEDULER, AUDIT)
OPTIONAL_PORTS = (LLM, RERANKER, SCHEDULER)  # configured or not: an adapter may be None

READ: Final = "read"
WRITE: Final = "write"
PUT: Final = "put"  # blobs: create and overwrite objects, never delete
KEYS: Final = "keys"  # state: API-key lookups and their last use only
TASKS: Final = "tasks"  # state: create tasks and move them on; no accounts, no listing
PROGRESS: Final = "progress"  # state: move on the tasks of the jobs it runs
COMMIT: Final = "commit"  # sessions: commit phase 1 (reserve an archive, write its files)
APPEND: Final = "append"  # sessions: create sessions, add messages, commit phase 1
EXTRACT: Final = "extract"  # sessions: commit phase 2 (read an archive, settle its status)
PURGE: Final = "purge"  # removing a user or account: sessions, state rows, tasks and keys
#                             deleted (batches); blobs: every version of a prefix; timers
LIST: Final = "list"  # sessions: list an account's sessions (usage counts)
ACCOUNTS: Final = "accounts"  # state: root's routes naming no account (create one with its
#                               first user and key; list every account with its users)
ADMIN: Final = "admin"  # index: create indexes, aliases, pipelines (deploy-time setup)
CHECK: Final = "check"  # setup: confirm the resource exists, nothing more
USE: Final = "use"  # models, scheduler, queue, secrets: the one way there is to use them

Access = Literal[
    "read",
    "write",
    "put",
    "keys",
    "tasks",
    "progress",
    "commit",
    "append",
    "extract",
    "purge",
    "admin",
    "check",
    "use",
    "list",
    "accounts",
]
# The levels each resource knows, least to most (infra/access.py turns them into IAM actions;
# a table resource's grant is the union over what the function uses, sends and drains).
LEVELS: dict[str, tuple[str, ...]] = {
    BLOBS: (CHECK, READ, PUT, WRITE, PURGE),
    STATE: (CHECK, KEYS, PROGRESS, TASKS, ACCOUNTS, WRITE, PURGE),
    SESSIONS: (CHECK, LIST, READ, EXTRACT, COMMIT, APPEND, PURGE, WRITE),
    RECALL: (WRITE,),
    QUEUE: (CHECK, USE),
    INDEX: (READ, WRITE, ADMIN),
    SCHEDULER: (USE, PURGE),
    # audit: write = record actions (a pending record, then its outcome); read = that, and
    # list the records (the console's audit route: its function records actions too).
    AUDIT: (WRITE, READ),
    **{r: (USE,) for r in (EMBEDDER, LLM, RERANKER, ROOT_KEY, IDEMPOTENCY)},
}
Kind = Literal["http", "authorizer", "worker", "setup"]

# -- workers: queues and job kinds -------------------------------------------------------------
# A background worker has one name, used by its queue, its function, its entry file
# (functions/workers/<name>.py), its job module (skald/jobs/<name>.py, whose JOBS maps each kind
# to its handlers), its CDK construct (<Name>) and its job kinds (<name>.<verb>). A worker is
# one `Worker` entry in WORKERS: its queue, its function, the list of every queue and its
# settings (SKALD_<NAME>_QUEUE_URL, ...) follow from it.

# Where the payloads too large for one SQS message go in the bucket (`_jobs/<queue>/<job id>
# .json`; account ids never start with `_`), and how long a leftover one lives: longer than
# any queue's retention (14 days at most), so a dead letter can still be redriven.
JOB_PAYLOAD_PREFIX = "_jobs/"
JOB_PAYLOAD_EXPIRY_DAYS = 15
# Other system objects of the bucket: the watches (one JSON object each) and the key the
# readiness probe reads (never written).
WATCHES_PREFIX = "_watches/"
HEALTH_PREFIX = "_health/"

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
    system_blobs: dict[str, Access] = field(default_factory=dict)  # as Function's
    internet: bool = False  # as Function's
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
    # failed for a stated cause ends its task at once; only crashes retry.
    Worker(
        QUEUE_FETCH,
        "Fetch",
        "Skald worker: fetch queue (web pages, git repositories)",
        uses={BLOBS: WRITE, STATE: TASKS, QUEUE: USE, IDEMPOTENCY: USE},
        jobs=(JobKind(JOB_FETCH), JobKind(JOB_WATCHES_DUE)),
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
        },
        jobs=(JobKind(JOB_PURGE, gated=False), JobKind(JOB_RESUME_PURGES, gated=False)),
        sends=(QUEUE_PURGE,),
        sweeps=EVERY_QUEUE,
        system_blobs={WATCHES_PREFIX: PURGE},
        batch_size=1,
        dedup=True,
    ),
)

# -- functions ---------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Function:
    name: str
    kind: Kind
    construct_id: str
    code: str  # folder under functions/ (and build/functions/)
    handler: str  # Lambda handler, "module.attribute" inside `code`
    description: str
    uses: dict[str, Access]
    routers: tuple[str, ...] = ()  # http: the routers its app mounts
    # http: the API Gateway resources routed to it, any method, behind the authorizer
    # (`{proxy+}`: every path below)
    routes: tuple[str, ...] = ()
    # http: GET without the authorizer (the probes, the console's static files; `{proxy+}`:
    # every path below)
    public_paths: tuple[str, ...] = ()
    queue: str | None = None  # worker: the queue it drains
    sends: tuple[str, ...] = ()  # queues it enqueues jobs on
    observes: tuple[str, ...] = ()  # queues whose depth it reports (status, readiness)
    # queues whose dead letters it counts and peeks (queue status, the console's DLQ view)
    inspects: tuple[str, ...] = ()
    # queues whose dead letters of a removed tenant it deletes (with their stored payloads)
    sweeps: tuple[str, ...] = ()
    env: tuple[str, ...] = ()  # variables beyond what `uses` implies
    # Data-plane functions (tenant_scoped) reach an account's data with credentials scoped to
    # that account. `unscoped`: the account data it reaches with its own role instead, outside
    # any account's scope (root's admin routes act on the account they name), on every
    # account. `system_blobs`: the bucket's system objects (prefix -> a BLOBS level; CHECK
    # heads a key that is never written) it reaches with its own role (job payloads follow
    # from the queues).
    unscoped: dict[str, Access] = field(default_factory=dict)
    system_blobs: dict[str, Access] = field(default_factory=dict)
    # It reaches the internet (remote sources): in a customer VPC its subnets need a NAT
    # route; a VPC the stack creates is isolated, so there it runs outside the VPC.
    internet: bool = False

    @property
    def size(self) -> Size:
        return SIZES.get(self.name, UNMEASURED)

    @property
    def memory_mb(self) -> int:
        return self.size.memory_mb

    @property
    def timeout_s(self) -> int:
        return self.size.timeout_s

    @property
    def sizing(self) -> str:
        """The measurement memory_mb and timeout_s come from."""
        return self.size.sizing

    @property
    def ports(self) -> frozenset[str]:
        """The adapter ports its composition may build."""
        return frozenset(r for r in self.uses if r in PORTS)


_MODELS: dict[str, Access] = {EMBEDDER: USE, LLM: USE, RERANKER: USE}

_API = (
    Function(
        "content",
        "http",
        "Content",
        "content",
        "handler.handler",
        "Skald API: fs, content, resources, skills, tasks, system, admin",
        # Sessions to list an account's (usage) and to read one's messages (stats); the
        # index to count, page through (debug views, the consistency check), drop a removed
        # path's records (before rm, mv or a pack answers) and to report readiness (the
        # semantic worker writes the rest; the purge worker removes an account's). It also
        # serves the observer, debug and stats routes. It records the admin and destructive
        # actions it serves and lists the records.
        uses={BLOBS: WRITE, STATE: WRITE, SESSIONS: LIST, QUEUE: USE, INDEX: WRITE, AUDIT: READ},
        # The console's page and assets are public (a browser cannot send a key when it
        # loads a page; they are the same static files for everyone): every data call the
        # page makes carries the key and goes through the authorizer.
        routers=(
            "system",
            "fs",
            "content",
            "resources",
            "skills",
            "tasks",
            "watches",
            "admin",
            "console",
            "packs",
        ),
        # The skills paths are named: API Gateway does not fall back from the search
        # function's /api/v1/skills/find resource to the /api/v1/{proxy+} above it.
        routes=("/api/v1/{proxy+}", "/api/v1/skills", "/api/v1/skills/{proxy+}"),
        public_paths=("/health", "/ready", "/", "/console", "/console/{proxy+}"),
        # Removing a user or an account queues its purge.
        sends=(QUEUE_SEMANTIC, QUEUE_FETCH, QUEUE_PURGE),
        observes=EVERY_QUEUE,
        inspects=EVERY_QUEUE,
        # Root's admin routes outside any account: creating an account (its row, its first
        # user and key) and listing them all (with their users).
        unscoped={STATE: ACCOUNTS},
        system_blobs={WATCHES_PREFIX: WRITE, HEALTH_PREFIX: CHECK},
    ),
    Function(
        "search",
        "http",
        "Search",
        "search",
        "handler.handler",
        "Skald API: find, search, grep, glob, skills/find",
        # Reads only, except the recall ledger of context mode (one item per session).
        uses={BLOBS: READ, SESSIONS: READ, RECALL: WRITE, INDEX: READ, **_MODELS},
        routers=("search", "skill_search"),
        routes=("/api/v1/search/{proxy+}", "/api/v1/skills/find"),
    ),
    Function(
        "sessions",
        "http",
        "Sessions",
        "sessions",
        "handler.handler",
        "Skald API: sessions",
        # The index: a deleted session's records go before the delete answers (the summaries
        # above it are refreshed by a semantic job). Back-pressure (429 when too many jobs
        # wait) reads the depth of the queues it feeds. Deleting a session is recorded in the
        # audit trail.
        uses={
            BLOBS: WRITE,
            STATE: TASKS,
            SESSIONS: WRITE,
            QUEUE: USE,
            SCHEDULER: USE,
            INDEX: WRITE,
            AUDIT: WRITE,
        },
        routers=("sessions",),
        routes=("/api/v1/sessions", "/api/v1/sessions/{proxy+}"),
        sends=(QUEUE_SEMANTIC, QUEUE_MEMORY),
        observes=(QUEUE_SEMANTIC, QUEUE_MEMORY),
    ),
    # MCP (streamable HTTP, stateless JSON) for agents: its tools search, browse, write
    # through the content service (the semantic worker indexes; forget drops the removed
    # path's records itself, before it answers), and remember (add messages, commit); health
    # reports readiness.
    Function(
        "mcp",
        "http",
        "Mcp",
        "mcp",
        "handler.handler",
        "Skald MCP endpoint: agent tools (find, search, read, write, remember, ...)",
        # `forget` (an rm) is recorded in the audit trail.
        uses={
            BLOBS: WRITE,
            STATE: TASKS,
            SESSIONS: APPEND,
            QUEUE: USE,
            SCHEDULER: USE,
            INDEX: WRITE,
            AUDIT: WRITE,
            **_MODELS,
        },
        routers=("mcp",),
        routes=("/mcp",),
        sends=(QUEUE_SEMANTIC, QUEUE_MEMORY, QUEUE_FETCH),
        observes=(QUEUE_SEMANTIC,),
        system_blobs={HEALTH_PREFIX: CHECK},
    ),
    Function(
        "authorizer",
        "authorizer",
        "Authorizer",
        "authorizer",
        "handler.handler",
        "Skald API key authorizer",
        uses={STATE: KEYS, ROOT_KEY: USE},
    ),
)
# Deploy-time: creates the search index behind its alias and checks the rest exists.
# Copying a changed index (_reindex) is the long part: the whole Lambda budget.
_SETUP = Function(
    "setup",
    "setup",
    "Setup",
    "setup",
    "handler.handler",
    "Skald setup: search index, alias and pipeline; checks tables and queues",
    uses={INDEX: ADMIN, BLOBS: CHECK, STATE: CHECK, SESSIONS: CHECK, QUEUE: CHECK},
    env=("SKALD_SETUP_WAIT_S",),
)


def worker_function(w: Worker) -> Function:
    """The function of worker `w`: functions/workers/<name>.py, construct <Name>."""
    return Function(
        w.name,
        "worker",
        w.construct_id,
        "workers",
        f"{w.name}.handler",
        w.description,
        uses=w.uses,
        queue=w.name,
        sends=w.sends,
        sweeps=w.sweeps,
        system_blobs=w.system_blobs,
        internet=w.internet,
    )


def derive(
    workers: tuple[Worker, ...],
) -> tuple[tuple[Worker, ...], tuple[JobKind, ...], tuple[Function, ...]]:
    """The queues, job kinds and functions of a list of workers (the module's QUEUES, JOBS
    and FUNCTIONS are those of WORKERS; a test derives a view with one worker more)."""
    every = tuple(w.name for w in workers)

    def spelled(fn: Function) -> Function:
        def names(queues: tuple[str, ...]) -> tuple[str, ...]:
            return every if queues == EVERY_QUEUE else queues

        return replace(
            fn, observes=names(fn.observes), inspects=names(fn.inspects), sweeps=names(fn.sweeps)
        )

    functions = (*_API, *(worker_function(w) for w in workers), _SETUP)
    return (
        workers,
        tuple(j for w in workers for j in w.jobs),
        tuple(spelled(fn) for fn in functions),
    )


QUEUES, JOBS, FUNCTIONS = derive(WORKERS)

# -- environment -------------------------------------------------------------------------------

BASE_ENV = ("SKALD_BACKEND", "POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE")
_TABLE = ("SKALD_STATE_TABLE",)
_EMBEDDING = ("SKALD_EMBEDDING_PROVIDER", "SKALD_EMBEDDING_DIMENSION")
RESOURCE_ENV: dict[str, tuple[str, ...]] = {
    BLOBS: ("SKALD_BUCKET",),
    STATE: _TABLE,
    SESSIONS: _TABLE,
    RECALL: _TABLE,
    # Each queue's URL (resource_env), then: counters and dedup claims live in the state
    # table; the attempts must equal the queues' max_receive_count; payloads too large for a
    # message go to the bucket.
    QUEUE: (*_TABLE, "SKALD_JOB_MAX_ATTEMPTS", "SKALD_BUCKET"),
    # The mapping's vector dimension is the embedder's.
    INDEX: (
        "SKALD_OPENSEARCH_ENDPOINT",
        "SKALD_OPENSEARCH_AUTH",
        "SKALD_OPENSEARCH_INDEX",
        "SKALD_OPENSEARCH_HYBRID_PIPELINE",
        *_EMBEDDING,
    ),
    EMBEDDER: (*_EMBEDDING, "SKALD_BEDROCK_EMBEDDING_MODEL"),
    LLM: ("SKALD_LLM_PROVIDER", "SKALD_BEDROCK_LLM_MODEL"),
    RERANKER: ("SKALD_BEDROCK_RERANK_MODEL",),
    # and the ARN of each queue it targets (resource_env)
    SCHEDULER: ("SKALD_SCHEDULER_GROUP", "SKALD_SCHEDULER_ROLE_ARN"),
    ROOT_KEY: ("SKALD_ROOT_API_KEY_SECRET_ARN",),
    IDEMPOTENCY: ("SKALD_IDEMPOTENCY_TABLE",),
    # Records live in the state table; the retention sets each one's expiry (its TTL).
    AUDIT: (*_TABLE, "SKALD_AUDIT_RETENTION_DAYS"),
}
# The role a data-plane function assumes, per account, for its S3 and account-partitioned
# state-table calls (each function has its own; see tenant_scoped).
TENANT_ROLE_ENV = "SKALD_TENANT_ROLE_ARN"
# Set only when the deployment configures them (an unset one turns its feature off).
OPTIONAL_ENV = frozenset(
    {"SKALD_BEDROCK_RERANK_MODEL", "SKALD_OPENSEARCH_HYBRID_PIPELINE", TENANT_ROLE_ENV}
)


def resource_env(resource: str) -> tuple[str, ...]:
    """The variables a use of `resource` implies: RESOURCE_ENV's, and for the queue port every
    queue's URL, for the scheduler the ARN of each queue it targets (from the workers)."""
    names = RESOURCE_ENV.get(resource, ())
    if resource == QUEUE:
        return (*(q.url_env for q in QUEUES), *names)
    if resource == SCHEDULER:
        return (*names, *(q.arn_env for q in QUEUES if q.arn_env))
    return names


def tenant_scoped(fn: Function) -> bool:
    """Whether `fn` is a data-plane function: it serves requests or runs jobs and reads or
    writes an account's data (blobs, sessions, the recall ledger, accounts and users). Its
    calls on that data, in an account's scope, go with credentials scoped to the account."""
    if fn.kind not in ("http", "worker"):
        return False
    data = any(fn.uses.get(r) not in (None, CHECK) for r in (BLOBS, SESSIONS, RECALL))
    return data or fn.uses.get(STATE) in (WRITE, PURGE)


def environment(fn: Function) -> tuple[str, ...]:
    """Every variable `fn` reads, in a stable order."""
    names = [
        *BASE_ENV,
        *(n for r in fn.uses for n in resource_env(r)),
        *(queue(q).dlq_url_env for q in (*fn.inspects, *fn.sweeps)),
        *fn.env,
        *((TENANT_ROLE_ENV,) if tenant_scoped(fn) else ()),
    ]
    return tuple(dict.fromkeys(names))


# -- lookups -----------------------------------------------------------------------------------


def function(name: str) -> Function:
    for fn in FUNCTIONS:
        if fn.name == name:
            return fn
    raise KeyError(f"no function '{name}' in the catalogue")


def functions(kind: Kind) -> tuple[Function, ...]:
    return tuple(fn for fn in FUNCTIONS if fn.kind == kind)


def queue(name: str) -> Queue:
    for q in QUEUES:
        if q.name == name:
            return q
    raise KeyError(f"no queue '{name}' in the catalogue")


def current_kind(kind: str) -> str:
    """`kind`, or the kind it became (KIND_ALIASES: jobs queued by an earlier release)."""
    return KIND_ALIASES.get(kind, kind)


def job(kind: str) -> JobKind | None:
    kind = current_kind(kind)
    return next((j for j in JOBS if j.kind == kind), None)


def worker(name: str) -> Worker:
    for w in WORKERS:
        if w.name == name:
            return w
    raise KeyError(f"no worker '{name}' in the catalogue")


def jobs_on(queue_name: str) -> tuple[JobKind, ...]:
    return tuple(j for j in JOBS if j.queue == queue_name)


def worker_of(queue_name: str) -> Function:
    return function(queue(queue_name).worker)


def visibility_timeout_s(q: Queue) -> int:
    """Six times the worker's timeout (AWS guidance for Lambda consumers), so throttled
    retries of a batch do not surface its messages again too early."""
    return worker_of(q.name).timeout_s * 6


PROXY = "{proxy+}"


def route_owner(path: str) -> Function | None:
    """The HTTP function API Gateway sends `path` to: an exact route or public path first,
    else the `{proxy+}` route with the longest prefix (as API Gateway matches)."""
    best: tuple[int, Function] | None = None
    for fn in functions("http"):
        if path in fn.public_paths or path in fn.routes:
            return fn
        for route in (*fn.routes, *fn.public_paths):
            prefix = route.removesuffix(PROXY)
            if (
                route.endswith(PROXY)
                and path.startswith(prefix)
                and len(path) > len(prefix)
                and (best is None or len(prefix) > best[0])
            ):
                best = (len(prefix), fn)
    return best[1] if best else None


def matches(path: str, patterns: Iterable[str]) -> bool:
    """Whether `path` is one of `patterns` (a trailing slash aside, as API Gateway takes it),
    or lies below one ending in `{proxy+}`."""
    path = path.rstrip("/") or "/"
    for pattern in patterns:
        prefix = pattern.removesuffix(PROXY)
        if path == pattern or (
            pattern.endswith(PROXY) and path.startswith(prefix) and len(path) > len(prefix)
        ):
            return True
    return False


def is_public(path: str) -> bool:
    """Whether API Gateway serves `path` (GET) without the authorizer."""
    path = path.rstrip("/") or "/"
    fn = route_owner(path)
    return fn is not None and matches(path, fn.public_paths)
