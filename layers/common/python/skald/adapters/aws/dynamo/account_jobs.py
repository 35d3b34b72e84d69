"""`AccountCounts` of SqsJobQueue on the state table (sqs/account_counts.py says what they
count and how a count heals):

    item                pk                      sk                      notes
    jobs of a day       QUEUE#_accounts.{n}     ACCT#{a}#JOBS#{day}     n (ADD-ed), ttl
    running slots       QUEUE#_accounts.{n}     ACCT#{a}#RUN#{queue}    slots: holder -> until, v

`{n}` spreads the accounts over a few partitions (a hash of the account): every enqueue and
every settled job writes its account's item. The partitions are the control plane's (`QUEUE#`:
written with the function's own credentials); the sort key names the account.

Reading an account's count is one Query (its day buckets, a handful); a bucket past its
expiry is ignored before DynamoDB's TTL removes it, and a settling never creates a bucket (a
condition on its existence), so an expired bucket stays gone. A slot is taken by a
compare-and-set on the item's version after pruning expired holders: two workers cannot both
take the last slot; releasing one is a plain REMOVE.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.dynamo.keys import esc
from skald.domain.ops.fairness import bucket_expiry

log = logging.getLogger(__name__)

SHARDS = 8
_TAKE_TRIES = 4


def _conditional_failed(exc: ClientError) -> bool:
    return str(exc.response.get("Error", {}).get("Code", "")) == "ConditionalCheckFailedException"


def _pk(account: str) -> str:
    return f"QUEUE#_accounts.{zlib.crc32(account.encode()) % SHARDS}"


class DynamoAccountCounts:
    def __init__(
        self,
        client: Any,
        table: str,
        *,
        retention_days: int = 4,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.table = table
        self.retention_days = retention_days
        self.clock = clock

    def _jobs_key(self, account: str, day: int) -> dict[str, Any]:
        return {"pk": {"S": _pk(account)}, "sk": {"S": f"ACCT#{account}#JOBS#{day:08d}"}}

    def add(self, account: str, day: int, by: int) -> None:
        key = self._jobs_key(account, day)
        if by >= 0:
            self.client.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression="ADD #n :by SET #t = :ttl",
                ExpressionAttributeNames={"#n": "n", "#t": "ttl"},
                ExpressionAttributeValues={
                    ":by": {"N": str(by)},
                    ":ttl": {"N": str(bucket_expiry(day, self.retention_days))},
                },
            )
            return
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression="ADD #n :by",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeNames={"#n": "n"},
                ExpressionAttributeValues={":by": {"N": str(by)}},
            )
        except ClientError as exc:
            if not _conditional_failed(exc):
                raise

    def count(self, account: str) -> int:
        now = self.clock()
        items = self.client.query(
            TableName=self.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": _pk(account)},
                ":prefix": {"S": f"ACCT#{account}#JOBS#"},
            },
        ).get("Items", [])
        live = sum(
            int(item["n"]["N"])
            for item in items
            if "n" in item and float(item.get("ttl", {}).get("N", "0")) > now
        )
        return max(0, live)

    # -- running slots ---------------------------------------------------------------------

    def _slots_key(self, key: str) -> dict[str, Any]:
        account, _, queue = key.partition("/")
        return {"pk": {"S": _pk(account)}, "sk": {"S": f"ACCT#{account}#RUN#{esc(queue)}"}}

    def take_slot(self, key: str, holder: str, cap: int, hold_s: float) -> bool:
        """`key`: "{account}/{queue}"."""
        item_key = self._slots_key(key)
        for _ in range(_TAKE_TRIES):
            now = self.clock()
            item = self.client.get_item(
                TableName=self.table, Key=item_key, ConsistentRead=True
            ).get("Item")
            slots = {
                h: float(v["N"]) for h, v in (item or {}).get("slots", {}).get("M", {}).items()
            }
            version = int((item or {}).get("v", {}).get("N", "0"))
            live = {h: until for h, until in slots.items() if until > now}
            if holder not in live and len(live) >= cap:
                return False
            live[holder] = now + hold_s
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item={
                        **item_key,
                        "slots": {"M": {h: {"N": repr(u)} for h, u in live.items()}},
                        "v": {"N": str(version + 1)},
                        "ttl": {"N": str(int(max(live.values())) + 3600)},
                    },
                    ConditionExpression="attribute_not_exists(pk) OR #v = :v",
                    ExpressionAttributeNames={"#v": "v"},
                    ExpressionAttributeValues={":v": {"N": str(version)}},
                )
                return True
            except ClientError as exc:
                if not _conditional_failed(exc):
                    raise
        # Others kept changing the slots: a busy account; the job waits its turn.
        return False

    def release_slot(self, key: str, holder: str) -> None:
        # The version moves too: a take racing this one re-reads instead of writing back
        # the slot released here.
        try:
            self.client.update_item(
                TableName=self.table,
                Key=self._slots_key(key),
                UpdateExpression="REMOVE slots.#h ADD #v :one",
                ConditionExpression="attribute_exists(slots)",
                ExpressionAttributeNames={"#h": holder, "#v": "v"},
                ExpressionAttributeValues={":one": {"N": "1"}},
            )
        except ClientError as exc:
            if not _conditional_failed(exc):
                raise

    def drop(self, account: str) -> None:
        """Deletes the account's buckets and slots (its removal's purge). A job of it settled
        afterwards brings nothing back (settling never creates a bucket); a slot taken for a
        job the gate then drops expires with its TTL."""
        pages = self.client.get_paginator("query").paginate(
            TableName=self.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": _pk(account)},
                ":prefix": {"S": f"ACCT#{account}#"},
            },
            ProjectionExpression="pk, sk",
        )
        for page in pages:
            for item in page.get("Items", []):
                self.client.delete_item(
                    TableName=self.table, Key={"pk": item["pk"], "sk": item["sk"]}
                )
