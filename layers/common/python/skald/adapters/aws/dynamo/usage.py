"""UsageLedger on DynamoDB: hourly cells and running totals as items of the state table.

Layout (beside keys.py's items, whose keys it never meets):

    item            pk                          sk                              attributes
    --------------  --------------------------  ------------------------------  -----------
    hourly cell     ACCT#{a}#USAGE#{YYYY-MM}    {YYYY-MM-DDTHH}#{u}#{unit}#{dims}  v (N)
    bytes stored    ACCT#{a}#USAGE              STORED                          v (N)
    tokens of a day ACCT#{a}#USAGE              DAY#{YYYY-MM-DD}                v (N)
    month marker    ACCT#{a}#USAGE              MONTH#{YYYY-MM}                 v (N): cells

`{a}` and `{u}` are escaped as keys.esc does; dims never hold `#` (units.dims_key).

Access patterns and why the layout is this one:

- A flush: one UpdateItem `ADD v :n` per cell and per total touched. ADD is atomic, so every
  process flushing the same cell adds up, and a cell that does not exist yet is created.
  (BatchWriteItem cannot ADD; a transaction would double the write cost and fail as a whole
  on one hot cell.) The buffer has already summed each cell over its flush interval, so a
  flush writes each cell once.
- A series: one consistent Query per month of the window, bounded by the hours on `sk`.
  One partition per account and month, as the audit records: an account's writes move to a
  fresh partition every month.
- A limit check: one BatchGetItem of `STORED` and today's `DAY#`: one store call.
- Purge: the month markers name the cell partitions to empty, then the totals partition.
- Tenancy: every partition is under `ACCT#{a}#`, an account's items
  (adapters/aws/tenancy/rules.py): the ledger is called inside the account's tenant scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skald.adapters.aws.dynamo.codec import key, n
from skald.adapters.aws.dynamo.keys import esc, unesc
from skald.adapters.aws.dynamo.table import DynamoTable
from skald.domain.metering.cells import UsageCell, UsageTotals, totals_delta

_STORED = "STORED"
_DAY = "DAY#"
_MONTH = "MONTH#"


def totals_pk(account_id: str) -> str:
    return f"ACCT#{esc(account_id)}#USAGE"


def cells_pk(account_id: str, month: str) -> str:
    return f"ACCT#{esc(account_id)}#USAGE#{month}"


def cell_sk(cell: UsageCell) -> str:
    return f"{cell.hour}#{esc(cell.user_id)}#{cell.unit}#{cell.dims}"


def _months(since_hour: str, until_hour: str) -> list[str]:
    y, m = int(since_hour[:4]), int(since_hour[5:7])
    end = (int(until_hour[:4]), int(until_hour[5:7]))
    out: list[str] = []
    while (y, m) <= end:
        out.append(f"{y:04d}-{m:02d}")
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


class DynamoUsageLedger:
    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = DynamoTable(client, table)

    def _add(self, pk: str, sk: str, value: int) -> None:
        self.client.update_item(
            TableName=self.table.name,
            Key=key(pk, sk),
            UpdateExpression="ADD #v :n",
            ExpressionAttributeNames={"#v": "v"},
            ExpressionAttributeValues={":n": n(value)},
        )

    def add(self, cells: Sequence[UsageCell]) -> None:
        months: dict[tuple[str, str], int] = {}
        for c in cells:
            if c.value:
                self._add(cells_pk(c.account_id, c.hour[:7]), cell_sk(c), c.value)
                mk = (c.account_id, c.hour[:7])
                months[mk] = months.get(mk, 0) + 1
        for account, t in totals_delta(cells).items():
            if t.stored_bytes:
                self._add(totals_pk(account), _STORED, t.stored_bytes)
            for day, value in t.tokens_by_day.items():
                if value:
                    self._add(totals_pk(account), _DAY + day, value)
        for (account, month), count in months.items():
            self._add(totals_pk(account), _MONTH + month, count)

    def cells(
        self, account_id: str, since_hour: str, until_hour: str, *, user_id: str | None = None
    ) -> list[UsageCell]:
        out: list[UsageCell] = []
        for month in _months(since_hour, until_hour):
            items = self.table.query(
                KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
                ExpressionAttributeValues={
                    ":pk": {"S": cells_pk(account_id, month)},
                    ":lo": {"S": since_hour},
                    ":hi": {"S": until_hour + "#\uffff"},
                },
                ConsistentRead=True,
            )
            for item in items:
                hour, user, unit, dims = item["sk"]["S"].split("#", 3)
                user = unesc(user)
                if user_id is not None and user != user_id:
                    continue
                out.append(UsageCell(account_id, hour, user, unit, dims, int(item["v"]["N"])))
        return out

    def totals(self, account_id: str, day: str) -> UsageTotals:
        pk = totals_pk(account_id)
        out = UsageTotals()
        for item in self.table.batch_get([key(pk, _STORED), key(pk, _DAY + day)]):
            sk, value = item["sk"]["S"], int(item["v"]["N"])
            if sk == _STORED:
                out.stored_bytes = value
            else:
                out.tokens_by_day[sk[len(_DAY) :]] = value
        return out

    def purge_account(self, account_id: str) -> int:
        pk = totals_pk(account_id)
        totals = list(self.table.query_partition(pk, keys_only=True))
        removed = 0
        for item in totals:
            sk = item["sk"]["S"]
            if sk.startswith(_MONTH):
                cells = self.table.query_partition(cells_pk(account_id, sk[len(_MONTH) :]))
                removed += self.table.batch_delete(list(cells))
        return removed + self.table.batch_delete(totals)
