"""The parts DynamoAccounts builds its transactions from (accounts.py): the conditions that
an item is active, tombstoned by a task, or holds an unchanged key count; the tombstone
attributes and the deletion list entry; a key's guard item; one Update operation. And the
writes of an account's settings (`AccountSettingsWrites`, a mixin of DynamoAccounts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skald.adapters.aws.dynamo import keys as k
from skald.adapters.aws.dynamo.codec import Item, Names, js, key, n, s, update_expression
from skald.adapters.aws.dynamo.state_items import item_account
from skald.adapters.aws.dynamo.table import DynamoTable, TransactionCancelled
from skald.ports import StateNotFound
from skald.ports.accounts import ACTIVE, DELETING, Account, ApiKey, Deletion


def active(names: Names) -> str:
    """The item exists and is not tombstoned (items older than tombstones have no status)."""
    status = names.name("status")
    return (
        f"attribute_exists({names.name('pk')}) AND (attribute_not_exists({status})"
        f" OR {status} = {names.value(s(ACTIVE))})"
    )


def tombstoned_by(names: Names, task_id: str) -> str:
    return (
        f"{names.name('status')} = {names.value(s(DELETING))}"
        f" AND {names.name('deletion_task')} = {names.value(s(task_id))}"
    )


def count_unchanged(names: Names, count: int) -> str:
    """The user item still counts `count` keys (items older than the count have none)."""
    held = names.name("key_count")
    if count == 0:
        return f"(attribute_not_exists({held}) OR {held} = {names.value(n(0))})"
    return f"{held} = {names.value(n(count))}"


def guard_item(key_: ApiKey) -> Item:
    return {
        **key(k.key_guard_pk(key_.key_hash), k.META),
        "account_id": s(key_.account_id),
        "user_id": s(key_.user_id),
        "key_id": s(key_.key_id),
    }


def tombstone(deletion: Deletion) -> dict[str, Any]:
    return {
        "status": s(DELETING),
        "deletion": js(deletion.as_dict()),
        "deletion_task": s(deletion.task_id),
    }


def deletion_entry(sk: str, account_id: str, user_id: str | None, deletion: Deletion) -> Item:
    item: Item = {
        **key(k.DELETIONS_PK, sk),
        "account_id": s(account_id),
        "deletion": js(deletion.as_dict()),
    }
    if user_id is not None:
        item["user_id"] = s(user_id)
    return item


def update_op(
    pk: str,
    sk: str,
    sets: Mapping[str, Any],
    names: Names,
    *,
    condition: str,
    removes: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "Update": {
            "Key": key(pk, sk),
            "UpdateExpression": update_expression(sets, names, removes=removes),
            "ConditionExpression": condition,
            **names.params(),
        }
    }


class AccountSettingsWrites:
    """AccountStore.update_account_settings; mixed into DynamoAccounts, which owns `_t`."""

    _t: DynamoTable

    def update_account_settings(self, account_id: str, settings: dict[str, Any]) -> Account:
        # The account item and its copy in the listing change together, on an active account.
        sets = {"settings": js(settings)}
        names, listing = Names(), Names()
        try:
            self._t.transact(
                [
                    update_op(
                        k.account_pk(account_id), k.META, sets, names, condition=active(names)
                    ),
                    update_op(
                        k.ACCOUNTS_PK,
                        k.account_listing_sk(account_id),
                        sets,
                        listing,
                        condition=f"attribute_exists({listing.name('pk')})",
                    ),
                ]
            )
        except TransactionCancelled:
            raise StateNotFound(f"account {account_id}") from None
        item = self._t.get(k.account_pk(account_id), k.META)
        if item is None:  # removed right after
            raise StateNotFound(f"account {account_id}")
        return item_account(item)
