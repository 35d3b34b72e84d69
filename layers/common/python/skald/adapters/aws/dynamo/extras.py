"""Small DynamoDB-backed collaborators of the AWS backend, in the same single table:

    item                pk                              sk          notes
    queue counters      QUEUE#{queue}                   COUNTERS    numeric attributes, ADD-ed
    dedup claim         QUEUE#{queue}                   DEDUP#{key} job_id, until, ttl
    recall ledger       SESS#{a}#{u}#{s}                RECALL      turns (JSON), turn, version

Counters are atomic ADDs; a dedup claim is a conditional put that only replaces an expired
claim; the recall ledger is compare-and-swap on a version number.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.dynamo.keys import esc, session_pk
from skald.ports import RECALL_LEDGER_MAX_TURNS

COUNTERS = "COUNTERS"
RECALL = "RECALL"


def _queue_pk(queue: str) -> str:
    return f"QUEUE#{esc(queue)}"


def _conditional_failed(exc: ClientError) -> bool:
    code: str = exc.response.get("Error", {}).get("Code", "")
    return code == "ConditionalCheckFailedException"


class DynamoJobCounters:
    """`JobCounters` of SqsJobQueue (processed / failed_attempts per queue)."""

    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = table

    def incr(self, queue: str, name: str, by: int = 1) -> None:
        self.client.update_item(
            TableName=self.table,
            Key={"pk": {"S": _queue_pk(queue)}, "sk": {"S": COUNTERS}},
            UpdateExpression="ADD #n :by",
            ExpressionAttributeNames={"#n": name},
            ExpressionAttributeValues={":by": {"N": str(by)}},
        )

    def get(self, queue: str) -> dict[str, int]:
        item = (
            self.client.get_item(
                TableName=self.table,
                Key={"pk": {"S": _queue_pk(queue)}, "sk": {"S": COUNTERS}},
                ConsistentRead=True,
            ).get("Item")
            or {}
        )
        return {k: int(v["N"]) for k, v in item.items() if "N" in v}


class DynamoDedupRegistry:
    """`DedupRegistry` of SqsJobQueue: which not-yet-delivered job holds (queue, dedup key)."""

    def __init__(self, client: Any, table: str, *, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.table = table
        self.clock = clock

    def _key(self, queue: str, key: str) -> dict[str, Any]:
        return {"pk": {"S": _queue_pk(queue)}, "sk": {"S": f"DEDUP#{esc(key)}"}}

    def claim(self, queue: str, key: str, job_id: str, ttl_s: float) -> str:
        now = self.clock()
        for _ in range(5):
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item={
                        **self._key(queue, key),
                        "job_id": {"S": job_id},
                        "until": {"N": repr(now + ttl_s)},
                        "ttl": {"N": str(int(now + ttl_s) + 3600)},
                    },
                    # A claim is live for [claimed, until): at `until` it has expired.
                    ConditionExpression="attribute_not_exists(pk) OR #u <= :now",
                    ExpressionAttributeNames={"#u": "until"},
                    ExpressionAttributeValues={":now": {"N": repr(now)}},
                )
                return job_id
            except ClientError as exc:
                if not _conditional_failed(exc):
                    raise
            held = self.client.get_item(
                TableName=self.table, Key=self._key(queue, key), ConsistentRead=True
            ).get("Item")
            if held is not None and float(held["until"]["N"]) > now:
                return str(held["job_id"]["S"])
        return job_id

    def release(self, queue: str, key: str, job_id: str) -> None:
        try:
            self.client.delete_item(
                TableName=self.table,
                Key=self._key(queue, key),
                ConditionExpression="job_id = :j",
                ExpressionAttributeValues={":j": {"S": job_id}},
            )
        except ClientError as exc:
            if not _conditional_failed(exc):
                raise


class DynamoRecallLedger:
    """`RecallLedger` on one item per session, written with compare-and-swap."""

    def __init__(
        self, client: Any, table: str, *, max_turns: int = RECALL_LEDGER_MAX_TURNS
    ) -> None:
        self.client = client
        self.table = table
        self.max_turns = max_turns

    def _key(self, account: str, user: str, session_id: str) -> dict[str, Any]:
        return {"pk": {"S": session_pk(account, user, session_id)}, "sk": {"S": RECALL}}

    def _load(self, key: dict[str, Any]) -> tuple[list[dict[str, Any]], int, int]:
        item = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
        if item is None:
            return [], 0, 0
        return (json.loads(item["turns"]["S"]), int(item["turn"]["N"]), int(item["version"]["N"]))

    def recent(self, account: str, user: str, session_id: str, turns: int) -> list[set[str]]:
        if turns <= 0:
            return []
        history, _, _ = self._load(self._key(account, user, session_id))
        return [set(t["uris"]) for t in reversed(history[-turns:])]

    def record(
        self, account: str, user: str, session_id: str, uris: Sequence[str], now: float
    ) -> int:
        key = self._key(account, user, session_id)
        for _ in range(20):
            history, turn, version = self._load(key)
            turn += 1
            history = [*history, {"turn": turn, "at": now, "uris": sorted(set(uris))}]
            history = history[-self.max_turns :]
            condition = "attribute_not_exists(pk)" if version == 0 else "version = :v"
            values: dict[str, Any] = {":v": {"N": str(version)}} if version else {}
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item={
                        **key,
                        "turns": {"S": json.dumps(history)},
                        "turn": {"N": str(turn)},
                        "version": {"N": str(version + 1)},
                    },
                    ConditionExpression=condition,
                    **({"ExpressionAttributeValues": values} if values else {}),
                )
                return turn
            except ClientError as exc:
                if not _conditional_failed(exc):
                    raise
        raise RuntimeError("recall ledger: too many concurrent writers")
