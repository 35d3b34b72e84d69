"""MeteringService: an account's usage read back from the ledger: the series of the usage
route, the billing CSV, and OpenViking's console views (today's tokens and retrievals, the
token series, the context writes by hour).

Reads flush this process's buffer first, so what a caller just did is in what it reads."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from skald.domain.errors import InvalidArgument
from skald.domain.metering.cells import GRANULARITIES, UsageCell, rollup
from skald.domain.metering.units import Unit, hour_of, parse_dims
from skald.domain.timefmt import iso_utc, parse_time_bound
from skald.ports import UsageLedger
from skald.services.metering.buffer import UsageBuffer
from skald.services.metering.results import (
    ContextCommitRow,
    ContextCommits,
    ContextCounts,
    DashboardSummary,
    SeriesItem,
    TodayRetrievals,
    TodayTokens,
    TokenDay,
    TokenSeries,
    UsageSeries,
)

MAX_HOURS = 24 * 366 * 2  # the longest window one read covers
CSV_COLUMNS = ("period", "account_id", "user_id", "unit", "dims", "value")
CONTEXT_OPS = ("add_resource", "add_skill", "session_add_message", "session_commit")


class MeteringService:
    def __init__(
        self,
        ledger: Callable[[], UsageLedger | None],
        buffer: UsageBuffer,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._ledger = ledger
        self.buffer = buffer
        self.clock = clock or (lambda: datetime.now(UTC).timestamp())

    def _cells(
        self, account_id: str, since: float, until: float, user_id: str | None
    ) -> list[UsageCell]:
        ledger = self._ledger()
        if ledger is None:
            return []
        self.buffer.flush()
        return ledger.cells(account_id, hour_of(since), hour_of(until), user_id=user_id)

    # ------------------------------------------------------------------ the usage route

    def window(self, from_: str | None, to: str | None) -> tuple[float, float]:
        """[from, to] as epochs: ISO-8601 times or dates (a date `to` means its whole day);
        by default the last 30 days."""
        now = self.clock()
        until = _parse(to, "to", end=True, now=now) if to else now
        since = _parse(from_, "from", end=False, now=now) if from_ else until - 30 * 86400
        if since > until:
            raise InvalidArgument("'from' is after 'to'")
        if (until - since) / 3600 > MAX_HOURS:
            raise InvalidArgument(f"the window spans more than {MAX_HOURS} hours")
        return since, until

    def series(
        self,
        account_id: str,
        *,
        from_: str | None,
        to: str | None,
        granularity: str | None,
        user_id: str | None,
    ) -> UsageSeries:
        gran = granularity or "day"
        if gran not in GRANULARITIES:
            raise InvalidArgument(f"granularity must be one of {', '.join(GRANULARITIES)}")
        since, until = self.window(from_, to)
        points = rollup(self._cells(account_id, since, until, user_id), gran)
        totals: dict[str, int] = {}
        for p in points:
            totals[p.unit] = totals.get(p.unit, 0) + p.value
        return UsageSeries(
            account_id,
            iso_utc(since),
            iso_utc(until),
            gran,
            user_id,
            totals,
            [SeriesItem(p.period, p.user_id, p.unit, p.dims, p.value) for p in points],
        )

    def csv(self, series: UsageSeries) -> str:
        """One row per period x user x unit x dims, for billing."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for i in series.items:
            dims = ";".join(f"{k}={v}" for k, v in sorted(i.dims.items()))
            writer.writerow((i.period, series.account_id, i.user_id, i.unit, dims, i.value))
        return out.getvalue()

    # ------------------------------------------------------------------ the console's views

    def dashboard(
        self, account_id: str, user_id: str | None, tz_name: str | None, counts: ContextCounts
    ) -> DashboardSummary:
        """The dashboard's cards: what the account holds, and today's (viewer's day) tokens
        and retrievals."""
        tz = timezone(tz_name)
        today = datetime.fromtimestamp(self.clock(), tz).date()
        start, end = _day_window(today, today, tz)
        cells = self._cells(account_id, start, end - 1, user_id)
        cells = [c for c in cells if start <= _hour_epoch(c.hour) < end]
        tokens = {"vlm_input": 0, "vlm_output": 0, "embedding_input": 0}
        retrievals = {"find": 0, "search": 0}
        for c in cells:
            key = _token_key(c)
            if key is not None:
                tokens[key] += c.value
            if c.unit == Unit.OPERATIONS:
                op = parse_dims(c.dims).get("op", "")
                if op in retrievals:
                    retrievals[op] += c.value
        return DashboardSummary(
            counts,
            TodayTokens(**tokens, total=sum(tokens.values())),
            TodayRetrievals(**retrievals, total=sum(retrievals.values())),
        )

    def token_series(
        self,
        account_id: str,
        user_id: str | None,
        start_date: str,
        end_date: str,
        tz_name: str | None,
    ) -> TokenSeries:
        tz = timezone(tz_name)
        days = _date_range(start_date, end_date)
        start, end = _day_window(date.fromisoformat(days[0]), date.fromisoformat(days[-1]), tz)
        rows: dict[str, dict[str, Any]] = {
            d: {"date": d, "vlm_input": 0, "vlm_output": 0, "embedding_input": 0} for d in days
        }
        for c in self._cells(account_id, start, end - 1, user_id):
            local = datetime.fromtimestamp(_hour_epoch(c.hour), tz).date().isoformat()
            key = _token_key(c)
            if key is not None and local in rows:
                rows[local][key] += c.value
        return TokenSeries(start_date, end_date, "day", [TokenDay(**rows[d]) for d in days])

    def context_commits(
        self,
        account_id: str,
        user_id: str | None,
        start_date: str,
        end_date: str,
        bucket: str,
        tz_name: str | None,
    ) -> ContextCommits:
        tz = timezone(tz_name)
        size = 4 if bucket == "4h" else 1
        days = _date_range(start_date, end_date)
        start, end = _day_window(date.fromisoformat(days[0]), date.fromisoformat(days[-1]), tz)
        rows: dict[tuple[str, int], dict[str, Any]] = {
            (d, h): _context_row(d, h) for d in days for h in range(0, 24, size)
        }
        for c in self._cells(account_id, start, end - 1, user_id):
            if c.unit != Unit.OPERATIONS:
                continue
            op = parse_dims(c.dims).get("op", "")
            if op not in CONTEXT_OPS:
                continue
            local = datetime.fromtimestamp(_hour_epoch(c.hour), tz)
            row = rows.get((local.date().isoformat(), (local.hour // size) * size))
            if row is not None:
                row[op] += c.value
                row["total"] += c.value
        items = [ContextCommitRow(**rows[k]) for k in sorted(rows)]
        return ContextCommits(start_date, end_date, bucket, items)


def timezone(name: str | None) -> tzinfo:
    if not name:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(f"unknown timezone: {name}") from None


def _token_key(c: UsageCell) -> str | None:
    if c.unit == Unit.LLM_TOKENS_IN:
        return "vlm_input"
    if c.unit == Unit.LLM_TOKENS_OUT:
        return "vlm_output"
    if c.unit == Unit.TEXTS_EMBEDDED:
        # OpenViking counts embedding input tokens; Skald meters texts embedded.
        return "embedding_input"
    return None


def _context_row(day: str, hour: int) -> dict[str, Any]:
    return {"date": day, "hour": hour, "total": 0, **dict.fromkeys(CONTEXT_OPS, 0)}


def _date_range(start: str, end: str) -> list[str]:
    try:
        first, last = date.fromisoformat(start), date.fromisoformat(end)
    except ValueError:
        raise InvalidArgument("start_date and end_date are YYYY-MM-DD") from None
    if last < first:
        raise InvalidArgument("end_date is before start_date")
    if (last - first).days > 366:
        raise InvalidArgument("the range spans more than 366 days")
    return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def _day_window(first: date, last: date, tz: tzinfo) -> tuple[float, float]:
    start = datetime(first.year, first.month, first.day, tzinfo=tz)
    end = datetime(last.year, last.month, last.day, tzinfo=tz) + timedelta(days=1)
    return start.timestamp(), end.timestamp()


def _hour_epoch(hour: str) -> float:
    return datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC).timestamp()


def _parse(raw: str, name: str, *, end: bool, now: float) -> float:
    """A date (its first instant; for `to`, its last), an ISO-8601 time (UTC unless it says),
    or a duration back from now (`7d`)."""
    raw = raw.strip()
    value = parse_time_bound(raw, now, name)
    assert value is not None
    return value + 86399 if end and len(raw) == 10 else value
