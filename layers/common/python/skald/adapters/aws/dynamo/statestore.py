"""StateStore on DynamoDB: accounts, users, API keys and tombstones (accounts.py), and tasks
(item layout: keys.py).

Uses the low-level client (`boto3.client("dynamodb")`, shared and thread-safe) through
table.py, with the value codecs of codec.py and the item codecs of state_items.py.

Every create is conditional (`attribute_not_exists(pk)`) and raises StateConflict; every update
carries `attribute_exists(pk)`, because an UpdateItem on a missing key would otherwise create
the item. Changes spanning items (an account and its listing; a user and its key guard) are one
TransactWriteItems. Reads are strongly consistent except the task listing, which queries a GSI.

`DynamoTable` and the value codecs are shared with the session store (and importable from
here too).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.dynamo import keys as k
from skald.adapters.aws.dynamo.accounts import DynamoAccounts
from skald.adapters.aws.dynamo.codec import (
    Item,
    Names,
    get_b,
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
from skald.adapters.aws.dynamo.state_items import (
    MAX_PAGE,
    TASK_OPTIONAL,
    TASK_UPDATABLE,
    decode_cursor,
    encode_cursor,
    item_task,
    task_item,
    task_value,
)
from skald.adapters.aws.dynamo.table import (
    DynamoTable,
    TransactionCancelled,
    backoff,
    is_condition_failure,
)
from skald.ports import (
    TASK_FINAL,
    StateConflict,
    StateNotFound,
    Task,
    TaskPage,
)

__all__ = [
    "DynamoStateStore",
    "DynamoTable",
    "Item",
    "Names",
    "TransactionCancelled",
    "backoff",
    "get_b",
    "get_f",
    "get_json",
    "get_s",
    "is_condition_failure",
    "js",
    "key",
    "n",
    "req_f",
    "req_i",
    "req_s",
    "s",
    "update_expression",
]


class DynamoStateStore(DynamoAccounts):
    """StateStore on one DynamoDB table. Safe to share across threads (boto3 clients are)."""

    def __init__(self, client: Any, table: str, *, task_ttl_s: int = 30 * 86400) -> None:
        self._t = DynamoTable(client, table)
        self._task_ttl_s = task_ttl_s

    def close(self) -> None:
        """The client belongs to the caller: nothing to release."""

    # ---------------------------------------------------------------------------------------
    # tasks

    def _ttl(self, status: str) -> dict[str, str] | None:
        if status not in TASK_FINAL or self._task_ttl_s <= 0:
            return None
        # Wall clock rather than the task's updated_at, which the caller may set to anything.
        return n(int(time.time()) + self._task_ttl_s)

    def create_task(self, task: Task) -> None:
        """Raises StateConflict when the task id exists."""
        item = task_item(task, self._ttl(task.status))
        try:
            self._t.client.put_item(
                TableName=self._t.name, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except ClientError as exc:
            if is_condition_failure(exc):
                raise StateConflict(f"task {task.task_id} exists") from None
            raise

    def _expired(self, item: Mapping[str, Any]) -> bool:
        # DynamoDB deletes expired items lazily (within days): until then they are hidden.
        ttl = get_f(item, "ttl")
        return ttl is not None and ttl <= time.time()

    def get_task(self, task_id: str) -> Task | None:
        item = self._t.get(k.task_pk(task_id), k.META)
        return None if item is None or self._expired(item) else item_task(item)

    def update_task(self, task_id: str, **changes: Any) -> Task:
        """`updated_at` defaults to now. Unknown or identity fields raise ValueError."""
        bad = set(changes) - TASK_UPDATABLE
        if bad:
            raise ValueError(f"cannot update task field(s): {', '.join(sorted(bad))}")
        changes.setdefault("updated_at", time.time())
        sets = {
            f: task_value(f, v)
            for f, v in sorted(changes.items())
            if not (v is None and f in TASK_OPTIONAL)
        }
        removes = [f for f, v in sorted(changes.items()) if v is None and f in TASK_OPTIONAL]
        if "status" in changes:
            ttl = self._ttl(str(changes["status"]))
            if ttl is None:
                removes.append("ttl")
            else:
                sets["ttl"] = ttl
        names = Names()
        try:
            resp = self._t.client.update_item(
                TableName=self._t.name,
                Key=key(k.task_pk(task_id), k.META),
                UpdateExpression=update_expression(sets, names, removes=removes),
                ConditionExpression=f"attribute_exists({names.name('pk')})",
                ReturnValues="ALL_NEW",
                **names.params(),
            )
        except ClientError as exc:
            if is_condition_failure(exc):
                raise StateNotFound(f"task {task_id}") from None
            raise
        return item_task(resp["Attributes"])

    def list_tasks(
        self,
        account_id: str,
        *,
        user_id: str | None = None,
        task_type: str | None = None,
        status: str | None = None,
        resource_id: str | None = None,
        include_internal: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> TaskPage:
        """Newest first. The GSI is eventually consistent: a task created a moment ago may be
        missing from the listing for that moment."""
        limit = max(1, min(int(limit), MAX_PAGE))
        gsi1pk = k.tasks_gsi1pk(account_id)
        names = Names()
        filters = [
            f"(attribute_not_exists({names.name('ttl')})"
            f" OR {names.name('ttl')} > {names.value(n(int(time.time())))})"
        ]
        for field, value in (
            ("user_id", user_id),
            ("task_type", task_type),
            ("status", status),
            ("resource_id", resource_id),
        ):
            if value is not None:
                filters.append(f"{names.name(field)} = {names.value(s(value))}")
        if not include_internal:
            filters.append(f"{names.name('internal')} = {names.value({'BOOL': False})}")
        params: dict[str, Any] = {
            "IndexName": k.GSI1,
            "KeyConditionExpression": f"{names.name('gsi1pk')} = {names.value(s(gsi1pk))}",
            "FilterExpression": " AND ".join(filters),
            "ScanIndexForward": False,
            **names.params(),
        }
        if cursor:
            gsi1sk, last_id = decode_cursor(cursor)
            # Rebuilt from the caller's account, so a cursor cannot lead into another one.
            params["ExclusiveStartKey"] = {
                **key(k.task_pk(last_id), k.META),
                "gsi1pk": s(gsi1pk),
                "gsi1sk": s(gsi1sk),
            }
        items: list[Item] = []
        # One match more than the page tells whether another page exists. The filter runs
        # after Limit, so a selective filter may need several reads: each asks for twice as
        # many items as the one before.
        want = limit + 1
        batch = want
        while len(items) < want:
            resp = self._t.client.query(TableName=self._t.name, Limit=batch, **params)
            items.extend(resp.get("Items", []))
            last = resp.get("LastEvaluatedKey")
            if not last:
                break
            params["ExclusiveStartKey"] = last
            batch = min(batch * 2, MAX_PAGE)
        tasks = [item_task(i) for i in items[:limit]]
        next_cursor = None
        if len(items) > limit:
            last_item = items[limit - 1]
            next_cursor = encode_cursor(req_s(last_item, "gsi1sk"), tasks[-1].task_id)
        return TaskPage(items=tasks, next_cursor=next_cursor)

    def delete_tasks(self, account_id: str, *, user_id: str | None = None, limit: int = 500) -> int:
        """Through the account's task listing (gsi1, eventually consistent: a purge calls
        this until nothing is left)."""
        names = Names()
        params: dict[str, Any] = {
            "IndexName": k.GSI1,
            "KeyConditionExpression": (
                f"{names.name('gsi1pk')} = {names.value(s(k.tasks_gsi1pk(account_id)))}"
            ),
            "ProjectionExpression": f"{names.name('pk')}, {names.name('sk')}",
        }
        if user_id is not None:
            params["FilterExpression"] = f"{names.name('user_id')} = {names.value(s(user_id))}"
        doomed: list[Mapping[str, Any]] = []
        for item in self._t.query(**params, **names.params()):
            doomed.append(key(req_s(item, "pk"), req_s(item, "sk")))
            if len(doomed) >= limit:
                break
        return self._t.batch_delete(doomed)
