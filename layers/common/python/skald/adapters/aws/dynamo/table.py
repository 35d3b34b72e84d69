"""One DynamoDB table through the low-level client: consistent reads, paginated queries,
batch reads and writes that retry unprocessed items, and transactions whose cancellation
reasons are reported per item (conflicts with another transaction are retried)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.dynamo.codec import Item, Names, key, s

_BATCH_WRITE = 25  # BatchWriteItem limit
_BATCH_GET = 100  # BatchGetItem limit
MAX_ATTEMPTS = 8  # unprocessed batch items, transaction conflicts


def backoff(attempt: int, *, base_s: float = 0.01, cap_s: float = 0.5) -> None:
    # Full jitter: concurrent losers of a race must not retry in lock-step.
    time.sleep(random.uniform(0, min(cap_s, base_s * 2**attempt)))


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

    def query_partition(
        self, pk: str, *, prefix: str | None = None, keys_only: bool = False
    ) -> Iterator[Item]:
        names = Names()
        cond = f"{names.name('pk')} = {names.value(s(pk))}"
        if prefix is not None:
            cond += f" AND begins_with({names.name('sk')}, {names.value(s(prefix))})"
        extra: dict[str, Any] = {}
        if keys_only:
            extra["ProjectionExpression"] = f"{names.name('pk')}, {names.name('sk')}"
        return self.query(
            KeyConditionExpression=cond, ConsistentRead=True, **extra, **names.params()
        )

    def batch_get(self, keys: list[dict[str, Any]]) -> list[Item]:
        """Consistent reads; missing items are simply absent from the result."""
        out: list[Item] = []
        for start in range(0, len(keys), _BATCH_GET):
            pending: dict[str, Any] = {
                self.name: {"Keys": keys[start : start + _BATCH_GET], "ConsistentRead": True}
            }
            attempt = 0
            while pending:
                resp = self.client.batch_get_item(RequestItems=pending)
                out.extend(resp.get("Responses", {}).get(self.name, []))
                pending = resp.get("UnprocessedKeys") or {}
                if pending:
                    attempt += 1
                    if attempt > MAX_ATTEMPTS:
                        raise RuntimeError(f"{self.name}: batch get kept being throttled")
                    backoff(attempt, base_s=0.05, cap_s=2.0)
        return out

    def batch_write(self, requests: list[dict[str, Any]]) -> None:
        """PutRequest / DeleteRequest entries, 25 per call, unprocessed ones retried."""
        for start in range(0, len(requests), _BATCH_WRITE):
            pending: dict[str, Any] = {self.name: requests[start : start + _BATCH_WRITE]}
            attempt = 0
            while pending:
                resp = self.client.batch_write_item(RequestItems=pending)
                pending = resp.get("UnprocessedItems") or {}
                if pending:
                    attempt += 1
                    if attempt > MAX_ATTEMPTS:
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
                    c in ("None", "TransactionConflict") for c in codes
                )
                if conflict_only and attempt < MAX_ATTEMPTS:
                    attempt += 1
                    backoff(attempt)
                    continue
                raise TransactionCancelled(codes) from None
