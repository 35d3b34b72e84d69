"""StateStore on DynamoDB: accounts, users with hashed keys, tasks (item layout: dynamo_keys).

Uses the low-level client (`boto3.client("dynamodb")`, shared and thread-safe), so numbers are
written as strings (`repr` of a float round-trips exactly) and read back without Decimal. JSON
fields (settings, meta, result) are stored as strings: one attribute, no 32-level nesting limit,
no empty-set or float-to-Decimal surprises.

Every create is conditional (`attribute_not_exists(pk)`) and raises StateConflict; every update
carries `attribute_exists(pk)`, because an UpdateItem on a missing key would otherwise create
the item. Changes spanning items (an account and its listing; a user and its key guard) are one
TransactWriteItems. Reads are strongly consistent except the task listing, which queries a GSI.

`DynamoTable` and the value codecs are shared with the session store.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import time
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws import dynamo_keys as k
from skald.ports import (
    Account,
    StateConflict,
    StateNotFound,
    Task,
    TaskPage,
    User,
)

Item = dict[str, Any]  # DynamoDB JSON: {"name": {"S": "..."}, ...}

_BATCH_WRITE = 25  # BatchWriteItem limit
_BATCH_GET = 100  # BatchGetItem limit
_MAX_ATTEMPTS = 8  # unprocessed batch items, transaction conflicts


# --------------------------------------------------------------------------------------------
# value codecs


def s(value: str) -> dict[str, str]:
    return {"S": value}


def n(value: float | int) -> dict[str, str]:
    if isinstance(value, bool):
        raise TypeError("a bool is not a number")
    if isinstance(value, int):
        return {"N": str(value)}
    text = repr(float(value))
    if text in ("inf", "-inf", "nan"):
        raise ValueError(f"DynamoDB cannot store {text}")
    return {"N": text}


def js(value: Any) -> dict[str, str]:
    return {"S": json.dumps(value, ensure_ascii=False, separators=(",", ":"))}


def get_s(item: Mapping[str, Any], name: str) -> str | None:
    value = item.get(name)
    return None if value is None or "S" not in value else str(value["S"])


def req_s(item: Mapping[str, Any], name: str) -> str:
    value = get_s(item, name)
    if value is None:
        raise ValueError(f"item {item.get('pk')}/{item.get('sk')} lacks {name}")
    return value


def get_f(item: Mapping[str, Any], name: str) -> float | None:
    value = item.get(name)
    return None if value is None or "N" not in value else float(value["N"])


def req_f(item: Mapping[str, Any], name: str) -> float:
    value = get_f(item, name)
    return 0.0 if value is None else value


def req_i(item: Mapping[str, Any], name: str) -> int:
    value = item.get(name)
    # Decimal: DynamoDB may hand an integer back as "3E+1".
    return 0 if value is None or "N" not in value else int(Decimal(value["N"]))


def get_b(item: Mapping[str, Any], name: str) -> bool:
    value = item.get(name)
    return bool(value is not None and value.get("BOOL"))


def get_json(item: Mapping[str, Any], name: str) -> Any:
    text = get_s(item, name)
    return None if text is None else json.loads(text)


def key(pk: str, sk: str) -> dict[str, dict[str, str]]:
    return {"pk": s(pk), "sk": s(sk)}


class Names:
    """Placeholders for attribute names (several of ours are reserved words: status, ttl)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attribute: str) -> str:
        placeholder = f"#n{len(self.names)}"
        for existing, attr in self.names.items():
            if attr == attribute:
                return existing
        self.names[placeholder] = attribute
        return placeholder

    def value(self, value: Any) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.names:
            out["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            out["ExpressionAttributeValues"] = dict(self.values)
        return out


def update_expression(sets: Mapping[str, Any], names: Names, *,
                      removes: Iterable[str] = (), adds: Mapping[str, Any] | None = None
                      ) -> str:
    """`SET a = :x ... ADD c :z ... REMOVE b ...` from attribute -> DynamoDB value maps."""
    clauses = []
    if sets:
        clauses.append("SET " + ", ".join(
            f"{names.name(a)} = {names.value(v)}" for a, v in sets.items()))
    if adds:
        clauses.append("ADD " + ", ".join(
            f"{names.name(a)} {names.value(v)}" for a, v in adds.items()))
    removed = list(removes)
    if removed:
        clauses.append("REMOVE " + ", ".join(names.name(a) for a in removed))
    return " ".join(clauses)


def backoff(attempt: int, *, base_s: float = 0.01, cap_s: float = 0.5) -> None:
    # Full jitter: concurrent losers of a race must not retry in lock-step.
    time.sleep(random.uniform(0, min(cap_s, base_s * 2**attempt)))


# --------------------------------------------------------------------------------------------


class TransactionCancelled(Exception):
    """A TransactWriteItems failed; `codes[i]` is the reason of item i ("None" = fine)."""

    def __init__(self, codes: list[str]) -> None:
        super().__init__(f"transaction cancelled: {codes}")
        self.codes = codes

    def failed(self, index: int) -> bool:
        return index < len(self.codes) and self.codes[index] == "ConditionalCheckFailed"


def is_condition_failure(exc: ClientError) -> bool:
    return bool(exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException")


class DynamoTable:
    """Thin helpers over one table: pagination, batch retries, transaction reasons."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name

    def get(self, pk: str, sk: str) -> Item | None:
        resp = self.client.get_item(TableName=self.name, Key=key(pk, sk), ConsistentRead=True)
        item: Item | None = resp.get("Item")
        return item

    def query(self, **params: Any) -> Iterator[Item]:
        """Every item matching, following LastEvaluatedKey."""
        params = {"TableName": self.name, **params}
        while True:
            resp = self.client.query(**params)
            yield from resp.get("Items", [])
            last = resp.get("LastEvaluatedKey")
            if not last:
                return
            params["ExclusiveStartKey"] = last

    def query_partition(self, pk: str, *, prefix: str | None = None,
                        keys_only: bool = False) -> Iterator[Item]:
        names = Names()
        cond = f"{names.name('pk')} = {names.value(s(pk))}"
        if prefix is not None:
            cond += f" AND begins_with({names.name('sk')}, {names.value(s(prefix))})"
        extra: dict[str, Any] = {}
        if keys_only:
            extra["ProjectionExpression"] = f"{names.name('pk')}, {names.name('sk')}"
        return self.query(KeyConditionExpression=cond, ConsistentRead=True, **extra,
                          **names.params())

    def batch_get(self, keys: list[dict[str, Any]]) -> list[Item]:
        """Consistent reads; missing items are simply absent from the result."""
        out: list[Item] = []
        for start in range(0, len(keys), _BATCH_GET):
            pending: dict[str, Any] = {
                self.name: {"Keys": keys[start:start + _BATCH_GET], "ConsistentRead": True}
            }
            attempt = 0
            while pending:
                resp = self.client.batch_get_item(RequestItems=pending)
                out.extend(resp.get("Responses", {}).get(self.name, []))
                pending = resp.get("UnprocessedKeys") or {}
                if pending:
                    attempt += 1
                    if attempt > _MAX_ATTEMPTS:
                        raise RuntimeError(f"{self.name}: batch get kept being throttled")
                    backoff(attempt, base_s=0.05, cap_s=2.0)
        return out

    def batch_write(self, requests: list[dict[str, Any]]) -> None:
        """PutRequest / DeleteRequest entries, 25 per call, unprocessed ones retried."""
        for start in range(0, len(requests), _BATCH_WRITE):
            pending: dict[str, Any] = {self.name: requests[start:start + _BATCH_WRITE]}
            attempt = 0
            while pending:
                resp = self.client.batch_write_item(RequestItems=pending)
                pending = resp.get("UnprocessedItems") or {}
                if pending:
                    attempt += 1
                    if attempt > _MAX_ATTEMPTS:
                        raise RuntimeError(f"{self.name}: batch write kept being throttled")
                    backoff(attempt, base_s=0.05, cap_s=2.0)

    def batch_delete(self, keys: Iterable[Mapping[str, Any]]) -> int:
        requests = [{"DeleteRequest": {"Key": {"pk": kk["pk"], "sk": kk["sk"]}}} for kk in keys]
        self.batch_write(requests)
        return len(requests)

    def transact(self, items: list[dict[str, Any]]) -> None:
        """TransactWriteItems; raises TransactionCancelled. A cancellation that is only due to
        another transaction in flight on the same items (TransactionConflict) is retried."""
        for item in items:
            next(iter(item.values()))["TableName"] = self.name
        attempt = 0
        while True:
            try:
                self.client.transact_write_items(TransactItems=items)
                return
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                reasons = exc.response.get("CancellationReasons") or []
                codes = [str(r.get("Code", "None")) for r in reasons]
                conflict_only = "TransactionConflict" in codes and all(
                    c in ("None", "TransactionConflict") for c in codes)
                if conflict_only and attempt < _MAX_ATTEMPTS:
                    attempt += 1
                    backoff(attempt)
                    continue
                raise TransactionCancelled(codes) from None


# --------------------------------------------------------------------------------------------
# tasks: encoding

_TASK_UPDATABLE = frozenset(
    {"task_type", "status", "user_id", "resource_id", "meta", "stage", "result", "error",
     "internal", "updated_at"}
)
_TASK_FINAL = frozenset({"completed", "failed", "cancelled"})
_TASK_OPTIONAL = frozenset({"resource_id", "stage", "result", "error"})
_MAX_PAGE = 1000


def _task_value(field: str, value: Any) -> dict[str, Any]:
    if field == "meta":
        return js(value or {})
    if field == "result":
        return js(value)
    if field == "internal":
        return {"BOOL": bool(value)}
    if field in ("created_at", "updated_at"):
        return n(value)
    return s(str(value))


def _item_task(item: Mapping[str, Any]) -> Task:
    return Task(
        task_id=req_s(item, "task_id"),
        task_type=req_s(item, "task_type"),
        status=req_s(item, "status"),
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


def _encode_cursor(gsi1sk: str, task_id: str) -> str:
    raw = json.dumps([gsi1sk, task_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        gsi1sk, task_id = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise ValueError(f"invalid task cursor {cursor!r}") from None
    if not isinstance(gsi1sk, str) or not isinstance(task_id, str):
        raise ValueError(f"invalid task cursor {cursor!r}")
    return gsi1sk, task_id


def _item_user(item: Mapping[str, Any]) -> User:
    return User(
        account_id=req_s(item, "account_id"),
        user_id=req_s(item, "user_id"),
        role=req_s(item, "role"),
        created_at=req_f(item, "created_at"),
        key_hash=get_s(item, "key_hash"),
    )


def _item_account(item: Mapping[str, Any]) -> Account:
    return Account(
        account_id=req_s(item, "account_id"),
        created_at=req_f(item, "created_at"),
        settings=get_json(item, "settings") or {},
    )


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
        return None if item is None else _item_account(item)

    def list_accounts(self) -> list[Account]:
        accounts = [_item_account(i) for i in self._t.query_partition(k.ACCOUNTS_PK)]
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
        return None if item is None else _item_user(item)

    def list_users(self, account_id: str) -> list[User]:
        items = self._t.query_partition(k.account_pk(account_id), prefix=k.USER_PREFIX)
        return sorted((_item_user(i) for i in items), key=lambda u: u.user_id)

    def delete_user(self, account_id: str, user_id: str) -> bool:
        user_key = key(k.account_pk(account_id), k.user_sk(user_id))
        for attempt in range(_MAX_ATTEMPTS):
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
        for attempt in range(_MAX_ATTEMPTS):
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
        if status not in _TASK_FINAL or self._task_ttl_s <= 0:
            return None
        # Wall clock rather than the task's updated_at, which the caller may set to anything.
        return n(int(time.time()) + self._task_ttl_s)

    def create_task(self, task: Task) -> None:
        """Raises StateConflict when the task id exists."""
        item: Item = {
            **key(k.task_pk(task.task_id), k.META),
            "gsi1pk": s(k.tasks_gsi1pk(task.account_id)),
            "gsi1sk": s(k.task_gsi1sk(task.created_at, task.task_id)),
            "task_id": s(task.task_id),
            "account_id": s(task.account_id),
            "created_at": n(task.created_at),
        }
        for field in _TASK_UPDATABLE:
            value = getattr(task, field)
            if value is None and field in _TASK_OPTIONAL:
                continue
            item[field] = _task_value(field, value)
        ttl = self._ttl(task.status)
        if ttl is not None:
            item["ttl"] = ttl
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
        return None if item is None or self._expired(item) else _item_task(item)

    def update_task(self, task_id: str, **changes: Any) -> Task:
        """`updated_at` defaults to now. Unknown or identity fields raise ValueError."""
        bad = set(changes) - _TASK_UPDATABLE
        if bad:
            raise ValueError(f"cannot update task field(s): {', '.join(sorted(bad))}")
        changes.setdefault("updated_at", time.time())
        sets = {f: _task_value(f, v) for f, v in sorted(changes.items())
                if not (v is None and f in _TASK_OPTIONAL)}
        removes = [f for f, v in sorted(changes.items()) if v is None and f in _TASK_OPTIONAL]
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
        return _item_task(resp["Attributes"])

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
        limit = max(1, min(int(limit), _MAX_PAGE))
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
            gsi1sk, last_id = _decode_cursor(cursor)
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
            batch = min(batch * 2, _MAX_PAGE)
        tasks = [_item_task(i) for i in items[:limit]]
        next_cursor = None
        if len(items) > limit:
            last_item = items[limit - 1]
            next_cursor = _encode_cursor(req_s(last_item, "gsi1sk"), tasks[-1].task_id)
        return TaskPage(items=tasks, next_cursor=next_cursor)
