"""Accounts, users, API keys and deletion tombstones on the DynamoDB state table: the
AccountStore half of DynamoStateStore (item layout: keys.py).

Every change spanning items is one TransactWriteItems (its parts: account_writes.py): an
account and its listing copy; a user with its first key and the key's guard; a tombstone with
the removal of the user's keys and its entry in the tombstone list. Changes of a user's keys
condition on the user item's `key_count`, so two of them racing cannot leave an uncounted key
behind a tombstone: the loser re-reads and tries again. Reads are strongly consistent (GetItem,
BatchGetItem, partition queries).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.dynamo import keys as k
from skald.adapters.aws.dynamo.account_writes import (
    AccountSettingsWrites,
    active,
    count_unchanged,
    deletion_entry,
    guard_item,
    tombstone,
    tombstoned_by,
    update_op,
)
from skald.adapters.aws.dynamo.codec import (
    Item,
    Names,
    get_json,
    get_s,
    js,
    key,
    n,
    req_s,
    s,
    update_expression,
)
from skald.adapters.aws.dynamo.state_items import (
    item_account,
    item_key,
    item_user,
    key_item,
    legacy_key,
)
from skald.adapters.aws.dynamo.table import (
    MAX_ATTEMPTS,
    DynamoTable,
    TransactionCancelled,
    backoff,
    is_condition_failure,
)
from skald.ports import StateConflict, StateNotFound
from skald.ports.accounts import (
    ACTIVE,
    DELETING,
    MAX_KEYS_PER_USER,
    Account,
    ApiKey,
    Deletion,
    PendingDeletion,
    ResolvedKey,
    User,
)


class DynamoAccounts(AccountSettingsWrites):
    """The AccountStore methods; mixed into DynamoStateStore, which owns `_t`."""

    _t: DynamoTable

    # ---------------------------------------------------------------------------------------
    # accounts

    def create_account(self, account: Account) -> None:
        attrs = {
            "account_id": s(account.account_id),
            "created_at": n(account.created_at),
            "settings": js(account.settings),
            "status": s(ACTIVE),
        }
        names = Names()
        try:
            self._t.transact(
                [
                    {
                        "Put": {
                            "Item": {**key(k.account_pk(account.account_id), k.META), **attrs},
                            "ConditionExpression": f"attribute_not_exists({names.name('pk')})",
                            **names.params(),
                        }
                    },
                    {
                        "Put": {
                            "Item": {
                                **key(k.ACCOUNTS_PK, k.account_listing_sk(account.account_id)),
                                **attrs,
                            }
                        }
                    },
                ]
            )
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

    def begin_account_deletion(self, account_id: str, deletion: Deletion) -> Account:
        pk = k.account_pk(account_id)
        for attempt in range(MAX_ATTEMPTS):
            current = self.get_account(account_id)
            if current is None:
                raise StateNotFound(f"account {account_id}")
            if current.status == DELETING:
                return current
            names, listing = Names(), Names()
            try:
                self._t.transact(
                    [
                        update_op(pk, k.META, tombstone(deletion), names, condition=active(names)),
                        update_op(
                            k.ACCOUNTS_PK,
                            k.account_listing_sk(account_id),
                            tombstone(deletion),
                            listing,
                            condition=f"attribute_exists({listing.name('pk')})",
                        ),
                        {
                            "Put": {
                                "Item": deletion_entry(
                                    k.account_deletion_sk(account_id), account_id, None, deletion
                                )
                            }
                        },
                    ]
                )
            except TransactionCancelled:
                backoff(attempt)  # changed or deleted meanwhile: look again
                continue
            current.status, current.deletion = DELETING, deletion
            return current
        raise StateConflict(f"account {account_id} keeps changing")

    def replace_account_deletion(
        self, account_id: str, expected_task_id: str, deletion: Deletion
    ) -> Account:
        pk = k.account_pk(account_id)
        sets = {"deletion": js(deletion.as_dict()), "deletion_task": s(deletion.task_id)}
        names, listing = Names(), Names()
        try:
            self._t.transact(
                [
                    update_op(
                        pk, k.META, sets, names, condition=tombstoned_by(names, expected_task_id)
                    ),
                    update_op(
                        k.ACCOUNTS_PK,
                        k.account_listing_sk(account_id),
                        sets,
                        listing,
                        condition=f"attribute_exists({listing.name('pk')})",
                    ),
                    {
                        "Put": {
                            "Item": deletion_entry(
                                k.account_deletion_sk(account_id), account_id, None, deletion
                            )
                        }
                    },
                ]
            )
        except TransactionCancelled:
            current = self.get_account(account_id)
            if current is None or current.status != DELETING:
                raise StateNotFound(f"account {account_id} is not being deleted") from None
            raise StateConflict(f"account {account_id}: another purge took over") from None
        updated = self.get_account(account_id)
        assert updated is not None
        return updated

    def finish_account_deletion(self, account_id: str, task_id: str) -> bool:
        pk = k.account_pk(account_id)
        meta = self._t.get(pk, k.META)
        if meta is None or get_s(meta, "deletion_task") != task_id:
            return False
        doomed: list[Mapping[str, Any]] = []
        for item in self._t.query_partition(pk):
            sk = req_s(item, "sk")
            if sk == k.META:
                continue
            doomed.append(key(pk, sk))
            key_hash = get_s(item, "key_hash")  # a key item, or a legacy user item
            if key_hash is not None:
                doomed.append(key(k.key_guard_pk(key_hash), k.META))
        self._t.batch_delete(doomed)
        names = Names()
        try:
            self._t.transact(
                [
                    {
                        "Delete": {
                            "Key": key(pk, k.META),
                            "ConditionExpression": tombstoned_by(names, task_id),
                            **names.params(),
                        }
                    },
                    {"Delete": {"Key": key(k.ACCOUNTS_PK, k.account_listing_sk(account_id))}},
                    {"Delete": {"Key": key(k.DELETIONS_PK, k.account_deletion_sk(account_id))}},
                ]
            )
        except TransactionCancelled:
            return False
        return True

    # ---------------------------------------------------------------------------------------
    # users

    def create_user(self, user: User, key_: ApiKey | None = None) -> None:
        account, put = Names(), Names()
        item: Item = {
            **key(k.account_pk(user.account_id), k.user_sk(user.user_id)),
            "account_id": s(user.account_id),
            "user_id": s(user.user_id),
            "role": s(user.role),
            "created_at": n(user.created_at),
            "status": s(ACTIVE),
            "key_count": n(0 if key_ is None else 1),
        }
        if user.generation is not None:
            item["generation"] = s(user.generation)
        ops: list[dict[str, Any]] = [
            {
                "ConditionCheck": {
                    "Key": key(k.account_pk(user.account_id), k.META),
                    "ConditionExpression": active(account),
                    **account.params(),
                }
            },
            {
                "Put": {
                    "Item": item,
                    "ConditionExpression": f"attribute_not_exists({put.name('pk')})",
                    **put.params(),
                }
            },
        ]
        if key_ is not None:
            ops += [
                {
                    "Put": {
                        "Item": key_item(key_),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {
                    "Put": {
                        "Item": guard_item(key_),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        try:
            self._t.transact(ops)
        except TransactionCancelled as exc:
            if exc.failed(0):
                raise StateNotFound(f"account {user.account_id}") from None
            if any(exc.failed(i) for i in range(1, len(ops))):
                raise StateConflict(
                    f"user {user.account_id}/{user.user_id} exists, or its key is in use"
                ) from None
            raise

    def get_user(self, account_id: str, user_id: str) -> User | None:
        item = self._t.get(k.account_pk(account_id), k.user_sk(user_id))
        return None if item is None else item_user(item)

    def list_users(self, account_id: str) -> list[User]:
        items = self._t.query_partition(k.account_pk(account_id), prefix=k.USER_PREFIX)
        return sorted((item_user(i) for i in items), key=lambda u: u.user_id)

    def _key_items(self, account_id: str, user_id: str | None) -> list[Item]:
        prefix = k.APIKEY_PREFIX if user_id is None else k.user_keys_prefix(user_id)
        return list(self._t.query_partition(k.account_pk(account_id), prefix=prefix))

    def begin_user_deletion(self, account_id: str, user_id: str, deletion: Deletion) -> User:
        pk, sk = k.account_pk(account_id), k.user_sk(user_id)
        for attempt in range(MAX_ATTEMPTS):
            item = self._t.get(pk, sk)
            if item is None:
                raise StateNotFound(f"user {account_id}/{user_id}")
            user = item_user(item)
            if user.status == DELETING:
                return user
            keys = self._key_items(account_id, user_id)
            names = Names()
            ops: list[dict[str, Any]] = [
                update_op(
                    pk,
                    sk,
                    {**tombstone(deletion), "key_count": n(0)},
                    names,
                    condition=f"{active(names)} AND {count_unchanged(names, len(keys))}",
                    removes=("key_hash",),
                )
            ]
            hashes = [req_s(i, "key_hash") for i in keys]
            legacy = legacy_key(item)
            if legacy is not None:
                hashes.append(legacy.key_hash)
            ops += [{"Delete": {"Key": key(pk, req_s(i, "sk"))}} for i in keys]
            ops += [{"Delete": {"Key": key(k.key_guard_pk(h), k.META)}} for h in hashes]
            ops.append(
                {
                    "Put": {
                        "Item": deletion_entry(
                            k.user_deletion_sk(account_id, user_id), account_id, user_id, deletion
                        )
                    }
                }
            )
            try:
                self._t.transact(ops)
            except TransactionCancelled:
                backoff(attempt)  # a key came or went meanwhile: look again
                continue
            user.status, user.deletion = DELETING, deletion
            return user
        raise StateConflict(f"user {account_id}/{user_id} keeps changing")

    def replace_user_deletion(
        self, account_id: str, user_id: str, expected_task_id: str, deletion: Deletion
    ) -> User:
        names = Names()
        try:
            self._t.transact(
                [
                    update_op(
                        k.account_pk(account_id),
                        k.user_sk(user_id),
                        {"deletion": js(deletion.as_dict()), "deletion_task": s(deletion.task_id)},
                        names,
                        condition=tombstoned_by(names, expected_task_id),
                    ),
                    {
                        "Put": {
                            "Item": deletion_entry(
                                k.user_deletion_sk(account_id, user_id),
                                account_id,
                                user_id,
                                deletion,
                            )
                        }
                    },
                ]
            )
        except TransactionCancelled:
            current = self.get_user(account_id, user_id)
            if current is None or current.status != DELETING:
                raise StateNotFound(f"user {account_id}/{user_id} is not being deleted") from None
            raise StateConflict(f"user {account_id}/{user_id}: another purge took over") from None
        updated = self.get_user(account_id, user_id)
        assert updated is not None
        return updated

    def finish_user_deletion(self, account_id: str, user_id: str, task_id: str) -> bool:
        pk = k.account_pk(account_id)
        names = Names()
        try:
            self._t.transact(
                [
                    {
                        "Delete": {
                            "Key": key(pk, k.user_sk(user_id)),
                            "ConditionExpression": tombstoned_by(names, task_id),
                            **names.params(),
                        }
                    },
                    {
                        "Delete": {
                            "Key": key(k.DELETIONS_PK, k.user_deletion_sk(account_id, user_id))
                        }
                    },
                ]
            )
        except TransactionCancelled:
            return False
        return True

    def pending_deletions(self) -> list[PendingDeletion]:
        out: list[PendingDeletion] = []
        for item in self._t.query_partition(k.DELETIONS_PK):
            raw = item.get("deletion")
            if raw is None:
                continue
            out.append(
                PendingDeletion(
                    req_s(item, "account_id"),
                    get_s(item, "user_id"),
                    Deletion.from_dict(get_json(item, "deletion")),
                )
            )
        return out

    def set_user_role(self, account_id: str, user_id: str, role: str) -> None:
        names = Names()
        try:
            self._t.client.update_item(
                TableName=self._t.name,
                Key=key(k.account_pk(account_id), k.user_sk(user_id)),
                UpdateExpression=update_expression({"role": s(role)}, names),
                ConditionExpression=active(names),
                **names.params(),
            )
        except ClientError as exc:
            if is_condition_failure(exc):
                raise StateNotFound(f"user {account_id}/{user_id}") from None
            raise

    # ---------------------------------------------------------------------------------------
    # keys

    def add_key(self, key_: ApiKey, *, replace_named: str | None = None) -> None:
        pk, sk = k.account_pk(key_.account_id), k.user_sk(key_.user_id)
        for attempt in range(MAX_ATTEMPTS):
            item = self._t.get(pk, sk)
            if item is None or item_user(item).status != ACTIVE:
                raise StateNotFound(f"user {key_.account_id}/{key_.user_id}")
            items = self._key_items(key_.account_id, key_.user_id)
            legacy = legacy_key(item)
            gone = [
                i for i in items if replace_named is not None and req_s(i, "name") == replace_named
            ]
            drop_legacy = legacy is not None and legacy.name == replace_named
            held = len(items) - len(gone) + (legacy is not None and not drop_legacy)
            if held >= MAX_KEYS_PER_USER:
                raise StateConflict(
                    f"user {key_.account_id}/{key_.user_id} holds {MAX_KEYS_PER_USER} keys already"
                )
            names, account = Names(), Names()
            ops: list[dict[str, Any]] = [
                {
                    "ConditionCheck": {
                        "Key": key(pk, k.META),
                        "ConditionExpression": active(account),
                        **account.params(),
                    }
                },
                update_op(
                    pk,
                    sk,
                    {"key_count": n(len(items) - len(gone) + 1)},
                    names,
                    condition=f"{active(names)} AND {count_unchanged(names, len(items))}",
                    removes=("key_hash",) if drop_legacy else (),
                ),
                {
                    "Put": {
                        "Item": key_item(key_),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {
                    "Put": {
                        "Item": guard_item(key_),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
            for i in gone:
                ops += [
                    {"Delete": {"Key": key(pk, req_s(i, "sk"))}},
                    {"Delete": {"Key": key(k.key_guard_pk(req_s(i, "key_hash")), k.META)}},
                ]
            if drop_legacy and legacy is not None:
                ops.append({"Delete": {"Key": key(k.key_guard_pk(legacy.key_hash), k.META)}})
            try:
                self._t.transact(ops)
                return
            except TransactionCancelled as exc:
                if exc.failed(0):
                    raise StateNotFound(f"account {key_.account_id}") from None
                if exc.failed(2) or exc.failed(3):
                    raise StateConflict("key hash or key id already in use") from None
                backoff(attempt)  # the user's keys changed meanwhile: look again
        raise StateConflict(f"user {key_.account_id}/{key_.user_id} keeps changing")

    def list_keys(self, account_id: str, user_id: str | None = None) -> list[ApiKey]:
        keys = [item_key(i) for i in self._key_items(account_id, user_id)]
        if user_id is None:
            users = list(self._t.query_partition(k.account_pk(account_id), prefix=k.USER_PREFIX))
        else:
            item = self._t.get(k.account_pk(account_id), k.user_sk(user_id))
            users = [] if item is None else [item]
        keys += [legacy for u in users if (legacy := legacy_key(u)) is not None]
        return sorted(keys, key=lambda x: (x.created_at, x.key_id))

    def delete_key(self, account_id: str, user_id: str, key_id: str) -> bool:
        pk, sk = k.account_pk(account_id), k.user_sk(user_id)
        for attempt in range(MAX_ATTEMPTS):
            user_item = self._t.get(pk, sk)
            if user_item is None:
                return False
            legacy = legacy_key(user_item)
            found = self._t.get(pk, k.api_key_sk(user_id, key_id))
            names = Names()
            if found is None:
                if legacy is None or legacy.key_id != key_id:
                    return False
                held = names.name("key_hash")
                ops: list[dict[str, Any]] = [
                    update_op(
                        pk,
                        sk,
                        {},
                        names,
                        removes=("key_hash",),
                        condition=f"{held} = {names.value(s(legacy.key_hash))}",
                    ),
                    {"Delete": {"Key": key(k.key_guard_pk(legacy.key_hash), k.META)}},
                ]
            else:
                count = len(self._key_items(account_id, user_id))
                ops = [
                    update_op(
                        pk,
                        sk,
                        {"key_count": n(max(count - 1, 0))},
                        names,
                        condition=count_unchanged(names, count),
                    ),
                    {
                        "Delete": {
                            "Key": key(pk, k.api_key_sk(user_id, key_id)),
                            "ConditionExpression": "attribute_exists(pk)",
                        }
                    },
                    {"Delete": {"Key": key(k.key_guard_pk(req_s(found, "key_hash")), k.META)}},
                ]
            try:
                self._t.transact(ops)
                return True
            except TransactionCancelled:
                backoff(attempt)  # the user's keys changed meanwhile: look again
        raise StateConflict(f"user {account_id}/{user_id} keeps changing")

    def touch_key(self, key_: ApiKey, at: float) -> None:
        try:
            self._t.client.update_item(
                TableName=self._t.name,
                Key=key(k.account_pk(key_.account_id), k.api_key_sk(key_.user_id, key_.key_id)),
                UpdateExpression="SET #u = :at",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeNames={"#u": "last_used_at"},
                ExpressionAttributeValues={":at": n(at)},
            )
        except ClientError as exc:
            if not is_condition_failure(exc):  # a key revoked (or a legacy one): nothing to do
                raise

    def resolve_key(self, key_hash: str) -> ResolvedKey | None:
        guard = self._t.get(k.key_guard_pk(key_hash), k.META)
        if guard is None:
            return None
        account_id, user_id = req_s(guard, "account_id"), req_s(guard, "user_id")
        key_id = get_s(guard, "key_id")
        pk = k.account_pk(account_id)
        wanted = [key(pk, k.META), key(pk, k.user_sk(user_id))]
        if key_id is not None:
            wanted.append(key(pk, k.api_key_sk(user_id, key_id)))
        found = {req_s(i, "sk"): i for i in self._t.batch_get(wanted)}
        account, user = found.get(k.META), found.get(k.user_sk(user_id))
        if account is None or user is None:
            return None  # a guard left behind by a race with a deletion
        if key_id is None:
            api_key = legacy_key(user)
        else:
            item = found.get(k.api_key_sk(user_id, key_id))
            api_key = None if item is None else item_key(item)
        # Re-checked on the key's own item, the source of truth, as the guard may be stale.
        if api_key is None or api_key.key_hash != key_hash:
            return None
        return ResolvedKey(api_key, item_user(user), item_account(account))
