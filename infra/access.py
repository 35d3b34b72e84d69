"""What the access levels of the catalogue (skald/catalog.py) let a function do, as IAM actions,
and what one function gets as a whole: the union over the resources it uses, the queues it
sends to, drains and observes. Each set is what the code paths behind that level send, no more
(the IAM contract, tests/contract, checks both ways). Plain data and set arithmetic:
infra/stack.py turns it into policy statements; nothing here names a function."""

from __future__ import annotations

from dataclasses import dataclass

from skald import catalog as c

# -- S3: the blob bucket ------------------------------------------------------------------------

# s3:ListBucket is also what makes S3 answer a read of a missing key with 404 rather than 403,
# and the blob store takes a 404 for "absent" (every existence check) and a 403 for an error.
_BUCKET = {
    c.CHECK: ("s3:ListBucket",),
    c.READ: ("s3:ListBucket",),
    c.PUT: ("s3:ListBucket",),
    c.WRITE: ("s3:ListBucket",),
    # A purge lists every version below a removed tenant's prefix.
    c.PURGE: ("s3:ListBucket", "s3:ListBucketVersions"),
}
_OBJECTS = {
    c.CHECK: (),
    c.READ: ("s3:GetObject",),
    # AbortMultipartUpload: the blob store aborts a failed multipart upload (objects > 8 MB).
    c.PUT: ("s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"),
    c.WRITE: ("s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"),
    # A purge deletes every version (the bucket is versioned) and reads the owners of uploads
    # and watches; it writes nothing.
    c.PURGE: ("s3:GetObject", "s3:DeleteObject", "s3:DeleteObjectVersion"),
}
# SSE-KMS with the data key: S3 decrypts for a read (and for a copy or a multipart part), and
# generates a data key for a write. Never kms:Encrypt nor kms:DescribeKey from the caller.
_BLOB_KEY = {
    c.CHECK: (),
    c.READ: ("kms:Decrypt",),
    c.PUT: ("kms:Decrypt", "kms:GenerateDataKey"),
    c.WRITE: ("kms:Decrypt", "kms:GenerateDataKey"),
    c.PURGE: ("kms:Decrypt",),
}


@dataclass(frozen=True)
class BlobAccess:
    bucket: tuple[str, ...]  # on the bucket
    objects: tuple[str, ...]  # on its objects
    key: tuple[str, ...]  # on the data key, through S3


def blobs(fn: c.Function) -> BlobAccess | None:
    level = fn.uses.get(c.BLOBS)
    if level is None:
        return None
    return BlobAccess(_BUCKET[level], _OBJECTS[level], _BLOB_KEY[level])


# Job payloads too large for one SQS message (skald.adapters.aws.sqs.payloads): one object
# each under `_jobs/<queue>/`, for the queues whose jobs can be that large. A sender puts
# them (S3 generates a data key), the queue's worker reads and deletes them (S3 decrypts).
_PAYLOAD_PUT = ("s3:PutObject",)
_PAYLOAD_TAKE = ("s3:GetObject", "s3:DeleteObject")


@dataclass(frozen=True)
class PayloadAccess:
    queue: str  # objects under `_jobs/<queue>/`
    objects: tuple[str, ...]  # on those objects
    key: tuple[str, ...]  # on the data key, through S3


def job_payloads(fn: c.Function) -> tuple[PayloadAccess, ...]:
    out: list[PayloadAccess] = []
    for q in c.QUEUES:
        if not q.large_payloads:
            continue
        objects: tuple[str, ...] = ()
        key: tuple[str, ...] = ()
        if q.name in fn.sends:
            objects, key = objects + _PAYLOAD_PUT, key + ("kms:GenerateDataKey",)
        if fn.queue == q.name:
            objects, key = objects + _PAYLOAD_TAKE, key + ("kms:Decrypt",)
        if objects:
            out.append(PayloadAccess(q.name, objects, key))
    return tuple(out)


# -- DynamoDB: the state table ------------------------------------------------------------------

