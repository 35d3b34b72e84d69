"""Metering rules: route families, hours and days in UTC, dimension keys, rollups, totals."""

from __future__ import annotations

from skald.domain.metering import (
    UsageCell,
    day_of,
    dims_key,
    hour_of,
    next_day_start,
    parse_dims,
    rollup,
    route_family,
    totals_delta,
)

T = 1_765_190_400.0  # 2025-12-08T10:40:00Z


def test_route_families_come_from_the_template() -> None:
    assert route_family("/api/v1/fs/ls") == "fs"
    assert route_family("/api/v1/content/write") == "fs"
    assert route_family("/api/v1/search/find") == "search"
    assert route_family("/api/v1/sessions/{session_id}/messages") == "sessions"
    assert route_family("/api/v1/admin/accounts/{account_id}/usage") == "admin"
    assert route_family("/api/v1/pack/export") == "packs"
    assert route_family("/mcp") == "mcp"
    assert route_family("/health") == "system"
    assert route_family(None) == "other"
    assert route_family("/api/v1/nonsense") == "other"


def test_hours_and_days_are_utc() -> None:
    assert hour_of(T) == "2025-12-08T10"
    assert day_of(T) == "2025-12-08"
    assert next_day_start(T) == 1_765_238_400.0  # 2025-12-09T00:00:00Z


def test_dims_are_canonical_and_round_trip() -> None:
    assert dims_key({"model": "m", "purpose": "summary"}) == "model=m,purpose=summary"
    assert dims_key({"purpose": "summary", "model": "m"}) == "model=m,purpose=summary"
    assert dims_key(None) == "" and parse_dims("") == {}
    assert dims_key({"model": "a,b=c#d"}) == "model=a_b_c_d"
    assert parse_dims("model=m,purpose=summary") == {"model": "m", "purpose": "summary"}


def test_rollup_sums_by_period_user_unit_and_dims() -> None:
    cells = [
        UsageCell("a", "2025-12-08T10", "u", "requests", "family=fs", 2),
        UsageCell("a", "2025-12-08T11", "u", "requests", "family=fs", 3),
        UsageCell("a", "2025-12-09T00", "u", "requests", "family=fs", 4),
        UsageCell("a", "2025-12-08T11", "v", "requests", "family=fs", 1),
    ]
    day = rollup(cells, "day")
    assert [(p.period, p.user_id, p.value) for p in day] == [
        ("2025-12-08", "u", 5),
        ("2025-12-08", "v", 1),
        ("2025-12-09", "u", 4),
    ]
    assert [p.value for p in rollup(cells, "month")] == [9, 1]
    assert len(rollup(cells, "hour")) == 4
    assert day[0].dims == {"family": "fs"}


def test_totals_take_bytes_stored_and_tokens_per_day() -> None:
    cells = [
        UsageCell("a", "2025-12-08T10", "u", "bytes_stored", "", 100),
        UsageCell("a", "2025-12-08T10", "u", "bytes_stored", "", -40),
        UsageCell("a", "2025-12-08T10", "u", "llm_tokens_in", "purpose=x", 7),
        UsageCell("a", "2025-12-09T10", "u", "llm_tokens_out", "purpose=x", 3),
        UsageCell("a", "2025-12-08T10", "u", "requests", "", 9),
    ]
    t = totals_delta(cells)["a"]
    assert t.stored_bytes == 60
    assert t.tokens_by_day == {"2025-12-08": 7, "2025-12-09": 3}


def test_removals_are_not_billed_worker_time() -> None:
    from skald.domain.metering.units import billed_kind

    assert billed_kind("semantic.files") and billed_kind("memory.commit")
    assert not billed_kind("purge.tenant")
