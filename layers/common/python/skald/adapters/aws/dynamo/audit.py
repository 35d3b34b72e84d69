"""AuditLog on DynamoDB: audit records as items of the single state table, and their keys.

Layout (beside the items of keys.py, whose key strings it never meets):

    item          pk                      sk                    other key attributes
    ------------  ----------------------  --------------------  ------------------------------
    audit record  AUDIT#{a}#{YYYY-MM}     {created:020.6f}#{id}  gsi1pk AUDITS#{YYYY-MM}#{shard},
                                                                 gsi1sk {created:020.6f}#{id}#{a},
                                                                 ttl = expires_at

`{a}` is the account acted on (escaped as keys.esc does), `{YYYY-MM}` the UTC month of
`created_at`, `{id}` the record id (hex), `{shard}` a stable hash of the id modulo
AUDIT_SHARDS.

Access patterns and why the layout is this one:

- Append: one conditional PutItem (`attribute_not_exists(pk)`): a record is never
  overwritten. Settle: one UpdateItem of the outcome fields, on the condition that the record
  exists and is still pending, so a settled record never changes again.
- An account's records, newest first (an account admin's view, root filtering on one
  account): one strongly consistent Query per month of the window, newest month first, each
  descending over `sk` bounded by the window. One partition per account and month: an
  account's writes move to a fresh partition every month instead of heating one forever, and
  a listing over the retention (400 days by default) reads 14 partitions.
- Every account's records (root's view): `gsi1`, on partitions `AUDITS#{month}#{shard}`; the
  shards of a month are queried descending and merged by `gsi1sk`. Sharding spreads the
  writes of all accounts over AUDIT_SHARDS GSI partitions per month. `gsi1` is eventually
  consistent, like every GSI: a record written a moment ago (or its outcome) may show a moment
  later there; an account's own view reads the table itself. No table change: `gsi1` exists
  for tasks (`ACCT#{a}#TASKS`) and unsealed commits (`OUTBOX#{n}`), which never start with
  `AUDITS#`.
- Retention: `ttl` (the table's TTL attribute) is the record's `expires_at`, so DynamoDB
  deletes it (within days of that time); reads skip an expired item not yet deleted.
- Totals: OpenViking's listing reports the count of every matching record, so a listing reads
  the whole window once (filters applied here, by AuditQuery.matches, the rule every adapter
  shares) and keeps only the page asked for.
"""

from __future__ import annotations

import heapq
import time
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from skald.adapters.aws.dynamo.codec import (
    Item,
    Names,
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
from skald.adapters.aws.dynamo.keys import GSI1, esc, stamp, unesc
from skald.adapters.aws.dynamo.table import DynamoTable, is_condition_failure
from skald.domain.ops.audit import PENDING, AuditPage, AuditQuery, AuditRecord, Outcome

AUDIT_SHARDS = 4
_PREFIX = "AUDIT#"
_ALL_PREFIX = "AUDITS#"
_OPTIONAL = ("key_id", "request_id", "source_ip", "method", "route", "error_code", "error_message")


def month_of(epoch: float) -> str:
    return datetime.fromtimestamp(max(epoch, 0.0), UTC).strftime("%Y-%m")


def months(since: float, until: float) -> list[str]:
    """The UTC months from `until`'s back to `since`'s, newest first."""
    first, last = month_of(since), month_of(until)
    year, month = int(last[:4]), int(last[5:])
    out = []
    while True:
        current = f"{year:04d}-{month:02d}"
        out.append(current)
        if current <= first:
            return out
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)


def audit_pk(account_id: str, month: str) -> str:
    return f"{_PREFIX}{esc(account_id)}#{month}"


def audit_sk(created_at: float, record_id: str) -> str:
    return f"{stamp(created_at)}#{record_id}"


def audit_shard(record_id: str) -> int:
    # crc32, not hash(): the shard must be the same in every process.
    return zlib.crc32(record_id.encode()) % AUDIT_SHARDS


def audit_gsi1pk(month: str, shard: int) -> str:
    return f"{_ALL_PREFIX}{month}#{shard}"


def audit_gsi1sk(created_at: float, account_id: str, record_id: str) -> str:
    # Time, then the id: the order of an account's partition (and of the SQLite adapter).
    return f"{stamp(created_at)}#{record_id}#{esc(account_id)}"


def _window(q: AuditQuery) -> tuple[str, str]:
    """Sort-key bounds of the window: a stamp sorts like its time; `~` follows every id."""
    return stamp(q.since), stamp(q.until) + "#~"


def record_item(record: AuditRecord) -> Item:
    month = month_of(record.created_at)
    item: Item = {
        **key(audit_pk(record.account_id, month), audit_sk(record.created_at, record.record_id)),
        "gsi1pk": s(audit_gsi1pk(month, audit_shard(record.record_id))),
        "gsi1sk": s(audit_gsi1sk(record.created_at, record.account_id, record.record_id)),
        "ttl": n(int(record.expires_at)),
        "record_id": s(record.record_id),
        "account_id": s(record.account_id),
        "actor_account_id": s(record.actor_account_id),
        "user_id": s(record.user_id),
        "role": s(record.role),
        "action": s(record.action),
        "api_type": s(record.api_type),
        "target": s(record.target),
        "created_at": n(record.created_at),
        "expires_at": n(record.expires_at),
        **_settled(record),
    }
    for name in _OPTIONAL:
        value = getattr(record, name)
        if value is not None:
            item[name] = s(value)
    return item


