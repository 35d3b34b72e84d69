"""The catalogue of Skald's deployable parts: workers (each a queue, its job kinds and the
function draining it), the other functions, and the resources they use.

One table read by the code and by `infra/` alike: the job registry and the local worker pool
(which worker's job module runs which kind, batch sizes), the settings (each queue's
variables), the compositions (which adapters an entry point may build), aws-local (which
queues exist, which worker drains each) and the CDK app (which functions exist, their
handlers, the API paths each one serves, the environment each one gets and the grants it
needs; memory and timeouts are skald/sizes.py's). Nothing here imports from skald but the
sizes and the two parts of the table kept apart: the resources and their access levels
(skald/resource_access.py) and the workers (skald/workers.py), each re-exported here
(`catalog.BLOBS`, `catalog.WORKERS`). It is plain data, so infra can read it without
importing the product.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

# The resources, access levels and workers are re-exported: `catalog.X` names every part.
from skald.resource_access import ACCOUNTS as ACCOUNTS
from skald.resource_access import ADMIN as ADMIN
from skald.resource_access import APPEND as APPEND
from skald.resource_access import AUDIT as AUDIT
from skald.resource_access import BLOBS as BLOBS
from skald.resource_access import CHECK as CHECK
from skald.resource_access import COMMIT as COMMIT
from skald.resource_access import EDGE as EDGE
from skald.resource_access import EMBEDDER as EMBEDDER
from skald.resource_access import EXTRACT as EXTRACT
from skald.resource_access import HEALTH_PREFIX as HEALTH_PREFIX
from skald.resource_access import IDEMPOTENCY as IDEMPOTENCY
from skald.resource_access import INDEX as INDEX
from skald.resource_access import JOB_PAYLOAD_EXPIRY_DAYS as JOB_PAYLOAD_EXPIRY_DAYS
from skald.resource_access import JOB_PAYLOAD_PREFIX as JOB_PAYLOAD_PREFIX
from skald.resource_access import KEYS as KEYS
from skald.resource_access import LEVELS as LEVELS
from skald.resource_access import LIST as LIST
from skald.resource_access import LLM as LLM
from skald.resource_access import OPTIONAL_PORTS as OPTIONAL_PORTS
from skald.resource_access import PORTS as PORTS
from skald.resource_access import PROGRESS as PROGRESS
from skald.resource_access import PURGE as PURGE
from skald.resource_access import PUT as PUT
from skald.resource_access import QUEUE as QUEUE
from skald.resource_access import READ as READ
from skald.resource_access import RECALL as RECALL
from skald.resource_access import RERANKER as RERANKER
from skald.resource_access import ROOT_KEY as ROOT_KEY
from skald.resource_access import SCHEDULER as SCHEDULER
from skald.resource_access import SESSIONS as SESSIONS
from skald.resource_access import STATE as STATE
from skald.resource_access import TASKS as TASKS
from skald.resource_access import USE as USE
from skald.resource_access import WATCHES_PREFIX as WATCHES_PREFIX
from skald.resource_access import WRITE as WRITE
from skald.resource_access import Access as Access
from skald.sizes import SIZES, UNMEASURED, Size
from skald.workers import EVERY_QUEUE as EVERY_QUEUE
from skald.workers import JOB_AUTO_COMMIT as JOB_AUTO_COMMIT
from skald.workers import JOB_FETCH as JOB_FETCH
from skald.workers import JOB_IMPORT as JOB_IMPORT
from skald.workers import JOB_MEMORY as JOB_MEMORY
from skald.workers import JOB_PURGE as JOB_PURGE
from skald.workers import JOB_RECOVER_COMMITS as JOB_RECOVER_COMMITS
from skald.workers import JOB_RESUME_PURGES as JOB_RESUME_PURGES
from skald.workers import JOB_SEMANTIC as JOB_SEMANTIC
from skald.workers import JOB_WATCHES_DUE as JOB_WATCHES_DUE
from skald.workers import KIND_ALIASES as KIND_ALIASES
from skald.workers import QUEUE_AUTOCOMMIT as QUEUE_AUTOCOMMIT
from skald.workers import QUEUE_FETCH as QUEUE_FETCH
from skald.workers import QUEUE_MEMORY as QUEUE_MEMORY
from skald.workers import QUEUE_PURGE as QUEUE_PURGE
from skald.workers import QUEUE_SEMANTIC as QUEUE_SEMANTIC
from skald.workers import WORKERS as WORKERS
from skald.workers import JobKind as JobKind
from skald.workers import Queue as Queue
from skald.workers import Worker as Worker

# -- functions ---------------------------------------------------------------------------------

Kind = Literal["http", "authorizer", "worker", "setup"]


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


# The deployment's name in its API Gateway keys (skald.domain.plans.edge): the authorizer
# names each caller's account key with it; the functions that manage keys read it too.
EDGE_NAMESPACE_ENV = "SKALD_EDGE_NAMESPACE"

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
        # Creating an account (or changing its plan) puts its edge key in its tier's usage plan.
        uses={
            BLOBS: WRITE,
            STATE: WRITE,
            SESSIONS: LIST,
            QUEUE: USE,
            INDEX: WRITE,
            AUDIT: READ,
            EDGE: WRITE,
        },
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
        # above it are refreshed by a semantic job). Back-pressure reads the caller's account's
        # count of jobs (in the state table, beside the queues' counters). Deleting a session
        # is recorded in the audit trail.
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
        # It names the caller's account key (its usage plan) in every answer: no call.
        env=(EDGE_NAMESPACE_ENV,),
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
    # message go to the bucket; a worker caps the jobs of one account at a share of its
    # queue's concurrency.
    QUEUE: (*_TABLE, "SKALD_JOB_MAX_ATTEMPTS", "SKALD_BUCKET", "SKALD_WORKER_MAX_CONCURRENCY"),
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
    EDGE: (EDGE_NAMESPACE_ENV,),
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
