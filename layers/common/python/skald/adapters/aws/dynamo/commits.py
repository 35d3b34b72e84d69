"""The commit outbox on DynamoDB: finding unsealed commits and rolling one back.

A commit's archive carries its outbox (what phase 1 still owes) until sealed; while it does,
it also sits in `gsi1` under a sharded `OUTBOX#` key (layout: keys.py), which is how the
sweeper finds half-done commits of every account without scanning the table.
"""

from __future__ import annotations

import time
from typing import Any

from skald.adapters.aws.dynamo import keys as k
from skald.adapters.aws.dynamo.codec import Names, key, n, req_i, s, update_expression
from skald.adapters.aws.dynamo.session_items import archive_id, item_archive, item_session
from skald.adapters.aws.dynamo.table import DynamoTable, TransactionCancelled
from skald.ports import ArchiveRecord, StateNotFound


def stale_commits(t: DynamoTable, before: float | None, limit: int) -> list[ArchiveRecord]:
    """Oldest first, over every shard (each shard is already in creation order)."""
    limit = max(0, int(limit))
    if limit == 0:
        return []
    found: list[ArchiveRecord] = []
    for shard in k.outbox_shard_pks():
        names = Names()
        cond = f"{names.name('gsi1pk')} = {names.value(s(shard))}"
        if before is not None:
            # '$' sorts right after the '#' that follows the stamp: an archive created exactly
            # at `before` is in, a later one is out.
            cond += f" AND {names.name('gsi1sk')} < {names.value(s(k.stamp(before) + '$'))}"
        resp = t.client.query(
            TableName=t.name,
            IndexName=k.GSI1,
            KeyConditionExpression=cond,
            Limit=limit,
            **names.params(),
        )
        found.extend(item_archive(i) for i in resp.get("Items", []))
    found.sort(key=lambda a: (a.created_at, a.account_id, a.user_id, a.session_id, a.number))
    return found[:limit]


def rollback_commit(
    t: DynamoTable, account_id: str, user_id: str, session_id: str, number: int
) -> bool:
    """One transaction: the session's watermark and counters move back (conditional on no
    commit since), the archive item goes (conditional on its outbox still being there)."""
    pk = k.session_pk(account_id, user_id, session_id)
    where = f"{archive_id(number)} of {account_id}/{user_id}/{session_id}"
    if not 0 <= number <= k.MAX_ARCHIVE:
        raise StateNotFound(where)
    arch_item = t.get(pk, k.archive_sk(number))
    session_item = t.get(pk, k.META)
    if arch_item is None or session_item is None:
        raise StateNotFound(where)
    arch, session = item_archive(arch_item), item_session(session_item)
    # Only the newest reservation can give its messages back: a later archive's range starts
    # right after this one's.
    if (
        arch.outbox is None
        or session.archived_seq != arch.end_seq
        or session.next_archive != number + 1
    ):
        return False
    tokens = 0
    if arch.end_seq >= arch.start_seq:
        names = Names()
        cond = (
            f"{names.name('pk')} = {names.value(s(pk))} AND {names.name('sk')} BETWEEN"
            f" {names.value(s(k.message_sk(arch.start_seq)))}"
            f" AND {names.value(s(k.message_sk(arch.end_seq)))}"
        )
        tokens = sum(
            req_i(i, "tokens")
            for i in t.query(
                KeyConditionExpression=cond,
                ConsistentRead=True,
                ProjectionExpression=names.name("tokens"),
                **names.params(),
            )
        )
    names = Names()
    removes = ["failed_archive"] if session.failed_archive == arch.archive_id else []
    condition = (
        f"{names.name('archived_seq')} = {names.value(n(arch.end_seq))}"
        f" AND {names.name('next_archive')} = {names.value(n(number + 1))}"
    )
    if removes:  # it blocks the session only while it is still the failed archive
        condition += f" AND {names.name('failed_archive')} = {names.value(s(arch.archive_id))}"
    session_op: dict[str, Any] = {
        "Update": {
            "Key": key(pk, k.META),
            "UpdateExpression": update_expression(
                {"archived_seq": n(arch.start_seq - 1), "updated_at": n(time.time())},
                names,
                adds={"commit_count": n(-1), "live_tokens": n(tokens)},
                removes=removes,
            ),
            "ConditionExpression": condition,
            **names.params(),
        }
    }
    arch_names = Names()
    arch_op = {
        "Delete": {
            "Key": key(pk, k.archive_sk(number)),
            "ConditionExpression": f"attribute_exists({arch_names.name('outbox')})",
            **arch_names.params(),
        }
    }
    try:
        t.transact([session_op, arch_op])
    except TransactionCancelled as exc:
        if exc.failed(0) or exc.failed(1):
            return False  # a commit or a seal got there first
        raise
    return True