def _settled(record: AuditRecord) -> Item:
    item: Item = {
        "outcome": s(record.outcome),
        "status_code": n(record.status_code),
        "duration_ms": n(record.duration_ms),
        "detail": js(record.detail),
    }
    if record.error_details is not None:
        item["error_details"] = js(record.error_details)
    return item


def item_record(item: Item) -> AuditRecord:
    return AuditRecord(
        record_id=req_s(item, "record_id"),
        account_id=req_s(item, "account_id"),
        actor_account_id=req_s(item, "actor_account_id"),
        user_id=req_s(item, "user_id"),
        role=req_s(item, "role"),
        action=req_s(item, "action"),
        target=req_s(item, "target"),
        created_at=req_f(item, "created_at"),
        expires_at=req_f(item, "expires_at"),
        outcome=Outcome(req_s(item, "outcome")),
        status_code=req_i(item, "status_code"),
        duration_ms=req_f(item, "duration_ms"),
        error_details=get_json(item, "error_details"),
        detail=get_json(item, "detail") or {},
        **{name: get_s(item, name) for name in _OPTIONAL},
    )


def account_of_pk(pk: str) -> str:
    """The account of an audit partition key (tests and tools)."""
    return unesc(pk[len(_PREFIX) :].rsplit("#", 1)[0])


class DynamoAuditLog:
    def __init__(self, client: Any, table: str, *, clock: Callable[[], float] = time.time) -> None:
        self._t = DynamoTable(client, table)
        self._clock = clock

    def append(self, record: AuditRecord) -> None:
        try:
            self._t.client.put_item(
                TableName=self._t.name,
                Item=record_item(record),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            if is_condition_failure(exc):
                raise ValueError(f"audit record {record.record_id} exists") from None
            raise

    def settle(self, record: AuditRecord) -> bool:
        names = Names()
        sets = _settled(record)
        removes = [] if record.error_details is not None else ["error_details"]
        for name in ("error_code", "error_message"):
            value = getattr(record, name)
            if value is None:
                removes.append(name)
            else:
                sets[name] = s(value)
        expression = update_expression(sets, names, removes=removes)
        condition = (
            f"attribute_exists({names.name('pk')})"
            f" AND {names.name('outcome')} = {names.value(s(PENDING))}"
            f" AND {names.name('ttl')} > {names.value(n(int(self._clock())))}"
        )
        month = month_of(record.created_at)
        try:
            self._t.client.update_item(
                TableName=self._t.name,
                Key=key(
                    audit_pk(record.account_id, month),
                    audit_sk(record.created_at, record.record_id),
                ),
                UpdateExpression=expression,
                ConditionExpression=condition,
                **names.params(),
            )
        except ClientError as exc:
            if is_condition_failure(exc):
                return False
            raise
        return True

    # ---------------------------------------------------------------------------------------
    # listing

    def _account_items(self, q: AuditQuery) -> Iterator[Item]:
        assert q.account_id is not None
        low, high = _window(q)
        for month in months(q.since, q.until):
            names = Names()
            cond = (
                f"{names.name('pk')} = {names.value(s(audit_pk(q.account_id, month)))}"
                f" AND {names.name('sk')} BETWEEN {names.value(s(low))}"
                f" AND {names.value(s(high))}"
            )
            yield from self._t.query(
                KeyConditionExpression=cond,
                ConsistentRead=True,
                ScanIndexForward=False,
                **names.params(),
            )

    def _all_items(self, q: AuditQuery) -> Iterator[Item]:
        low, high = _window(q)
        for month in months(q.since, q.until):
            shards = []
            for shard in range(AUDIT_SHARDS):
                names = Names()
                cond = (
                    f"{names.name('gsi1pk')} = "
                    f"{names.value(s(audit_gsi1pk(month, shard)))}"
                    f" AND {names.name('gsi1sk')} BETWEEN {names.value(s(low))}"
                    f" AND {names.value(s(high))}"
                )
                shards.append(
                    self._t.query(
                        IndexName=GSI1,
                        KeyConditionExpression=cond,
                        ScanIndexForward=False,
                        **names.params(),
                    )
                )
            yield from heapq.merge(*shards, key=lambda i: req_s(i, "gsi1sk"), reverse=True)

    def query(self, query: AuditQuery) -> AuditPage:
        items = (
            self._account_items(query) if query.account_id is not None else self._all_items(query)
        )
        total = succeeded = 0
        page: list[AuditRecord] = []
        end = query.offset + query.page_size
        for item in items:
            record = item_record(item)
            # (matches() also skips an expired record DynamoDB has not deleted yet)
            if not query.matches(record):
                continue
            if query.offset <= total < end:
                page.append(record)
            total += 1
            succeeded += record.succeeded
        return AuditPage(total, succeeded, page)
