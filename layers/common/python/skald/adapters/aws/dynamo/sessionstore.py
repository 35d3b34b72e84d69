"""SessionStore on DynamoDB: sessions, append-only messages, archives (layout: keys.py).

A session's item, messages and archives share the partition `SESS#{a}#{u}#{s}`.

Appending is two requests, not a transaction (a transaction holds at most 100 items and 4 MB,
and would make concurrent appenders retry each other): first one UpdateItem on the session
item, condition `attribute_exists(pk)`, `ADD last_seq :n, live_tokens :t` plus the activity and
idle fields, ReturnValues ALL_NEW. That reserves the seqs `last_seq - n + 1 .. last_seq` for
this caller alone, atomically with their tokens. Then one BatchWriteItem puts the messages
under those seqs. Crash window: a process that dies between the two (or whose batch write
fails for good) leaves reserved seqs without message items. So
- list_messages tolerates gaps (it returns the items that exist, in seq order);
- `archived_seq` is a watermark over seq *ranges*, not over items: an archive covers
  `start_seq..end_seq` whether or not every seq has an item;
- live_tokens may then count tokens of a message that never landed; reserve_archive recounts
  the live tokens from the items, so the estimate heals at the next commit.
A message can also be briefly *in flight* (seq reserved, items not yet written) while another
client commits. reserve_archive therefore waits, up to `gap_wait_s` and only while the newest
reservation (`seq_at`, wall clock) is recent, for every seq it looks at to have its item: an
archive snapshot (written out right after the reservation) must not miss a message that was
merely late. After that wait a missing seq is taken for a crash gap.

Committing (reserve_archive) is one TransactWriteItems: a conditional update of the session
item (`archived_seq = :old AND next_archive = :n AND attribute_not_exists(failed_archive)`)
that moves the watermark, bumps the counters and corrects live_tokens, the Put of the
archive item (`attribute_not_exists(pk)`) with its commit outbox, and the Put of the commit's
task item (`attribute_not_exists(pk)`; commits.py has the rest of the outbox). A lost
race re-reads and retries (optimistic concurrency). live_tokens is corrected by ADDing
`recount - live_tokens_read`, not SET: an append landing between the read and the
transaction adds its own tokens, which must survive.

Reading and updating one archive (with the session's failed_archive that moves with its
status) is in archive_writes.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.dynamo import archive_writes
from skald.adapters.aws.dynamo import commits as dynamo_commits
from skald.adapters.aws.dynamo import keys as k
from skald.adapters.aws.dynamo.codec import (
    Item,
    Names,
    get_f,
    key,
    n,
    req_f,
    req_i,
    req_s,
    s,
    update_expression,
)
from skald.adapters.aws.dynamo.session_items import (
    IDLE_FIELDS,
    MAX_ITEM_BYTES,
    SESSION_UPDATABLE,
    advance_op,
    archive_item,
    idle_values,
    item_archive,
    item_message,
    item_session,
    item_size,
    message_item,
    session_value,
)
from skald.adapters.aws.dynamo.state_items import task_item
from skald.adapters.aws.dynamo.table import (
    DynamoTable,
    TransactionCancelled,
    backoff,
    is_condition_failure,
)
from skald.domain.memory.archives import ArchiveStatus
from skald.ports import (
    ArchiveRecord,
    SessionMessage,
    SessionRecord,
    StateConflict,
    StateNotFound,
    Task,
)

_RESERVE_ATTEMPTS = 60  # lost races with other committers and appenders
_CLEAR_IDLE_ATTEMPTS = 5  # then commit without clearing the deadline (see reserve_archive)


class DynamoSessionStore:
    """SessionStore on one DynamoDB table. Safe to share across threads and processes."""

    def __init__(self, client: Any, table: str, *, gap_wait_s: float = 5.0) -> None:
        self._t = DynamoTable(client, table)
        self._gap_wait_s = gap_wait_s

    def close(self) -> None:
        """The client belongs to the caller: nothing to release."""

    # ---------------------------------------------------------------------------------------
    # sessions

    def create_session(self, record: SessionRecord) -> None:
        a, u, sid = record.account_id, record.user_id, record.session_id
        item: Item = {
            **key(k.session_pk(a, u, sid), k.META),
            "account_id": s(a),
            "user_id": s(u),
            "session_id": s(sid),
            "created_at": n(record.created_at),
            "last_seq": n(record.last_seq),
            "archived_seq": n(record.archived_seq),
            "next_archive": n(record.next_archive),
            "commit_count": n(record.commit_count),
            "live_tokens": n(record.live_tokens),
        }
        for field in SESSION_UPDATABLE - {"idle_deadline"}:
            value = session_value(field, getattr(record, field))
            if value is not None:
                item[field] = value
        item.update(idle_values(a, u, sid, record.idle_deadline))
        listing: Item = {
            **key(k.sessions_listing_pk(a), k.session_listing_sk(u, sid)),
            "account_id": s(a),
            "user_id": s(u),
            "session_id": s(sid),
        }
        try:
            # With its listing item, or list_sessions / account deletion could miss it.
            self._t.transact(
                [
                    {"Put": {"Item": item, "ConditionExpression": "attribute_not_exists(pk)"}},
                    {"Put": {"Item": listing}},
                ]
            )
        except TransactionCancelled as exc:
            if exc.failed(0):
                raise StateConflict(f"session {a}/{u}/{sid} exists") from None
            raise

    def get_session(self, account_id: str, user_id: str, session_id: str) -> SessionRecord | None:
        item = self._t.get(k.session_pk(account_id, user_id, session_id), k.META)
        return None if item is None else item_session(item)

    def list_sessions(self, account_id: str, user_id: str) -> list[SessionRecord]:
        """In session id order."""
        listing = self._t.query_partition(
            k.sessions_listing_pk(account_id), prefix=k.user_sessions_prefix(user_id)
        )
        keys = [
            key(k.session_pk(account_id, user_id, req_s(i, "session_id")), k.META) for i in listing
        ]
        # A listing item whose session is being deleted has no session item: skipped.
        records = [item_session(i) for i in self._t.batch_get(keys)]
        return sorted(records, key=lambda r: r.session_id)

    def delete_session(self, account_id: str, user_id: str, session_id: str) -> bool:
        pk = k.session_pk(account_id, user_id, session_id)
        # Children first, so that a crash leaves a session that can be deleted again rather
        # than messages nobody can reach; then the session item (appends fail from then on);
        # then a second sweep for what appends in flight wrote in between.
        self._sweep(pk)
        resp = self._t.client.delete_item(
            TableName=self._t.name, Key=key(pk, k.META), ReturnValues="ALL_OLD"
        )
        self._t.client.delete_item(
            TableName=self._t.name,
            Key=key(k.sessions_listing_pk(account_id), k.session_listing_sk(user_id, session_id)),
        )
        self._sweep(pk)
        return bool(resp.get("Attributes"))

    def _sweep(self, pk: str) -> None:
        doomed = [i for i in self._t.query_partition(pk, keys_only=True) if i["sk"]["S"] != k.META]
        self._t.batch_delete(doomed)

    def delete_account_sessions(self, account_id: str) -> int:
        deleted = 0
        for item in list(self._t.query_partition(k.sessions_listing_pk(account_id))):
            if self.delete_session(account_id, req_s(item, "user_id"), req_s(item, "session_id")):
                deleted += 1
        return deleted

    def count_sessions(self, account_id: str) -> int:
        # The account's listing partition, counted by DynamoDB (no item comes back).
        names = Names()
        params: dict[str, Any] = {
            "TableName": self._t.name,
            "KeyConditionExpression": f"{names.name('pk')} = "
            f"{names.value(s(k.sessions_listing_pk(account_id)))}",
            "Select": "COUNT",
            "ConsistentRead": True,
            **names.params(),
        }
        total = 0
        while True:
            resp = self._t.client.query(**params)
            total += int(resp.get("Count", 0))
            if not resp.get("LastEvaluatedKey"):
                return total
            params["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def update_session(
        self, account_id: str, user_id: str, session_id: str, **changes: Any
    ) -> SessionRecord:
        """`updated_at` defaults to now. Identity fields, the watermarks and the counters kept
        by append_messages / reserve_archive, and unknown fields raise ValueError."""
        bad = set(changes) - SESSION_UPDATABLE
        if bad:
            raise ValueError(f"cannot update session field(s): {', '.join(sorted(bad))}")
        changes.setdefault("updated_at", time.time())
        sets: dict[str, Any] = {}
        removes: list[str] = []
        for field, value in sorted(changes.items()):
            if field == "idle_deadline":
                idle = idle_values(account_id, user_id, session_id, value)
                sets.update(idle)
                if not idle:
                    removes.extend(IDLE_FIELDS)
                continue
            encoded = session_value(field, value)
            if encoded is None:
                removes.append(field)
            else:
                sets[field] = encoded
        names = Names()
        try:
            resp = self._t.client.update_item(
                TableName=self._t.name,
                Key=key(k.session_pk(account_id, user_id, session_id), k.META),
                UpdateExpression=update_expression(sets, names, removes=removes),
                ConditionExpression=f"attribute_exists({names.name('pk')})",
                ReturnValues="ALL_NEW",
                **names.params(),
            )
        except ClientError as exc:
            if is_condition_failure(exc):
                raise StateNotFound(f"session {account_id}/{user_id}/{session_id}") from None
            raise
        return item_session(resp["Attributes"])

    # ---------------------------------------------------------------------------------------
    # messages

    def append_messages(
        self,
        account_id: str,
        user_id: str,
        session_id: str,
        messages: Sequence[SessionMessage],
        *,
        now: float,
        idle_deadline: float | None,
    ) -> SessionRecord:
        pk = k.session_pk(account_id, user_id, session_id)
        # Encoded (and size-checked) before any seq is reserved: a message that cannot be
        # stored must not leave a gap.
        items = [message_item(pk, 0, m) for m in messages]
        for item in items:
            if item_size(item) > MAX_ITEM_BYTES - 1024:
                raise ValueError("a message is too large for one DynamoDB item")
        sets: dict[str, Any] = {
            "last_activity": n(now),
            "updated_at": n(now),
            "seq_at": n(time.time()),
        }
        idle = idle_values(account_id, user_id, session_id, idle_deadline)
        sets.update(idle)
        names = Names()
        expression = update_expression(
            sets,
            names,
            removes=() if idle else IDLE_FIELDS,
            adds={
                "last_seq": n(len(items)),
                "live_tokens": n(sum(int(m.tokens) for m in messages)),
            },
        )
        try:
            resp = self._t.client.update_item(
                TableName=self._t.name,
                Key=key(pk, k.META),
                UpdateExpression=expression,
                ConditionExpression=f"attribute_exists({names.name('pk')})",
                ReturnValues="ALL_NEW",
                **names.params(),
            )
        except ClientError as exc:
            if is_condition_failure(exc):
                raise StateNotFound(f"session {account_id}/{user_id}/{session_id}") from None
            raise
        record = item_session(resp["Attributes"])
        first = record.last_seq - len(items) + 1
        for i, item in enumerate(items):
            item["sk"] = s(k.message_sk(first + i))
            item["seq"] = n(first + i)
        self._t.batch_write([{"PutRequest": {"Item": item}} for item in items])
        # Only once stored: a failed append must not leave seqs on the caller's messages.
        for i, m in enumerate(messages):
            m.seq = first + i
        return record

    def list_messages(
        self,
        account_id: str,
        user_id: str,
        session_id: str,
        *,
        after_seq: int = 0,
        upto_seq: int | None = None,
    ) -> list[SessionMessage]:
        return [
            item_message(i)
            for i in self._message_items(
                k.session_pk(account_id, user_id, session_id), after_seq, upto_seq
            )
        ]

    def _message_items(
        self, pk: str, after_seq: int, upto_seq: int | None, *, tokens_only: bool = False
    ) -> list[Item]:
        low = max(after_seq, 0) + 1
        high = k.MAX_SEQ if upto_seq is None else min(upto_seq, k.MAX_SEQ)
        if low > high:
            return []
        names = Names()
        extra: dict[str, Any] = {}
        if tokens_only:
            extra["ProjectionExpression"] = f"{names.name('seq')}, {names.name('tokens')}"
        cond = (
            f"{names.name('pk')} = {names.value(s(pk))} AND {names.name('sk')}"
            f" BETWEEN {names.value(s(k.message_sk(low)))}"
            f" AND {names.value(s(k.message_sk(high)))}"
        )
        return list(
            self._t.query(
                KeyConditionExpression=cond, ConsistentRead=True, **extra, **names.params()
            )
        )

    # ---------------------------------------------------------------------------------------
    # archives

    def reserve_archive(
        self,
        account_id: str,
        user_id: str,
        session_id: str,
        *,
        keep_recent: int,
        now: float,
        task_id: str | None,
        reset: bool = False,
        task: Callable[[ArchiveRecord], Task] | None = None,
        outbox: Mapping[str, Any] | None = None,
    ) -> ArchiveRecord | None:
        if keep_recent < 0:
            raise ValueError("keep_recent must be >= 0")
        pk = k.session_pk(account_id, user_id, session_id)
        wait_until = time.monotonic() + self._gap_wait_s
        waits = races = 0
        while races < _RESERVE_ATTEMPTS:
            item, session = self._unblocked_session(pk, f"{account_id}/{user_id}/{session_id}")
            last, archived = session.last_seq, session.archived_seq
            end = last - keep_recent
            if end <= archived and not reset:
                return None
            # A reset with nothing to archive still records an (empty) archive, so that the
            # reset is visible and numbered like every other commit.
            end_seq = max(end, archived)
            tokens = {
                req_i(i, "seq"): req_i(i, "tokens")
                for i in self._message_items(pk, archived, last, tokens_only=True)
            }
            if len(tokens) < last - archived and self._in_flight(item, wait_until):
                waits += 1
                backoff(min(waits, 5), base_s=0.005, cap_s=0.2)
                continue
            archive = ArchiveRecord(
                account_id=account_id,
                user_id=user_id,
                session_id=session_id,
                number=session.next_archive,
                start_seq=archived + 1,
                end_seq=end_seq,
                created_at=now,
                status=ArchiveStatus.RESET if reset else ArchiveStatus.PENDING,
                task_id=task_id,
                outbox=None if outbox is None else dict(outbox),
            )
            live = sum(t for seq, t in tokens.items() if seq > end_seq)
            ops = self._reserve_ops(
                pk,
                session,
                archive,
                live,
                now,
                task,
                clear_idle=end_seq >= last and races < _CLEAR_IDLE_ATTEMPTS,
            )
            try:
                self._t.transact(ops)
                return archive
            except TransactionCancelled as exc:
                mine = self._reserve_clash(exc, archive, has_task=task is not None)
                if mine is not None:
                    return mine
            races += 1
            backoff(min(races, 6), base_s=0.002, cap_s=0.1)  # lost a race: look again
        raise StateConflict(f"session {account_id}/{user_id}/{session_id}: too much contention")

    def _unblocked_session(self, pk: str, ids: str) -> tuple[Item, SessionRecord]:
        """The session's item and record; raises unless it exists without a failed archive."""
        item = self._t.get(pk, k.META)
        if item is None:
            raise StateNotFound(f"session {ids}")
        session = item_session(item)
        if session.failed_archive is not None:
            raise StateConflict(
                f"session {ids} has an unresolved failed archive ({session.failed_archive})"
            )
        return item, session

    def _reserve_ops(
        self,
        pk: str,
        session: SessionRecord,
        archive: ArchiveRecord,
        live: int,
        now: float,
        task: Callable[[ArchiveRecord], Task] | None,
        *,
        clear_idle: bool,
    ) -> list[dict[str, Any]]:
        # Nothing stays live: the idle deadline goes, unless an append lands meanwhile,
        # hence the last_seq condition. Under a steady stream of appends that condition
        # could keep failing, so after a few tries the deadline is left as it is
        # (harmless: due_idle_sessions skips sessions without live messages).
        ops = [
            advance_op(
                pk, session, archive.end_seq, live - session.live_tokens, now, clear_idle=clear_idle
            ),
            {
                "Put": {
                    "Item": archive_item(pk, archive),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ]
        if task is not None:
            row = task(archive)
            if row.task_id != archive.task_id:
                raise ValueError("the commit's task must carry task_id")
            ops.append(
                {"Put": {"Item": task_item(row), "ConditionExpression": "attribute_not_exists(pk)"}}
            )
        return ops

    def _reserve_clash(
        self, exc: TransactionCancelled, archive: ArchiveRecord, *, has_task: bool
    ) -> ArchiveRecord | None:
        """After a cancelled reservation: the archive when this very call took it already,
        None to look again after a lost race; raises on a clash."""
        a = archive
        if has_task and exc.failed(2):
            # Taken by an earlier attempt of this very call whose answer was lost
            # (the client retried a transaction that had succeeded), or a clash.
            mine = self.get_archive(a.account_id, a.user_id, a.session_id, a.number)
            if mine is not None and mine.task_id == a.task_id:
                return mine
            raise StateConflict(f"task {a.task_id} exists") from None
        # A lost race fails the session condition (and usually the archive's too, as
        # the winner took that number): look again. The archive's alone is only
        # possible when next_archive was set behind the store's back.
        if not exc.failed(0) and "TransactionConflict" not in exc.codes:
            if exc.failed(1):
                raise StateConflict(
                    f"{a.archive_id} of {a.account_id}/{a.user_id}/{a.session_id} exists"
                ) from None
            raise exc
        return None

    def _in_flight(self, session_item: Mapping[str, Any], wait_until: float) -> bool:
        """Whether missing message items may still be on their way (see the module doc)."""
        if time.monotonic() >= wait_until:
            return False
        seq_at = get_f(session_item, "seq_at")
        return seq_at is not None and time.time() - seq_at < self._gap_wait_s

    def get_archive(
        self, account_id: str, user_id: str, session_id: str, number: int
    ) -> ArchiveRecord | None:
        return archive_writes.get_archive(self._t, account_id, user_id, session_id, number)

    def list_archives(self, account_id: str, user_id: str, session_id: str) -> list[ArchiveRecord]:
        items = self._t.query_partition(
            k.session_pk(account_id, user_id, session_id), prefix=k.ARCH_PREFIX
        )
        return sorted((item_archive(i) for i in items), key=lambda a: a.number)

    def open_commits(self, account_id: str, user_id: str, session_id: str) -> list[ArchiveRecord]:
        return [
            a for a in self.list_archives(account_id, user_id, session_id) if a.outbox is not None
        ]

    def stale_commits(self, before: float | None, limit: int = 100) -> list[ArchiveRecord]:
        """Reads `gsi1`, so it may lag a moment behind (see commits.py)."""
        return dynamo_commits.stale_commits(self._t, before, limit)

    def rollback_commit(self, account_id: str, user_id: str, session_id: str, number: int) -> bool:
        return dynamo_commits.rollback_commit(self._t, account_id, user_id, session_id, number)

    def update_archive(
        self, account_id: str, user_id: str, session_id: str, number: int, **changes: Any
    ) -> ArchiveRecord:
        """Raises StateNotFound, or ValueError for another field or an unknown status. A
        "reset" status clears the session's failed_archive like "done" does."""
        return archive_writes.update_archive(
            self._t, account_id, user_id, session_id, number, changes
        )

    # ---------------------------------------------------------------------------------------
    # idle auto-commit

    def due_idle_sessions(self, now: float, limit: int = 100) -> list[tuple[str, str, str]]:
        """Oldest deadline first. Reads the `idle` GSI, so it is eventually consistent: a
        deadline set a moment ago may show a moment later (the auto-commit re-checks)."""
        limit = max(0, int(limit))
        if limit == 0:
            return []
        due: list[tuple[float, str, str, str]] = []
        for shard in k.idle_shard_pks():
            names = Names()
            found = 0
            for item in self._t.query(
                IndexName=k.IDLE_INDEX,
                KeyConditionExpression=f"{names.name('idle_pk')} = {names.value(s(shard))}"
                f" AND {names.name('idle_at')} <= {names.value(n(now))}",
                **names.params(),
            ):
                if req_i(item, "last_seq") <= req_i(item, "archived_seq"):
                    continue  # nothing live to commit
                due.append(
                    (
                        req_f(item, "idle_at"),
                        req_s(item, "account_id"),
                        req_s(item, "user_id"),
                        req_s(item, "session_id"),
                    )
                )
                found += 1
                if found >= limit:  # each shard is in deadline order: the rest come later
                    break
        due.sort()
        return [(a, u, sid) for _, a, u, sid in due[:limit]]