D_GET, D_PUT = "dynamodb:GetItem", "dynamodb:PutItem"
D_UPDATE, D_DELETE = "dynamodb:UpdateItem", "dynamodb:DeleteItem"
D_CONDITION, D_QUERY = "dynamodb:ConditionCheckItem", "dynamodb:Query"
D_BATCH_GET, D_BATCH_WRITE = "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"
D_DESCRIBE = "dynamodb:DescribeTable"
_READS = frozenset({D_GET, D_QUERY, D_BATCH_GET})

_STATE: dict[str, frozenset[str]] = {
    c.CHECK: frozenset({D_DESCRIBE}),
    # The key's guard item, then its key, user and account (one batch); a key's last use.
    c.KEYS: frozenset({D_GET, D_BATCH_GET, D_UPDATE}),
    c.PROGRESS: frozenset({D_GET, D_UPDATE}),  # start, complete or fail a task
    c.TASKS: frozenset({D_GET, D_PUT, D_UPDATE}),  # and create one
    # Accounts, users and keys change in transactions (a key's guard, a condition on the
    # account); accounts, users, keys and tasks are listed.
    c.WRITE: frozenset({D_GET, D_PUT, D_UPDATE, D_DELETE, D_CONDITION, D_QUERY}),
    # Root's routes naming no account: an account created with its first user and key (one
    # transaction, conditions on what exists; its row read first, so that its edge key goes
    # in its usage plan before it exists), every account listed with its users, and the audit
    # record of each.
    c.ACCOUNTS: frozenset({D_GET, D_PUT, D_UPDATE, D_CONDITION, D_QUERY}),
    # The purge of a removed tenant: its tasks (listed, cancelled, deleted in batches), its
    # users, keys and row; a lost purge's task created again by the sweep.
    c.PURGE: frozenset({D_GET, D_PUT, D_UPDATE, D_DELETE, D_QUERY, D_BATCH_WRITE}),
}
_STATE_INDEXES = {c.WRITE: ("gsi1",), c.PURGE: ("gsi1",)}  # an account's tasks, newest first

# Metering: a function that records usage adds to its accounts' hourly cells and running
# totals (UpdateItem ADD); one that checks a plan limit reading the meters (an HTTP function's
# writes: storage; a model call: LLM tokens) reads the totals (one BatchGetItem). The items
# are the account's (`ACCT#{a}#USAGE...`, skald/adapters/aws/dynamo/usage.py), written and
# read in its tenant scope.
_METER = frozenset({D_UPDATE})
_METER_LIMITS = frozenset({D_BATCH_GET})


def meters(fn: c.Function) -> frozenset[str]:
    """What `fn` does on the usage items: nothing without the state table."""
    if fn.kind not in ("http", "worker") or c.STATE not in fn.uses:
        return frozenset()
    limits = fn.kind == "http" or c.LLM in fn.uses
    return _METER | (_METER_LIMITS if limits else frozenset())


# Reserving an archive is one transaction: the session's update and the archive's put.
_COMMIT = frozenset({D_GET, D_QUERY, D_PUT, D_UPDATE})
_APPEND = _COMMIT | {D_BATCH_WRITE}  # messages: the session's counters, then one batch
_SESSIONS: dict[str, frozenset[str]] = {
    c.CHECK: frozenset({D_DESCRIBE}),
    c.LIST: frozenset({D_QUERY, D_BATCH_GET}),  # an account's sessions (usage counts)
    c.READ: frozenset({D_GET, D_QUERY}),
    # An archive's status changes with a condition on (or an update of) its session's
    # failed archive, in one transaction.
    c.EXTRACT: frozenset({D_GET, D_QUERY, D_UPDATE, D_CONDITION}),
    c.COMMIT: _COMMIT,
    c.APPEND: _APPEND,
    # A removed tenant's sessions: listed (a query, then one batch get) and swept.
    c.PURGE: frozenset({D_QUERY, D_BATCH_GET, D_DELETE, D_BATCH_WRITE}),
    c.WRITE: _APPEND | {D_BATCH_GET, D_DELETE},  # and list (a batch get), delete (a sweep)
}
# The sweeper of half-done commits (a recover job on the auto-commit worker) finds them by
# their outbox keys in gsi1.
_SESSIONS_INDEXES = {c.COMMIT: ("gsi1",)}
_RECALL = {c.WRITE: frozenset({D_GET, D_PUT})}  # compare-and-swap on one item per session
# The audit trail (skald.adapters.aws.dynamo.audit): a record is put (conditionally, never
# over another), then its outcome updated; the console's listing queries an account's
# partitions, and root's view every account's through gsi1.
_AUDIT = {c.WRITE: frozenset({D_PUT, D_UPDATE}), c.READ: frozenset({D_PUT, D_UPDATE, D_QUERY})}
_AUDIT_INDEXES = {c.READ: ("gsi1",)}

