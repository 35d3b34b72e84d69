"""An archive read and updated on DynamoDB, for DynamoSessionStore (layout: keys.py).

An update that marks an archive failed, done or reset changes the session item's
`failed_archive` in the same TransactWriteItems: a commit racing it either sees the block or
not, never an archive marked failed that does not block (nor a resolved one that still
blocks). Any other update is one conditional UpdateItem on the archive item.
"""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.dynamo import keys as k
from skald.adapters.aws.dynamo.codec import Names, get_s, js, key, n, s, update_expression
from skald.adapters.aws.dynamo.session_items import (
    ARCHIVE_UPDATABLE,
    OUTBOX_FIELDS,
    archive_id,
    item_archive,
    outbox_values,
)
from skald.adapters.aws.dynamo.table import (
    DynamoTable,
    TransactionCancelled,
    backoff,
    is_condition_failure,
)
from skald.domain.memory.archives import ARCHIVE_STATUSES, ArchiveStatus
from skald.ports import ArchiveRecord, StateConflict, StateNotFound

_UPDATE_ATTEMPTS = 60  # lost races with commits and other updates of failed_archive

_Ids = tuple[str, str, str, int]  # account, user, session, archive number


def get_archive(
    t: DynamoTable, account_id: str, user_id: str, session_id: str, number: int
) -> ArchiveRecord | None:
    if not 0 <= number <= k.MAX_ARCHIVE:
        return None
    item = t.get(k.session_pk(account_id, user_id, session_id), k.archive_sk(number))
    return None if item is None else item_archive(item)


def update_archive(
    t: DynamoTable,
    account_id: str,
    user_id: str,
    session_id: str,
    number: int,
    changes: dict[str, Any],
) -> ArchiveRecord:
    """SessionStore.update_archive (see there)."""
    _check_archive_changes(changes)
    status = changes.get("status")
    ids = (account_id, user_id, session_id, number)
    where = f"archive_{number:03d} of {account_id}/{user_id}/{session_id}"
    pk = k.session_pk(account_id, user_id, session_id)
    if not 0 <= number <= k.MAX_ARCHIVE:
        raise StateNotFound(where)
    if not changes:
        return _archive_or_missing(t, ids, where)
    sets, removes = _archive_changes(t, ids, changes, where)
    names = Names()
    arch_update = {
        "Key": key(pk, k.archive_sk(number)),
        "UpdateExpression": update_expression(sets, names, removes=removes),
        "ConditionExpression": f"attribute_exists({names.name('pk')})",
        **names.params(),
    }
    if status not in (ArchiveStatus.FAILED, ArchiveStatus.DONE, ArchiveStatus.RESET):
        return _update_archive_item(t, arch_update, where)
    _update_archive_and_session(
        t,
        pk,
        number,
        arch_update,
        where,
        f"session {account_id}/{user_id}/{session_id}",
        failed=status == ArchiveStatus.FAILED,
    )
    return _archive_or_missing(t, ids, where)  # missing: deleted right after the update


def _check_archive_changes(changes: dict[str, Any]) -> None:
    bad = set(changes) - ARCHIVE_UPDATABLE
    if bad:
        raise ValueError(f"cannot update archive field(s): {', '.join(sorted(bad))}")
    status = changes.get("status")
    if "status" in changes and status not in ARCHIVE_STATUSES:
        raise ValueError(f"unknown archive status {status!r}")


def _archive_or_missing(t: DynamoTable, ids: _Ids, where: str) -> ArchiveRecord:
    found = get_archive(t, *ids)
    if found is None:
        raise StateNotFound(where)
    return found


def _archive_changes(
    t: DynamoTable, ids: _Ids, changes: dict[str, Any], where: str
) -> tuple[dict[str, Any], list[str]]:
    """The attributes an update sets and those it removes."""
    sets: dict[str, Any] = {}
    removes: list[str] = []
    for field, value in sorted(changes.items()):
        if field == "outbox":
            if value is None:  # sealed: out of the sweeper's index too
                removes.extend(OUTBOX_FIELDS)
                continue
            sets.update(outbox_values(_archive_or_missing(t, ids, where), value))
        elif field == "meta":
            sets[field] = js(value or {})
        elif value is None:
            removes.append(field)
        else:
            sets[field] = s(str(value))
    return sets, removes


def _update_archive_item(t: DynamoTable, arch_update: dict[str, Any], where: str) -> ArchiveRecord:
    try:
        resp = t.client.update_item(TableName=t.name, ReturnValues="ALL_NEW", **arch_update)
    except ClientError as exc:
        if is_condition_failure(exc):
            raise StateNotFound(where) from None
        raise
    return item_archive(resp["Attributes"])


def _update_archive_and_session(
    t: DynamoTable,
    pk: str,
    number: int,
    arch_update: dict[str, Any],
    where: str,
    session: str,
    *,
    failed: bool,
) -> None:
    for attempt in range(_UPDATE_ATTEMPTS):
        session_op = _failed_archive_op(t, pk, archive_id(number), failed=failed)
        try:
            t.transact([{"Update": dict(arch_update)}, session_op])
            return
        except TransactionCancelled as exc:
            if exc.failed(0):
                raise StateNotFound(where) from None
            if not exc.failed(1):
                raise
            if failed:
                raise StateNotFound(session) from None
        backoff(min(attempt, 6))  # failed_archive changed since it was read: again
    raise StateConflict(f"{where}: too much contention")


def _failed_archive_op(t: DynamoTable, pk: str, archive_id: str, *, failed: bool) -> dict[str, Any]:
    names = Names()
    stamp = {"updated_at": n(time.time())}
    if failed:
        return {
            "Update": {
                "Key": key(pk, k.META),
                "UpdateExpression": update_expression(
                    {"failed_archive": s(archive_id), **stamp}, names
                ),
                "ConditionExpression": f"attribute_exists({names.name('pk')})",
                **names.params(),
            }
        }
    current = t.get(pk, k.META)
    if current is not None and get_s(current, "failed_archive") == archive_id:
        return {
            "Update": {
                "Key": key(pk, k.META),
                "UpdateExpression": update_expression(stamp, names, removes=("failed_archive",)),
                "ConditionExpression": (
                    f"{names.name('failed_archive')} = {names.value(s(archive_id))}"
                ),
                **names.params(),
            }
        }
    # Not the blocking archive: nothing to clear, provided it does not become so meanwhile.
    fa = names.name("failed_archive")
    return {
        "ConditionCheck": {
            "Key": key(pk, k.META),
            "ConditionExpression": f"attribute_not_exists({fa}) OR {fa} <> "
            f"{names.value(s(archive_id))}",
            **names.params(),
        }
    }
