"""UsageBuffer and UsageLimits on the local ledger: recording aggregates in memory, a flush
writes each cell once, a failed flush keeps the cells, the bound drops and counts, and the
limits read the ledger's totals plus what is not flushed yet."""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skald.adapters.local.sqlite.usage_ledger import SqliteUsageLedger
from skald.domain.errors import QuotaExceeded
from skald.domain.metering import UsageCell, UsageTotals
from skald.domain.plans import UNLIMITED, Plan
from skald.services.metering import UsageBuffer, UsageLimits

T = 1_765_190_400.0  # 2025-12-08T10:40:00Z


class Plans:
    def __init__(self, plan: Plan = UNLIMITED) -> None:
        self.plan = plan

    def for_account(self, account_id: str) -> Plan:
        return self.plan


class CountingLedger:
    def __init__(self, inner: SqliteUsageLedger) -> None:
        self.inner = inner
        self.totals_reads = 0
        self.fail = False

    def add(self, cells: Sequence[UsageCell]) -> None:
        if self.fail:
            raise RuntimeError("ledger down")
        self.inner.add(cells)

    def totals(self, account_id: str, day: str) -> UsageTotals:
        self.totals_reads += 1
        return self.inner.totals(account_id, day)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def ledger(tmp_path: Path) -> CountingLedger:
    return CountingLedger(SqliteUsageLedger(tmp_path / "state.db"))


def test_records_aggregate_per_cell_and_flush_once(ledger: CountingLedger) -> None:
    buf = UsageBuffer(lambda: ledger, clock=lambda: T)
    for _ in range(100):
        buf.record("acme", "alice", "requests", 1, {"family": "fs"})
    buf.record("acme", "bob", "requests", 1, {"family": "fs"})
    assert buf.pending == 2
    assert buf.flush() == 2
    assert buf.pending == 0
    cells = ledger.cells("acme", "2025-12-08T00", "2025-12-08T23")
    assert sorted((c.user_id, c.value) for c in cells) == [("alice", 100), ("bob", 1)]
    assert buf.dropped == 0


def test_a_failed_flush_keeps_the_cells_for_the_next(ledger: CountingLedger) -> None:
    buf = UsageBuffer(lambda: ledger, clock=lambda: T)
    buf.record("acme", "alice", "bytes_uploaded", 10)
    ledger.fail = True
    assert buf.flush() == 0 and buf.flush_failures == 1
    buf.record("acme", "alice", "bytes_uploaded", 5)
    ledger.fail = False
    assert buf.flush() == 1
    (c,) = ledger.cells("acme", "2025-12-08T00", "2025-12-08T23")
    assert c.value == 15 and buf.dropped == 0


def test_past_the_bound_new_cells_are_dropped_and_counted(ledger: CountingLedger) -> None:
    buf = UsageBuffer(lambda: ledger, max_cells=2, clock=lambda: T)
    buf.record("acme", "a", "requests", 1)
    buf.record("acme", "b", "requests", 1)
    buf.record("acme", "c", "requests", 1)  # a third cell: dropped
    buf.record("acme", "a", "requests", 1)  # an existing cell still adds
    assert buf.dropped == 1
    buf.flush()
    assert sorted(c.value for c in ledger.cells("acme", "2025-12-08T00", "2025-12-08T23")) == [1, 2]


def test_close_flushes_what_is_left(ledger: CountingLedger) -> None:
    buf = UsageBuffer(lambda: ledger, flush_interval_s=3600, clock=lambda: T)
    buf.start()
    buf.record("acme", "alice", "worker_ms", 12, {"kind": "semantic.process"})
    buf.close()
    (c,) = ledger.cells("acme", "2025-12-08T00", "2025-12-08T23")
    assert c.value == 12 and c.dims == "kind=semantic.process"


def test_unlimited_plans_read_nothing(ledger: CountingLedger) -> None:
    buf = UsageBuffer(lambda: ledger, clock=lambda: T)
    limits = UsageLimits(Plans(), lambda: ledger, buf, clock=lambda: T)  # type: ignore[arg-type]
    limits.check_storage("acme", 10**12)
    limits.check_llm("acme")
    assert ledger.totals_reads == 0


def test_storage_limit_counts_flushed_and_unflushed_bytes(ledger: CountingLedger) -> None:
    buf = UsageBuffer(lambda: ledger, clock=lambda: T)
    plan = Plan(name="t", storage_bytes=1000)
    limits = UsageLimits(Plans(plan), lambda: ledger, buf, ttl_s=60, clock=lambda: T)  # type: ignore[arg-type]
    buf.record("acme", "alice", "bytes_stored", 600)
    buf.flush()
    limits.check_storage("acme", 400)  # 600 + 400 = the limit: allowed
    buf.record("acme", "alice", "bytes_stored", 300)  # not flushed yet
    with pytest.raises(QuotaExceeded) as err:
        limits.check_storage("acme", 101)
    assert err.value.details == {
        "limit": "storage_bytes",
        "value": 1000,
        "current": 900,
        "requested": 101,
    }
    buf.flush()
    limits.check_storage("acme", 100)
    assert ledger.totals_reads == 1  # cached within its ttl, flushes included


def test_llm_limit_is_reached_at_the_value_and_names_the_reset(ledger: CountingLedger) -> None:
    buf = UsageBuffer(lambda: ledger, clock=lambda: T)
    plan = Plan(name="t", llm_tokens_per_day=100)
    limits = UsageLimits(Plans(plan), lambda: ledger, buf, clock=lambda: T)  # type: ignore[arg-type]
    buf.record("acme", "alice", "llm_tokens_in", 90, {"purpose": "summary"})
    limits.check_llm("acme")
    buf.record("acme", "alice", "llm_tokens_out", 10, {"purpose": "summary"})
    with pytest.raises(QuotaExceeded) as err:
        limits.check_llm("acme")
    assert err.value.details["current"] == 100
    assert err.value.details["resets_at"] == "2025-12-09T00:00:00Z"


def test_a_request_that_read_its_plan_uses_stale_totals_once_only(ledger: CountingLedger) -> None:
    # In a context of its own: the request's read marks must not reach other tests.
    contextvars.copy_context().run(_stale_once, ledger)


def _stale_once(ledger: CountingLedger) -> None:
    from skald.services.plans.book import begin_request, note_store_read

    now = [T]
    buf = UsageBuffer(lambda: ledger, clock=lambda: now[0])
    plan = Plan(name="t", storage_bytes=1000)
    limits = UsageLimits(Plans(plan), lambda: ledger, buf, ttl_s=2, clock=lambda: now[0])  # type: ignore[arg-type]
    limits.check_storage("acme", 10)
    assert ledger.totals_reads == 1
    ledger.inner.add([UsageCell("acme", "2025-12-08T10", "", "bytes_stored", "", 995)])  # elsewhere
    now[0] += 5
    for expected_reads in (1, 2):  # stale: served once more, then read
        begin_request()
        note_store_read()  # this request read its plan already
        if expected_reads == 1:
            limits.check_storage("acme", 10)
        else:
            with pytest.raises(QuotaExceeded):
                limits.check_storage("acme", 10)
        assert ledger.totals_reads == expected_reads
