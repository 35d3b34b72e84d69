"""The resources a catalogue function uses (skald/catalog.py) and the access levels each one
knows; and the bucket's system objects. Plain data, like the catalogue: infra reads it without
importing the product.

A function `uses` resources, each with an access level; a resource is an adapter port
(`blobs`, `index`, ...) or a deploy-time resource the function reads directly (`root_key`,
`idempotency`). The access level says what the function does there, as narrowly as the
code paths of that function allow (LEVELS): its grants follow from them and from the queues it
sends to, drains and observes; its environment follows from what it uses
(`catalog.environment`).
"""

from __future__ import annotations

from typing import Final, Literal

# -- resources ---------------------------------------------------------------------------------

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
EDGE = "edge"  # UsagePlans: each account's API Gateway key in its tier's usage plan

PORTS = (
    BLOBS,
    STATE,
    SESSIONS,
    RECALL,
    QUEUE,
    INDEX,
    EMBEDDER,
    LLM,
    RERANKER,
    SCHEDULER,
    AUDIT,
    EDGE,
)
OPTIONAL_PORTS = (LLM, RERANKER, SCHEDULER, EDGE)  # configured or not: an adapter may be None


# -- access levels -----------------------------------------------------------------------------

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
    # edge: write = make an account's key and move it between usage plans; purge = take it
    # out of its plan and delete it.
    EDGE: (WRITE, PURGE),
    **{r: (USE,) for r in (EMBEDDER, LLM, RERANKER, ROOT_KEY, IDEMPOTENCY)},
}

# -- the bucket's system objects ---------------------------------------------------------------

# Where the payloads too large for one SQS message go in the bucket (`_jobs/<queue>/<job id>
# .json`; account ids never start with `_`), and how long a leftover one lives: longer than
# any queue's retention (14 days at most), so a dead letter can still be redriven.
JOB_PAYLOAD_PREFIX = "_jobs/"
JOB_PAYLOAD_EXPIRY_DAYS = 15
# Other system objects of the bucket: the watches (one JSON object each) and the key the
# readiness probe reads (never written).
WATCHES_PREFIX = "_watches/"
HEALTH_PREFIX = "_health/"
