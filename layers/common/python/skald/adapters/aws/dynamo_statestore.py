"""StateStore on DynamoDB: accounts, users with hashed keys, tasks (item layout: dynamo_keys).

Uses the low-level client (`boto3.client("dynamodb")`, shared and thread-safe) through
dynamo_table, with the value codecs of dynamo_codec and the item codecs of dynamo_state_items.

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

from skald.adapters.aws import dynamo_keys as k
from skald.adapters.aws.dynamo_codec import (
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
from skald.adapters.aws.dynamo_state_items import (
    MAX_PAGE,
    TASK_FINAL,
    TASK_OPTIONAL,
    TASK_UPDATABLE,
    decode_cursor,
    encode_cursor,
    item_account,
    item_task,
    item_user,
    task_item,
    task_value,
)
from skald.adapters.aws.dynamo_table import (
    MAX_ATTEMPTS,
    DynamoTable,
    TransactionCancelled,
    backoff,
    is_condition_failure,
)
from skald.ports import (
    Account,
    StateConflict,
    StateNotFound,
    Task,
    TaskPage,
    User,
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


class DynamoStateStore:
    """StateStore on one DynamoDB table. Safe to share across threads (boto3 clients are)."""

    def __init__(self, client: Any, table: str, *, task_ttl_s: int = 30 * 86400) -> None:
        self._t = DynamoTable(client, table)
        self._task_ttl_s = task_ttl_s

    def close(self) -> None:
        """The client belongs to the caller: nothing to release."""

    # ---------------------------------------------------------------------------------------
    # accounts

    def create_account(self, account: Account) -> None:
        attrs = {
            "account_id": s(account.account_id),
            "created_at": n(account.created_at),
            "settings": js(account.settings),
        }
        names = Names()
        try:
            self._t.transact([
                {"Put": {
                    "Item": {**key(k.account_pk(account.account_id), k.META), **attrs},
                    "ConditionExpression": f"attribute_not_exists({names.name('pk')})",
                    **names.params(),
                }},
                {"Put": {"Item": {**key(k.ACCOUNTS_PK,
                                        k.account_listing_sk(account.account_id)), **attrs}}},
            ])
        except TransactionCancelled as exc:
            if exc.failed(0):
                raise StateConflict(f"account {account.account_id} exists") from None
            raise

    def get_account(self, account_id: str) -> Account | None:
        item = self._t.get(k.account_pk(account_id), k.META)
        return None if item is None else item_account(item)

    def list_accounts(self) -> list[Account]:
        accounts = [item_account(i) for i in self._t.query_partition(k.ACCOUNTS_PK)]
        return sorted(accounts, key=lambda a: a.account_id)

    def delete_account(self, account_id: str) -> bool:
        pk = k.account_pk(account_id)
        # The account item goes first: from then on create_user fails (it checks the account
        # in its transaction), so the sweep below cannot miss a user created meanwhile.
        resp = self._t.client.delete_item(TableName=self._t.name, Key=key(pk, k.META),
                                          ReturnValues="ALL_OLD")
        existed = bool(resp.get("Attributes"))
        self._t.client.delete_item(TableName=self._t.name,
                                   Key=key(k.ACCOUNTS_PK, k.account_listing_sk(account_id)))
        doomed: list[Mapping[str, Any]] = []
        for item in self._t.query_partition(pk, prefix=k.USER_PREFIX):
            doomed.append(item)
            key_hash = get_s(item, "key_hash")
            if key_hash is not None:
                doomed.append(key(k.key_guard_pk(key_hash), k.META))
        self._t.batch_delete(doomed)
        return existed

    # ---------------------------------------------------------------------------------------
    # users and keys

    def create_user(self, user: User) -> None:
        names = Names()
        exists = f"attribute_exists({names.name('pk')})"
        absent = f"attribute_not_exists({names.name('pk')})"
        item: Item = {
            **key(k.account_pk(user.account_id), k.user_sk(user.user_id)),
            "account_id": s(user.account_id),
            "user_id": s(user.user_id),
            "role": s(user.role),
            "created_at": n(user.created_at),
        }
        ops: list[dict[str, Any]] = [
            {"ConditionCheck": {"Key": key(k.account_pk(user.account_id), k.META),
                                "ConditionExpression": exists, **names.params()}},
            {"Put": {"Item": item, "ConditionExpression": absent, **names.params()}},
        ]
        if user.key_hash is not None:
            item["key_hash"] = s(user.key_hash)
            ops.append({"Put": {"Item": self._guard(user.account_id, user.user_id,
                                                    user.key_hash),
                                "ConditionExpression": absent, **names.params()}})
        try:
            self._t.transact(ops)
        except TransactionCancelled as exc:
            if exc.failed(0):
                raise StateNotFound(f"account {user.account_id}") from None
            if exc.failed(1) or exc.failed(2):
                raise StateConflict(
                    f"user {user.account_id}/{user.user_id} exists, or its key is in use"
                ) from None
            raise

    @staticmethod
    def _guard(account_id: str, user_id: str, key_hash: str) -> Item:
        return {
            **key(k.key_guard_pk(key_hash), k.META),
            "account_id": s(account_id),
            "user_id": s(user_id),
        }

    def get_user(self, account_id: str, user_id: str) -> User | None:
        item = self._t.get(k.account_pk(account_id), k.user_sk(user_id))
        return None if item is None else item_user(item)

    def list_users(self, account_id: str) -> list[User]:
        items = self._t.query_partition(k.account_pk(account_id), prefix=k.USER_PREFIX)
        return sorted((item_user(i) for i in items), key=lambda u: u.user_id)

    def delete_user(self, account_id: str, user_id: str) -> bool:
        user_key = key(k.account_pk(account_id), k.user_sk(user_id))
        for attempt in range(MAX_ATTEMPTS):
            user = self.get_user(account_id, user_id)
            if user is None:
                return False
            names = Names()
            ops: list[dict[str, Any]] = [{"Delete": {
                "Key": user_key,
                "ConditionExpression": self._key_unchanged(names, user.key_hash),
                **names.params(),
            }}]
            if user.key_hash is not None:
                ops.append({"Delete": {"Key": key(k.key_guard_pk(user.key_hash), k.META)}})
            try:
                self._t.transact(ops)
                return True
            except TransactionCancelled as exc:
                if not exc.failed(0):
                    raise
                backoff(attempt)  # deleted or re-keyed meanwhile: look again
        raise StateConflict(f"user {account_id}/{user_id} keeps changing")

    @staticmethod
    def _key_unchanged(names: Names, key_hash: str | None) -> str:
        if key_hash is None:
            return (f"attribute_exists({names.name('pk')})"
                    f" AND attribute_not_exists({names.name('key_hash')})")
        return (f"attribute_exists({names.name('pk')})"
                f" AND {names.name('key_hash')} = {names.value(s(key_hash))}")

    def set_user_role(self, account_id: str, user_id: str, role: str) -> None:
        names = Names()
        try:
            self._t.client.update_item(
                TableName=self._t.name,
                Key=key(k.account_pk(account_id), k.user_sk(user_id)),
                UpdateExpression=update_expression({"role": s(role)}, names),
                ConditionExpression=f"attribute_exists({names.name('pk')})",
                **names.params(),
            )
        except ClientError as exc:
            if is_condition_failure(exc):
                raise StateNotFound(f"user {account_id}/{user_id}") from None
            raise

    def set_user_key(self, account_id: str, user_id: str, key_hash: str) -> None:
        """Raises StateConflict when another user already holds `key_hash`."""
        user_key = key(k.account_pk(account_id), k.user_sk(user_id))
        for attempt in range(MAX_ATTEMPTS):
            user = self.get_user(account_id, user_id)
            if user is None:
                raise StateNotFound(f"user {account_id}/{user_id}")
            if user.key_hash == key_hash:
                return
            names = Names()
            ops: list[dict[str, Any]] = [
                {"Update": {
                    "Key": user_key,
                    "UpdateExpression": update_expression({"key_hash": s(key_hash)}, names),
                    "ConditionExpression": self._key_unchanged(names, user.key_hash),
                    **names.params(),
                }},
                {"Put": {"Item": self._guard(account_id, user_id, key_hash),
                         "ConditionExpression": "attribute_not_exists(pk)"}},
            ]
            if user.key_hash is not None:
                ops.append({"Delete": {"Key": key(k.key_guard_pk(user.key_hash), k.META)}})
            try:
                self._t.transact(ops)
                return
            except TransactionCancelled as exc:
                if exc.failed(1):
                    raise StateConflict("key hash already in use") from None
                if not exc.failed(0):
                    raise
                backoff(attempt)  # deleted or re-keyed meanwhile: look again
        raise StateConflict(f"user {account_id}/{user_id} keeps changing")

    def resolve_key(self, key_hash: str) -> User | None:
        guard = self._t.get(k.key_guard_pk(key_hash), k.META)
        if guard is None:
            return None
        user = self.get_user(req_s(guard, "account_id"), req_s(guard, "user_id"))
        # Re-checked on the user item, the source of truth: a guard left behind by a race
        # with delete_account must not authenticate anybody.
        if user is None or user.key_hash != key_hash:
            return None
        return user

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
            self._t.client.put_item(TableName=self._t.name, Item=item,
                                    ConditionExpression="attribute_not_exists(pk)")
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
        sets = {f: task_value(f, v) for f, v in sorted(changes.items())
                if not (v is None and f in TASK_OPTIONAL)}
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
        filters = [f"(attribute_not_exists({names.name('ttl')})"
                   f" OR {names.name('ttl')} > {names.value(n(int(time.time())))})"]
        for field, value in (("user_id", user_id), ("task_type", task_type),
                             ("status", status), ("resource_id", resource_id)):
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