# Job bookkeeping in the same table: the dedup claims of queues with `dedup`, job counters.
_CLAIM = frozenset({D_PUT, D_GET, D_DELETE})  # claim, read the holder, release if unsent
_RELEASE = frozenset({D_DELETE})  # the worker releases a job's claim when it starts
_COUNTERS = frozenset({D_GET})  # queue status reads them
# A worker counts the jobs it settles: the event source mapping bypasses the queue's ack/nack.
_SETTLE = frozenset({D_UPDATE})
# Fairness (skald.adapters.aws.dynamo.account_jobs): a sender adds each job it queues to its
# account's count; a function serving routes that queue work reads the caller's count first
# (admission); a worker takes and frees a running slot of each job's account.
_ACCOUNT_QUEUED = frozenset({D_UPDATE})
_ACCOUNT_ADMIT = frozenset({D_QUERY})
_ACCOUNT_SLOTS = frozenset({D_GET, D_PUT, D_UPDATE})
# The routers whose routes queue work behind the admission check (skald/api/deps.py Admitted).
ADMITTING_ROUTERS = frozenset({"fs", "content", "resources", "skills", "packs", "sessions"})


def _job_bookkeeping(fn: c.Function) -> frozenset[str]:
    """What `fn` does on the job items of the state table: dedup claims, counters, and each
    account's jobs in flight and running slots."""
    actions: set[str] = set()
    if any(c.queue(q).dedup for q in fn.sends):
        actions |= _CLAIM
    if fn.queue is not None and c.queue(fn.queue).dedup:
        actions |= _RELEASE
    if fn.queue is not None:
        actions |= _SETTLE | _ACCOUNT_SLOTS
    if fn.sends:
        actions |= _ACCOUNT_QUEUED
    if ADMITTING_ROUTERS.intersection(fn.routers):
        actions |= _ACCOUNT_ADMIT
    if fn.observes:
        actions |= _COUNTERS
    return frozenset(actions)


@dataclass(frozen=True)
class TableAccess:
    actions: frozenset[str]  # on the table
    indexes: tuple[str, ...]  # the secondary indexes it queries

    @property
    def items(self) -> bool:
        """Whether it reads or writes items (DescribeTable reads neither)."""
        return bool(self.actions - {D_DESCRIBE})

    @property
    def writes(self) -> bool:
        return bool(self.actions - _READS - {D_DESCRIBE})


def state_table(fn: c.Function) -> TableAccess | None:
    """Everything `fn` does on the state table (state, sessions, recall ledger, audit trail,
    job bookkeeping), or None."""
    actions: set[str] = set()
    indexes: list[str] = []
    for resource, levels in (
        (c.STATE, _STATE),
        (c.SESSIONS, _SESSIONS),
        (c.RECALL, _RECALL),
        (c.AUDIT, _AUDIT),
    ):
        level = fn.uses.get(resource)
        if level is not None:
            actions |= levels[level]
    state = fn.uses.get(c.STATE)
    if state is not None:
        indexes += _STATE_INDEXES.get(state, ())
    sessions = fn.uses.get(c.SESSIONS)
    if sessions is not None:
        indexes += _SESSIONS_INDEXES.get(sessions, ())
    audit = fn.uses.get(c.AUDIT)
    if audit is not None:
        indexes += _AUDIT_INDEXES.get(audit, ())
    actions |= _job_bookkeeping(fn)
    actions |= meters(fn)
    return TableAccess(frozenset(actions), tuple(dict.fromkeys(indexes))) if actions else None


# -- tenant-scoped credentials ------------------------------------------------------------------
# A data-plane function (catalog.tenant_scoped) reaches an account's data with its tenant role
# (tenant-scoped credentials, skald.adapters.aws.tenancy.clients), and keeps on its own role
# the control plane (job bookkeeping, tasks, system objects, secondary-index listings) and
# what it does outside any account's scope (`unscoped`). The functions below split its grants
# that way; without tenant credentials everything stays on its own role.

