"""One account's bill from its usage export (bench/cost_meters.py): each metered unit priced,
the stored-bytes gauge billed as byte-months, job kinds priced at their worker's memory."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def meters() -> ModuleType:
    sys.path.insert(0, str(ROOT))
    return importlib.import_module("bench.cost_meters")


SECONDS = {"search": {"search": 0.1}, "read": {"content": 0.01}, "authorize": {"authorizer": 0.0}}
MEMORY = {"search": 1.0, "content": 0.5, "authorizer": 0.125, "semantic": 2.0, "memory": 0.25}


def _row(period: str, unit: str, value: float, dims: str = "") -> dict[str, str]:
    return {"period": period, "unit": unit, "dims": dims, "value": str(value)}


def test_requests_and_tokens_are_amounts_times_their_prices(meters: ModuleType) -> None:
    prices = meters.unit_prices(SECONDS, MEMORY)
    p = meters.cm.PRICES
    rows = [
        _row("2026-11-01", "requests", 1000, "family=search"),
        _row("2026-11-02", "requests", 500, "family=search"),
        _row("2026-11-01", "llm_tokens_in", 2_000_000, "model=m,purpose=summary"),
    ]
    lines = {(ln.unit, ln.dims): ln for ln in meters.bill(rows, prices)}
    search = lines[("requests", "family=search")]
    assert search.amount == 1500
    per = p.api_request + 2 * p.lambda_request + 0.1 * 1.0 * p.lambda_gb_s
    assert search.dollars == pytest.approx(1500 * per)
    tokens = lines[("llm_tokens_in", "model=m,purpose=summary")]
    assert tokens.dollars == pytest.approx(2_000_000 * p.llm_in_tokens)


def test_worker_time_is_priced_at_its_workers_memory(meters: ModuleType) -> None:
    prices = meters.unit_prices(SECONDS, MEMORY)
    rows = [
        _row("2026-11-01T00", "worker_ms", 3_600_000, "kind=semantic.files"),
        _row("2026-11-01T00", "worker_ms", 3_600_000, "kind=memory.commit"),
    ]
    lines = {ln.dims: ln for ln in meters.bill(rows, prices)}
    gb_s = meters.cm.PRICES.lambda_gb_s
    assert lines["kind=semantic.files"].dollars == pytest.approx(3600 * 2.0 * gb_s)
    assert lines["kind=memory.commit"].dollars == pytest.approx(3600 * 0.25 * gb_s)


def test_stored_bytes_are_billed_as_byte_months_of_the_running_balance(
    meters: ModuleType,
) -> None:
    prices = meters.unit_prices(SECONDS, MEMORY)
    hours = meters.HOURS_PER_MONTH
    rows = [
        _row("2026-11-01T00", "bytes_stored", 1e9),  # 1 GB for 10 hours
        _row("2026-11-01T10", "bytes_stored", -1e9),  # then nothing
    ]
    (line,) = meters.bill(rows, prices)
    assert line.amount == pytest.approx(10 * 1e9 / hours)
    assert line.dollars == pytest.approx(10 / hours * meters.cm.PRICES.s3_gb_month)


def test_records_add_their_share_of_the_search_domain(meters: ModuleType) -> None:
    prices = meters.unit_prices(SECONDS, MEMORY)
    size = meters.cm.SCENARIOS[-1]
    (line,) = meters.bill([], prices, records=1_000_000, size=size.name)
    domain = meters.cm.opensearch_domain(size.records, size.production).monthly
    assert line.dollars == pytest.approx(domain / size.records * 1_000_000)


def test_docs_cost_page_carries_the_account_section(meters: ModuleType) -> None:
    text = (ROOT / "docs/cost.md").read_text()
    assert "## One account, from its meters" in text
    assert "bench/cost_meters.py --csv" in text
