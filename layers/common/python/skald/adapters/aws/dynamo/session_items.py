"""Items of the session store: sessions (their updatable fields, the idle index attributes),
messages and archives as DynamoDB items (layout: keys.py), and the conditional update
that moves a session's archive watermark."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skald.adapters.aws.dynamo import keys as k
from skald.adapters.aws.dynamo.codec import (
    Item,
    Names,
    get_f,
    get_json,
    get_s,
    js,
    key,
    n,
    req_f,
    req_i,
    req_s,
    s,
    update_expression,
)
from skald.domain.memory.archives import ArchiveStatus
from skald.ports import ArchiveRecord, SessionMessage, SessionRecord

# Same allow-list as the local adapter: identity fields never change, and the watermarks and
# counters are kept by append_messages / reserve_archive alone.
SESSION_UPDATABLE = frozenset(
    {
        "updated_at",
        "last_activity",
        "memories_extracted",
        "failed_archive",
        "memory_policy",
        "auto_commit_policy",
        "extraction_config",
        "idle_deadline",
        "meta",
    }
)
JSON_OBJECT_FIELDS = frozenset({"memory_policy", "extraction_config", "meta"})
NUMBER_FIELDS = frozenset({"updated_at", "last_activity", "memories_extracted"})
ARCHIVE_UPDATABLE = frozenset({"status", "error", "meta", "task_id", "outbox"})
# An unsealed commit's archive is in `gsi1` (see keys.py): these go with its outbox.
OUTBOX_FIELDS = ("outbox", "gsi1pk", "gsi1sk")
# The idle deadline is stored as `idle_at` only: it is the `idle` GSI sort key itself.
IDLE_FIELDS = ("idle_pk", "idle_at")

MAX_ITEM_BYTES = 400 * 1024  # DynamoDB's item size limit


def archive_id(number: int) -> str:
    # Same spelling as ArchiveRecord.archive_id, which is what failed_archive holds.
    return f"archive_{number:03d}"


def session_value(field: str, value: Any) -> dict[str, Any] | None:
    """The DynamoDB value of a session field; None = the attribute is absent."""
    if field in JSON_OBJECT_FIELDS:
        return js(value or {})
    if value is None:
        return None
    if field == "auto_commit_policy":
        return js(value)
    if field == "failed_archive":
        return s(str(value))
    return n(value)


def idle_values(
    account_id: str, user_id: str, session_id: str, deadline: float | None
) -> dict[str, Any]:
    """The idle index attributes; an empty dict when they must be removed."""
    if deadline is None:
        return {}
    return {"idle_pk": s(k.idle_shard_pk(account_id, user_id, session_id)), "idle_at": n(deadline)}


def item_session(item: Mapping[str, Any]) -> SessionRecord:
    return SessionRecord(
        account_id=req_s(item, "account_id"),
        user_id=req_s(item, "user_id"),
        session_id=req_s(item, "session_id"),
        created_at=req_f(item, "created_at"),
        updated_at=req_f(item, "updated_at"),
        last_activity=req_f(item, "last_activity"),
        last_seq=req_i(item, "last_seq"),
        archived_seq=req_i(item, "archived_seq"),
        next_archive=req_i(item, "next_archive"),
        commit_count=req_i(item, "commit_count"),
        live_tokens=req_i(item, "live_tokens"),
        memories_extracted=req_i(item, "memories_extracted"),
        failed_archive=get_s(item, "failed_archive"),
        memory_policy=get_json(item, "memory_policy") or {},
        auto_commit_policy=get_json(item, "auto_commit_policy"),
        extraction_config=get_json(item, "extraction_config") or {},
        idle_deadline=get_f(item, "idle_at"),
        meta=get_json(item, "meta") or {},
    )


def message_item(pk: str, seq: int, m: SessionMessage) -> Item:
    item: Item = {
        **key(pk, k.message_sk(seq)),
        "seq": n(seq),
        "message_id": s(m.message_id),
        "role": s(m.role),
        "parts": js(m.parts),
        "created_at": s(m.created_at),
        "tokens": n(int(m.tokens)),
        "extra": js(m.extra),
    }
    for field in ("peer_id", "turn_id", "message_kind"):
        value = getattr(m, field)
        if value is not None:
            item[field] = s(value)
    return item


def item_size(item: Mapping[str, Any]) -> int:
    # Names plus values, as DynamoDB counts them; the few bytes of type overhead are noise.
    total = 0
    for name, value in item.items():
        total += len(name.encode())
        for v in value.values():
            total += len(str(v).encode())
    return total


def item_message(item: Mapping[str, Any]) -> SessionMessage:
    return SessionMessage(
        seq=req_i(item, "seq"),
        message_id=req_s(item, "message_id"),
        role=req_s(item, "role"),
        parts=get_json(item, "parts") or [],
        created_at=req_s(item, "created_at"),
        tokens=req_i(item, "tokens"),
        peer_id=get_s(item, "peer_id"),
        turn_id=get_s(item, "turn_id"),
        message_kind=get_s(item, "message_kind"),
        extra=get_json(item, "extra") or {},
    )


def item_archive(item: Mapping[str, Any]) -> ArchiveRecord:
    return ArchiveRecord(
        account_id=req_s(item, "account_id"),
        user_id=req_s(item, "user_id"),
        session_id=req_s(item, "session_id"),
        number=req_i(item, "number"),
        start_seq=req_i(item, "start_seq"),
        end_seq=req_i(item, "end_seq"),
        created_at=req_f(item, "created_at"),
        status=ArchiveStatus(req_s(item, "status")),
        task_id=get_s(item, "task_id"),
        error=get_s(item, "error"),
        meta=get_json(item, "meta") or {},
        outbox=get_json(item, "outbox"),
    )


def outbox_values(archive: ArchiveRecord, outbox: Mapping[str, Any]) -> Item:
    """The attributes of an archive whose commit is unsealed (see keys.py)."""
    a, u, sid = archive.account_id, archive.user_id, archive.session_id
    return {
        "outbox": js(dict(outbox)),
        "gsi1pk": s(k.outbox_shard_pk(a, u, sid)),
        "gsi1sk": s(k.outbox_sk(archive.created_at, a, u, sid, archive.number)),
    }


def archive_item(pk: str, archive: ArchiveRecord) -> Item:
    item: Item = {
        **key(pk, k.archive_sk(archive.number)),
        "account_id": s(archive.account_id),
        "user_id": s(archive.user_id),
        "session_id": s(archive.session_id),
        "number": n(archive.number),
        "start_seq": n(archive.start_seq),
        "end_seq": n(archive.end_seq),
        "created_at": n(archive.created_at),
        "status": s(archive.status),
        "meta": js(archive.meta),
    }
    if archive.task_id is not None:
        item["task_id"] = s(archive.task_id)
    if archive.error is not None:
        item["error"] = s(archive.error)
    if archive.outbox is not None:
        item.update(outbox_values(archive, archive.outbox))
    return item


def advance_op(
    pk: str, session: SessionRecord, end_seq: int, token_delta: int, now: float, *, clear_idle: bool
) -> dict[str, Any]:
    """The transaction item of a commit that moves the session's archive watermark: it
    holds only if nothing committed (or failed) since `session` was read."""
    names = Names()
    expression = update_expression(
        {
            "archived_seq": n(end_seq),
            "next_archive": n(session.next_archive + 1),
            "updated_at": n(now),
        },
        names,
        adds={"commit_count": n(1), "live_tokens": n(token_delta)},
        removes=IDLE_FIELDS if clear_idle else (),
    )
    condition = (
        f"{names.name('archived_seq')} = {names.value(n(session.archived_seq))}"
        f" AND {names.name('next_archive')} = {names.value(n(session.next_archive))}"
        f" AND attribute_not_exists({names.name('failed_archive')})"
    )
    if clear_idle:
        condition += f" AND {names.name('last_seq')} = {names.value(n(session.last_seq))}"
    return {
        "Update": {
            "Key": key(pk, k.META),
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            **names.params(),
        }
    }
