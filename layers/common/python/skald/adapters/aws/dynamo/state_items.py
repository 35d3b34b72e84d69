"""Items of the state store: tasks (the updatable fields, their encoding, the listing cursor),
users, accounts and API keys, as DynamoDB items (layout: keys.py)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from skald.adapters.aws.dynamo import keys as k
from skald.adapters.aws.dynamo.codec import (
    Item,
    get_b,
    get_f,
    get_json,
    get_s,
    js,
    key,
    n,
    req_f,
    req_s,
    s,
)
from skald.domain.errors import InvalidArgument
from skald.ports import Account, Task, TaskStatus, User
from skald.ports.accounts import ACTIVE, DEFAULT_KEY_NAME, ApiKey, Deletion, Status

TASK_UPDATABLE = frozenset(
    {
        "task_type",
        "status",
        "user_id",
        "resource_id",
        "meta",
        "stage",
        "result",
        "error",
        "internal",
        "updated_at",
    }
)
TASK_OPTIONAL = frozenset({"resource_id", "stage", "result", "error"})
MAX_PAGE = 1000


def task_value(field: str, value: Any) -> dict[str, Any]:
    if field == "meta":
        return js(value or {})
    if field == "result":
        return js(value)
    if field == "internal":
        return {"BOOL": bool(value)}
    if field in ("created_at", "updated_at"):
        return n(value)
    return s(str(value))


def task_item(task: Task, ttl: dict[str, str] | None = None) -> Item:
    """The task's item (layout: keys.py); `ttl` once the task is final. Also put by the
    session store, in the transaction that reserves a commit's archive."""
    item: Item = {
        **key(k.task_pk(task.task_id), k.META),
        "gsi1pk": s(k.tasks_gsi1pk(task.account_id)),
        "gsi1sk": s(k.task_gsi1sk(task.created_at, task.task_id)),
        "task_id": s(task.task_id),
        "account_id": s(task.account_id),
        "created_at": n(task.created_at),
    }
    for field in TASK_UPDATABLE:
        value = getattr(task, field)
        if value is None and field in TASK_OPTIONAL:
            continue
        item[field] = task_value(field, value)
    if ttl is not None:
        item["ttl"] = ttl
    return item


def item_task(item: Mapping[str, Any]) -> Task:
    return Task(
        task_id=req_s(item, "task_id"),
        task_type=req_s(item, "task_type"),
        status=TaskStatus(req_s(item, "status")),
        account_id=req_s(item, "account_id"),
        user_id=req_s(item, "user_id"),
        created_at=req_f(item, "created_at"),
        updated_at=req_f(item, "updated_at"),
        resource_id=get_s(item, "resource_id"),
        meta=get_json(item, "meta") or {},
        stage=get_s(item, "stage"),
        result=get_json(item, "result"),
        error=get_s(item, "error"),
        internal=get_b(item, "internal"),
    )


def encode_cursor(gsi1sk: str, task_id: str) -> str:
    raw = json.dumps([gsi1sk, task_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        gsi1sk, task_id = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise _invalid_cursor(cursor) from None
    if not isinstance(gsi1sk, str) or not isinstance(task_id, str):
        raise _invalid_cursor(cursor)
    return gsi1sk, task_id


def _invalid_cursor(cursor: str) -> InvalidArgument:
    return InvalidArgument(
        f"Invalid task cursor {cursor!r}: pass the next_cursor of a previous page",
        {"field": "cursor"},
    )


def _deletion(item: Mapping[str, Any]) -> Deletion | None:
    raw = get_json(item, "deletion")
    return Deletion.from_dict(raw) if isinstance(raw, dict) else None


def item_user(item: Mapping[str, Any]) -> User:
    return User(
        account_id=req_s(item, "account_id"),
        user_id=req_s(item, "user_id"),
        role=req_s(item, "role"),
        created_at=req_f(item, "created_at"),
        generation=get_s(item, "generation"),
        status=Status(get_s(item, "status") or ACTIVE),
        deletion=_deletion(item),
    )


def item_account(item: Mapping[str, Any]) -> Account:
    return Account(
        account_id=req_s(item, "account_id"),
        created_at=req_f(item, "created_at"),
        settings=get_json(item, "settings") or {},
        status=Status(get_s(item, "status") or ACTIVE),
        deletion=_deletion(item),
    )


def key_item(key_: ApiKey) -> Item:
    item: Item = {
        **key(k.account_pk(key_.account_id), k.api_key_sk(key_.user_id, key_.key_id)),
        "key_id": s(key_.key_id),
        "account_id": s(key_.account_id),
        "user_id": s(key_.user_id),
        "key_hash": s(key_.key_hash),
        "name": s(key_.name),
        "created_at": n(key_.created_at),
        "created_by": s(key_.created_by),
    }
    if key_.expires_at is not None:
        item["expires_at"] = n(key_.expires_at)
    if key_.last_used_at is not None:
        item["last_used_at"] = n(key_.last_used_at)
    return item


def item_key(item: Mapping[str, Any]) -> ApiKey:
    return ApiKey(
        key_id=req_s(item, "key_id"),
        account_id=req_s(item, "account_id"),
        user_id=req_s(item, "user_id"),
        key_hash=req_s(item, "key_hash"),
        name=req_s(item, "name"),
        created_at=req_f(item, "created_at"),
        created_by=req_s(item, "created_by"),
        expires_at=get_f(item, "expires_at"),
        last_used_at=get_f(item, "last_used_at"),
    )


def legacy_key(user_item: Mapping[str, Any]) -> ApiKey | None:
    """The one key of a user item written before users had several (its `key_hash`)."""
    key_hash = get_s(user_item, "key_hash")
    if key_hash is None:
        return None
    return ApiKey(
        key_id=key_hash[:16],
        account_id=req_s(user_item, "account_id"),
        user_id=req_s(user_item, "user_id"),
        key_hash=key_hash,
        name=DEFAULT_KEY_NAME,
        created_at=req_f(user_item, "created_at"),
        created_by="migrated",
    )