# What the state levels do on the control plane's items with the function's own role: the
# task of a job it runs or queues (a commit's task goes in the commit's transaction, with the
# tenant's credentials).
_STATE_CONTROL: dict[str, frozenset[str]] = {
    c.KEYS: frozenset({D_GET}),
    c.PROGRESS: frozenset({D_GET, D_UPDATE}),
    c.TASKS: frozenset({D_GET, D_PUT, D_UPDATE}),
    c.WRITE: frozenset({D_GET, D_PUT, D_UPDATE}),
    # A purge: the tombstone list (the sweep reads it outside any account), its task, and
    # the removed tenant's tasks, deleted in batches.
    c.PURGE: frozenset({D_GET, D_PUT, D_UPDATE, D_QUERY, D_BATCH_WRITE}),
}


def scoped_blobs(fn: c.Function) -> BlobAccess | None:
    """The tenant role's blob access: the function's, on the tagged account's objects."""
    return blobs(fn)


def own_blobs(fn: c.Function, *, tenant: bool) -> BlobAccess | None:
    """The blob access the function's own role keeps on every account's objects."""
    if not tenant:
        return blobs(fn)
    level = fn.unscoped.get(c.BLOBS)
    return None if level is None else BlobAccess(_BUCKET[level], _OBJECTS[level], _BLOB_KEY[level])


# System objects by level: CHECK heads a key that is never written (the readiness probe), so
# S3 never decrypts for it; PURGE reads and deletes a removed tenant's watches (one current
# version each: the bucket's lifecycle rule expires the older ones); the others are the blob
# levels'.
_SYSTEM_OBJECTS = {
    **_OBJECTS,
    c.CHECK: ("s3:GetObject",),
    c.PURGE: ("s3:GetObject", "s3:DeleteObject"),
}
_SYSTEM_BUCKET = {**_BUCKET, c.PURGE: ("s3:ListBucket",)}


@dataclass(frozen=True)
class SystemBlobAccess:
    prefix: str  # system objects under it (`_...`)
    bucket: tuple[str, ...]  # on the bucket, listing below the prefix only
    objects: tuple[str, ...]
    key: tuple[str, ...]


def system_blobs(fn: c.Function, *, tenant: bool) -> tuple[SystemBlobAccess, ...]:
    """The system objects the function's own role reaches (none beyond its whole-bucket
    access when it has one)."""
    if not tenant or own_blobs(fn, tenant=tenant) is not None:
        return ()
    return tuple(
        SystemBlobAccess(prefix, _SYSTEM_BUCKET[level], _SYSTEM_OBJECTS[level], _BLOB_KEY[level])
        for prefix, level in sorted(fn.system_blobs.items())
    )


def scoped_table(fn: c.Function) -> TableAccess | None:
    """The tenant role's state-table access: the function's item actions on the tagged
    account's items (sessions, the recall ledger, accounts and users) and on the control
    plane's items written in the same transactions (a commit's task, a user's key guard)."""
    actions: set[str] = set()
    for resource, levels in ((c.SESSIONS, _SESSIONS), (c.RECALL, _RECALL)):
        level = fn.uses.get(resource)
        if level is not None:
            actions |= levels[level]
    # A removed tenant's purge runs in that account's scope: its sweeps go scoped too.
    state = fn.uses.get(c.STATE)
    if state in (c.WRITE, c.PURGE):
        actions |= _STATE[state]
    elif state is not None and fn.kind == "worker":
        actions |= {D_GET}  # the job gate reads its account's and user's rows
    audit = fn.uses.get(c.AUDIT)
    if audit is not None:  # an account's audit records, in its partitions
        actions |= _AUDIT[audit]
    actions |= meters(fn)  # its usage cells and totals, in the account's partitions
    actions -= {D_DESCRIBE}
    return TableAccess(frozenset(actions), ()) if actions else None


