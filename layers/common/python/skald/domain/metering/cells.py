"""Hourly cells, the running totals the plan limits read, and rollups of cells into series.

A cell is the sum of one unit for one (hour, account, user, dimensions): the ledger adds to
it atomically, so cells flushed by several processes add up. Beside the cells, each ledger
keeps two running totals per account, both fed by the same writes: the bytes stored (the
gauge's sum over all time) and the LLM tokens of each UTC day (in and out). A limit check
reads those, never a range of cells."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from skald.domain.metering.units import LLM_TOKEN_UNITS, Unit, parse_dims

GRANULARITIES = ("hour", "day", "month")


@dataclass(frozen=True, slots=True)
class UsageCell:
    account_id: str
    hour: str  # YYYY-MM-DDTHH, UTC
    user_id: str  # "" when no user is known (a system job)
    unit: str
    dims: str  # dims_key(): "k=v,k=v", "" for none
    value: int

    @property
    def day(self) -> str:
        return self.hour[:10]

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.hour, self.account_id, self.user_id, self.unit, self.dims)


@dataclass(slots=True)
class UsageTotals:
    """An account's running totals: bytes stored, and LLM tokens (in + out) per UTC day."""

    stored_bytes: int = 0
    tokens_by_day: dict[str, int] = field(default_factory=dict)

    def tokens_on(self, day: str) -> int:
        return self.tokens_by_day.get(day, 0)

    def add(self, other: UsageTotals, sign: int = 1) -> None:
        self.stored_bytes += sign * other.stored_bytes
        for day, n in other.tokens_by_day.items():
            self.tokens_by_day[day] = self.tokens_by_day.get(day, 0) + sign * n

    def copy(self) -> UsageTotals:
        return UsageTotals(self.stored_bytes, dict(self.tokens_by_day))


def totals_delta(cells: Iterable[UsageCell]) -> dict[str, UsageTotals]:
    """What a batch of cells adds to each account's running totals."""
    out: dict[str, UsageTotals] = {}
    for c in cells:
        if c.unit == Unit.BYTES_STORED:
            out.setdefault(c.account_id, UsageTotals()).stored_bytes += c.value
        elif c.unit in LLM_TOKEN_UNITS:
            t = out.setdefault(c.account_id, UsageTotals())
            t.tokens_by_day[c.day] = t.tokens_by_day.get(c.day, 0) + c.value
    return out


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    period: str  # the hour (YYYY-MM-DDTHH), day (YYYY-MM-DD) or month (YYYY-MM)
    user_id: str
    unit: str
    dims: dict[str, str]
    value: int


def period_of(hour: str, granularity: str) -> str:
    if granularity == "day":
        return hour[:10]
    if granularity == "month":
        return hour[:7]
    return hour


def rollup(cells: Iterable[UsageCell], granularity: str) -> list[SeriesPoint]:
    """Cells summed per (period, user, unit, dims), in period order, then user, unit, dims."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}")
    sums: dict[tuple[str, str, str, str], int] = {}
    for c in cells:
        k = (period_of(c.hour, granularity), c.user_id, c.unit, c.dims)
        sums[k] = sums.get(k, 0) + c.value
    return [
        SeriesPoint(period, user, unit, parse_dims(dims), value)
        for (period, user, unit, dims), value in sorted(sums.items())
    ]
