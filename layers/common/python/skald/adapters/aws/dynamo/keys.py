"""Item layout of the single DynamoDB state table, and the builders of its keys.

The table (created by the CDK stack; the names are fixed): key `pk` (S) / `sk` (S); GSI `gsi1`
on `gsi1pk` (S) / `gsi1sk` (S), projection ALL; GSI `idle` on `idle_pk` (S) / `idle_at` (N),
projection ALL; TTL attribute `ttl`.

Every id placed inside a key is escaped (`%` -> `%25`, `#` -> `%23`), so `#` only ever separates
key parts: no id can forge another account's key, and `begins_with` on `USER#{u}#` cannot
match user `{u}x`. The API only admits `[A-Za-z0-9_.@-]` ids, so escaping is normally a no-op;
it keeps the adapters safe without relying on the edge.

    item              pk                          sk                  other key attributes
    ----------------  --------------------------  ------------------  ------------------------
    account           ACCT#{a}                    META
    account listing   ACCOUNTS                    ACCT#{a}            (full copy; accounts are
                                                                       immutable once created)
    user              ACCT#{a}                    USER#{u}            (status, generation,
                                                                       key_count, deletion)
    API key           ACCT#{a}                    APIKEY#{u}#{id}     (name, expiry, last use)
    API-key guard     KEY#{hash}                  META                (-> account, user, key id)
    tombstone list    DELETIONS                   ACCT#{a} |          (the purge under way)
                                                  USER#{a}#{u}
    task              TASK#{id}                   META                gsi1pk ACCT#{a}#TASKS,
                                                                      gsi1sk {created:020.6f}#{id},
                                                                      ttl once final
    session           SESS#{a}#{u}#{s}            META                idle_pk IDLE#{shard},
                                                                      idle_at = idle deadline
                                                                      (both absent without one)
    message           SESS#{a}#{u}#{s}            MSG#{seq:012d}
    archive           SESS#{a}#{u}#{s}            ARCH#{n:08d}        while its commit is unsealed:
                                                                      gsi1pk OUTBOX#{shard},
                                                                      gsi1sk {created:020.6f}#
                                                                      {session pk}#{n:08d}
    session listing   ACCT#{a}#SESSIONS           USER#{u}#SESS#{s}

Access patterns and why the layout is this one:

- Account, user, session, archive, task: one strongly consistent GetItem each.
- Users of an account / account deletion: one Query of the `ACCT#{a}` partition (`USER#`).
- A user's keys: one Query of `APIKEY#{u}#` in the account's partition (the user item counts
  them in `key_count`, which every change of the keys conditions on: a user holds at most
  MAX_KEYS_PER_USER, so a tombstone removing them all fits one transaction). A legacy user item
  with a `key_hash` attribute (before several keys) stands for one key named "default".
- Tombstones: an account or user being deleted keeps its item with `status` "deleting", the
  purge's task id in `deletion_task` (what conditions test) and the tombstone as JSON; the
  `DELETIONS` partition lists every tombstone (consistent Query) for the sweep that restarts a
  lost purge. Created and deleted in the transactions that tombstone and finish.
- Accounts: one consistent Query of `ACCOUNTS`. A listing partition rather than a GSI, because a
  GSI is eventually consistent and an admin who creates an account expects to list it. Created
  and deleted in the same transaction as the account item.
- API key -> user: the guard item `KEY#{hash}` is required anyway, because a GSI cannot enforce
  that a key hash is unique (creating or re-keying a user puts the guard with
  `attribute_not_exists(pk)` in the user's transaction). Resolving through it is a strongly
  consistent GetItem, so a replaced or deleted key stops working at once, which a lookup on a
  GSI (eventually consistent) would not guarantee; the user item is then read and its
  `key_hash` re-checked. So `gsi1` is not used for keys.
- Tasks of an account, newest first: Query `gsi1` on `ACCT#{a}#TASKS`, descending; filters are
  FilterExpressions. The fixed-width created_at makes the string order the time order (epoch
  seconds >= 0, microseconds), the id breaks ties. A task sits in its own partition, so task
  updates spread over partitions; `ttl` (default 30 days after the task reaches a final state)
  lets DynamoDB delete old tasks; reads treat an expired, not yet deleted task as gone.
- Session, its messages and archives share one partition: appending writes only that
  partition, a range of messages is one Query on `MSG#` (12 digits: always sortable), and
  deleting a session is one Query plus batch deletes. Archive numbers use 8 digits so that they
  stay sorted far beyond 9999 commits.
- Sessions of a user / of an account: the listing items under `ACCT#{a}#SESSIONS` (consistent
  Query with `begins_with USER#{u}#`, then BatchGetItem of the session items). The session items
  themselves stay in their own partitions: they take a write on every append, and putting them
  all in one account partition would cap an account's append rate at one partition's.
- Unsealed commits (recovery and the sweeper): an archive whose phase 1 has not finished
  carries `gsi1pk` / `gsi1sk` (REMOVEd with its outbox when sealed), so `gsi1` holds only the
  few half-done commits, spread over `OUTBOX_SHARDS` shards by a stable hash of the session;
  each shard is in creation order. No table change: `gsi1` already exists for tasks, whose
  partition keys (`ACCT#...#TASKS`) never collide with `OUTBOX#`. Eventually consistent, like
  every GSI read: the sweeper re-reads an archive before acting on it.
- Idle sessions: the `idle` GSI is sparse: `idle_pk` / `idle_at` exist only while the session
  has an idle deadline (REMOVEd otherwise; `idle_at` is the deadline itself, not a copy), and
  `idle_pk` is spread over `IDLE_SHARDS` shards by a stable hash, so no single GSI partition
  takes every session's append. The sweep queries each shard with `idle_at <= now`, merges the
  shards by deadline and skips sessions without live messages.
"""