def own_table(fn: c.Function, *, tenant: bool) -> TableAccess | None:
    """The state-table access the function's own role keeps on every item: all of it
    without tenant credentials; with them, its `unscoped` levels and its secondary-index
    queries (which read control-plane listings only)."""
    if not tenant:
        return state_table(fn)
    whole = state_table(fn)
    actions: set[str] = set()
    for resource, levels in ((c.STATE, _STATE), (c.SESSIONS, _SESSIONS), (c.RECALL, _RECALL)):
        level = fn.unscoped.get(resource)
        if level is not None:
            actions |= levels[level]
    indexes = whole.indexes if whole is not None else ()
    return TableAccess(frozenset(actions), indexes) if actions or indexes else None


def control_table(fn: c.Function, *, tenant: bool) -> TableAccess | None:
    """With tenant credentials, what the function's own role does on control-plane items
    only (IAM holds it to those partitions): its tasks, dedup claims, job counters."""
    if not tenant:
        return None
    actions: set[str] = set()
    state = fn.uses.get(c.STATE)
    if state is not None:
        actions |= _STATE_CONTROL.get(state, frozenset())
    actions |= _job_bookkeeping(fn)
    own = own_table(fn, tenant=True)
    actions -= own.actions if own is not None else frozenset()
    return TableAccess(frozenset(actions), ()) if actions else None


# DynamoDB uses the data key on the caller's behalf; which key operations a request causes is
# not observable from outside, so these follow what DynamoDB documents for table users.
def table_key(access: TableAccess) -> tuple[str, ...]:
    if not access.items:
        return ()
    writes = ("kms:Encrypt", "kms:GenerateDataKey") if access.writes else ()
    return ("kms:Decrypt", "kms:DescribeKey", *writes)


# Powertools idempotency records: put in progress, update when done, delete when the job
# failed (a failed conditional put returns the record it hit: no GetItem with boto3 >= 1.26.164).
IDEMPOTENCY = TableAccess(frozenset({D_PUT, D_UPDATE, D_DELETE}), ())

# -- Secrets Manager: the root key ----------------------------------------------------------------

ROOT_KEY = ("secretsmanager:GetSecretValue",)
ROOT_KEY_KEY = ("kms:Decrypt",)  # on the data key, through Secrets Manager

# -- API Gateway: the edge's account keys and usage plans ----------------------------------------
# (skald.adapters.aws.edge) Paths of API Gateway's management API, each with the HTTP verbs the
# adapter sends there: WRITE finds the plans by name and the plans holding a key, looks keys up
# and makes them, and moves a key between plans; PURGE takes a key out of its plans and
# deletes it.

_EDGE_READ = (("/usageplans", ("apigateway:GET",)), ("/apikeys", ("apigateway:GET",)))
_EDGE: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    c.WRITE: (
        *_EDGE_READ[:1],
        ("/apikeys", ("apigateway:GET", "apigateway:POST")),
        ("/usageplans/*/keys", ("apigateway:POST",)),
        ("/usageplans/*/keys/*", ("apigateway:DELETE",)),
    ),
    c.PURGE: (
        *_EDGE_READ,
        ("/usageplans/*/keys/*", ("apigateway:DELETE",)),
        ("/apikeys/*", ("apigateway:DELETE",)),
    ),
}


def edge(level: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(management API path, actions) for the edge port at `level`."""
    return _EDGE[level]


# -- SQS --------------------------------------------------------------------------------------


def observed_queues(fn: c.Function) -> tuple[str, ...]:
    """The queues whose attributes `fn` reads: those it observes, and every queue setup
    checks."""
    if fn.uses.get(c.QUEUE) == c.CHECK:
        return tuple(q.name for q in c.QUEUES)
    return fn.observes


def check_levels(fn: c.Function) -> None:
    """Raises when `fn` uses a resource at a level that resource does not know."""
    for resource, level in (
        *fn.uses.items(),
        *fn.unscoped.items(),
        *((c.BLOBS, lvl) for lvl in fn.system_blobs.values()),
    ):
        if level not in c.LEVELS.get(resource, ()):
            raise ValueError(
                f"{fn.name}: {resource} has no access level '{level}' (skald/catalog.py LEVELS)"
            )
    for prefix in fn.system_blobs:
        if not (prefix.startswith("_") and prefix.endswith("/")):
            raise ValueError(f"{fn.name}: system objects live under `_.../`, not {prefix!r}")
