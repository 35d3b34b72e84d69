"""Metering: the Meter every billable unit is recorded on, and the UsageLedger that keeps the
hourly cells durably (the local state database; the DynamoDB state table)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from skald.domain.metering.cells import UsageCell, UsageTotals


@runtime_checkable
class Meter(Protocol):
    def record(
        self,
        account_id: str,
        user_id: str,
        unit: str,
        amount: int,
        dims: Mapping[str, str] | None = None,
    ) -> None:
        """Files `amount` of `unit` under the current hour. Never raises, never blocks on
        I/O: what cannot be kept is counted as dropped."""
        ...


@runtime_checkable
class UsageLedger(Protocol):
    def add(self, cells: Sequence[UsageCell]) -> None:
        """Adds each cell's value to its stored cell (atomically: concurrent writers add up)
        and to its account's running totals. The cells of one call name one account."""
        ...

    def cells(
        self, account_id: str, since_hour: str, until_hour: str, *, user_id: str | None = None
    ) -> list[UsageCell]:
        """The account's cells with since_hour <= hour <= until_hour, hour order."""
        ...

    def totals(self, account_id: str, day: str) -> UsageTotals:
        """The account's bytes stored, and its LLM tokens of `day` (YYYY-MM-DD), in one read."""
        ...

    def purge_account(self, account_id: str) -> int:
        """Removes every cell and total of an account; how many items went."""
        ...