from __future__ import annotations

import zlib

META = "META"
ACCOUNTS_PK = "ACCOUNTS"
USER_PREFIX = "USER#"
MSG_PREFIX = "MSG#"
ARCH_PREFIX = "ARCH#"
IDLE_SHARDS = 4
OUTBOX_SHARDS = 4
IDLE_INDEX = "idle"
GSI1 = "gsi1"

_SEQ_DIGITS = 12
_ARCHIVE_DIGITS = 8
MAX_SEQ = 10**_SEQ_DIGITS - 1
MAX_ARCHIVE = 10**_ARCHIVE_DIGITS - 1


def esc(part: str) -> str:
    """An id made safe to embed in a key: `#` never appears in it afterwards."""
    return part.replace("%", "%25").replace("#", "%23")


def unesc(part: str) -> str:
    return part.replace("%23", "#").replace("%25", "%")


# --------------------------------------------------------------------------------------------
# accounts, users, keys


def account_pk(account_id: str) -> str:
    return f"ACCT#{esc(account_id)}"


def account_listing_sk(account_id: str) -> str:
    return f"ACCT#{esc(account_id)}"


def user_sk(user_id: str) -> str:
    return f"{USER_PREFIX}{esc(user_id)}"


def key_guard_pk(key_hash: str) -> str:
    return f"KEY#{esc(key_hash)}"


APIKEY_PREFIX = "APIKEY#"
DELETIONS_PK = "DELETIONS"


def user_keys_prefix(user_id: str) -> str:
    return f"{APIKEY_PREFIX}{esc(user_id)}#"


def api_key_sk(user_id: str, key_id: str) -> str:
    return f"{user_keys_prefix(user_id)}{esc(key_id)}"


def account_deletion_sk(account_id: str) -> str:
    return f"ACCT#{esc(account_id)}"


def user_deletion_sk(account_id: str, user_id: str) -> str:
    return f"USER#{esc(account_id)}#{esc(user_id)}"


# --------------------------------------------------------------------------------------------
# tasks


def task_pk(task_id: str) -> str:
    return f"TASK#{esc(task_id)}"


def tasks_gsi1pk(account_id: str) -> str:
    return f"ACCT#{esc(account_id)}#TASKS"


def task_gsi1sk(created_at: float, task_id: str) -> str:
    # The id is not escaped: it is never parsed back, and raw it sorts exactly like the id.
    return f"{max(created_at, 0.0):020.6f}#{task_id}"


# --------------------------------------------------------------------------------------------
# sessions


def session_pk(account_id: str, user_id: str, session_id: str) -> str:
    return f"SESS#{esc(account_id)}#{esc(user_id)}#{esc(session_id)}"


def message_sk(seq: int) -> str:
    if not 0 <= seq <= MAX_SEQ:
        raise ValueError(f"message seq {seq} out of range")
    return f"{MSG_PREFIX}{seq:0{_SEQ_DIGITS}d}"


def archive_sk(number: int) -> str:
    if not 0 <= number <= MAX_ARCHIVE:
        raise ValueError(f"archive number {number} out of range")
    return f"{ARCH_PREFIX}{number:0{_ARCHIVE_DIGITS}d}"


def sessions_listing_pk(account_id: str) -> str:
    return f"ACCT#{esc(account_id)}#SESSIONS"


def user_sessions_prefix(user_id: str) -> str:
    return f"{USER_PREFIX}{esc(user_id)}#SESS#"


def session_listing_sk(user_id: str, session_id: str) -> str:
    return f"{user_sessions_prefix(user_id)}{esc(session_id)}"


def idle_shard_pk(account_id: str, user_id: str, session_id: str) -> str:
    # crc32, not hash(): the shard must be the same in every process.
    digest = zlib.crc32(session_pk(account_id, user_id, session_id).encode())
    return f"IDLE#{digest % IDLE_SHARDS}"


def idle_shard_pks() -> list[str]:
    return [f"IDLE#{shard}" for shard in range(IDLE_SHARDS)]


def outbox_shard_pk(account_id: str, user_id: str, session_id: str) -> str:
    digest = zlib.crc32(session_pk(account_id, user_id, session_id).encode())
    return f"OUTBOX#{digest % OUTBOX_SHARDS}"


def outbox_shard_pks() -> list[str]:
    return [f"OUTBOX#{shard}" for shard in range(OUTBOX_SHARDS)]


def outbox_sk(
    created_at: float, account_id: str, user_id: str, session_id: str, number: int
) -> str:
    # Fixed-width time first: the string order of a shard is the creation order.
    return (
        f"{stamp(created_at)}#{session_pk(account_id, user_id, session_id)}#"
        f"{number:0{_ARCHIVE_DIGITS}d}"
    )


def stamp(epoch: float) -> str:
    """Epoch seconds as a fixed-width string that sorts like the number (>= 0)."""
    return f"{max(epoch, 0.0):020.6f}"
