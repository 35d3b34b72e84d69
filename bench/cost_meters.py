"""What one account costs, priced from its meters: a price per metered unit (from the same
measurements and list prices as bench/cost_model.py) applied to the account's usage export.

    .venv/bin/python bench/cost_meters.py --csv usage.csv [--records N] [--size NAME]

`usage.csv` is the billing export (`GET /api/v1/admin/accounts/{id}/usage.csv?from=&to=`,
columns period, account_id, user_id, unit, dims, value). Without `--csv` it prices an example
account, a month of the "team of 10" usage written as the meters would record it, and prints
the price per unit. `cost_model.py --write` puts both in docs/cost.md.

The search index is not a metered flow: a domain bills by the hour. Its share is priced per
record-month at a deployment size (`--size`, one of cost_model's scenarios) for the account's
records (`--records`, its `records.total` from the usage route).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cost_model as cm  # noqa: E402
from skald import catalog  # noqa: E402

TRANSFER_OUT_GB = 0.09  # data transfer out to the internet, first 10 TB (from memory)
TOKENS_PER_TEXT = 300  # an embedded text: a section or a summary (an assumption)
HOURS_PER_MONTH = cm.HOURS

# A route family -> the operation of cost_model whose measured Lambda time it costs.
FAMILY_OPERATION = {
    "search": "search",
    "fs": "read",
    "resources": "write",
    "skills": "write",
    "packs": "write",
    "sessions": "message",
    "mcp": "mcp",
}
# A job kind's worker: the part before the first dot (`semantic.files` -> semantic).
WORKER_OF_KIND = {w.name: w.name for w in catalog.WORKERS}


@dataclass(frozen=True)
class UnitPrice:
    unit: str
    dims: str  # "" for every dimension
    dollars: float  # per unit as metered
    basis: str


def unit_prices(
    seconds: Mapping[str, Mapping[str, float]], memory_gb: Mapping[str, float]
) -> list[UnitPrice]:
    p = cm.PRICES

    def lambda_cost(op: str, only: str | None = None) -> float:
        return sum(
            s * memory_gb[fn] * p.lambda_gb_s
            for fn, s in seconds.get(op, {}).items()
            if only is None or fn == only
        )

    auth = lambda_cost("authorize") + p.lambda_request
    out = []
    for family, op in FAMILY_OPERATION.items():
        fn = cm.OPERATIONS[op][0][0]
        per = p.api_request + p.lambda_request + lambda_cost(op, fn) + auth
        out.append(
            UnitPrice(
                "requests",
                f"family={family}",
                per,
                f"API Gateway + {fn} Lambda ({op}, measured) + authorizer",
            )
        )
    per_other = p.api_request + p.lambda_request + lambda_cost("read", "content") + auth
    out += [
        UnitPrice("requests", "", per_other, "any other family: priced as a read"),
        UnitPrice("bytes_uploaded", "", 0.0, "data transfer in is free"),
        UnitPrice("bytes_downloaded", "", TRANSFER_OUT_GB / 1e9, "transfer out, $/GB"),
        UnitPrice("bytes_stored", "", p.s3_gb_month / 1e9, "S3 per byte-month (gauge)"),
        UnitPrice(
            "texts_embedded",
            "",
            TOKENS_PER_TEXT * p.embed_tokens,
            f"Titan v2, {TOKENS_PER_TEXT} tokens a text (assumed)",
        ),
        UnitPrice("llm_tokens_in", "", p.llm_in_tokens, "Bedrock LLM input"),
        UnitPrice("llm_tokens_out", "", p.llm_out_tokens, "Bedrock LLM output"),
        UnitPrice("index_records", "", 0.0, "writes are in the requests; see record-months"),
        UnitPrice("operations", "", 0.0, "a count of requests already priced"),
    ]
    for worker in WORKER_OF_KIND:
        gb = memory_gb.get(worker)
        if gb is not None:
            out.append(
                UnitPrice(
                    "worker_ms",
                    f"kind={worker}.",
                    gb * p.lambda_gb_s / 1000,
                    f"{worker} Lambda at {gb * 1024:.0f} MB",
                )
            )
    return out


def record_month_price(size: str) -> float:
    """The search domain's monthly cost per record at one of cost_model's deployment sizes."""
    s = next(x for x in cm.SCENARIOS if x.name == size)
    domain: cm.Domain = cm.opensearch_domain(s.records, s.production)
    return domain.monthly / s.records


def _price_of(prices: list[UnitPrice], unit: str, dims: str) -> UnitPrice | None:
    """The most specific price of a unit for a cell's dimensions: an exact `k=v` part, a
    `k=prefix.` part (job kinds of one worker), else the unit's price for any dimensions."""
    parts = dims.split(",") if dims else []

    def fits(u: UnitPrice) -> bool:
        if u.unit != unit:
            return False
        if u.dims == "":
            return True
        if u.dims.endswith("."):
            return any(part.startswith(u.dims) for part in parts)
        return u.dims in parts

    return max((u for u in prices if fits(u)), key=lambda u: len(u.dims), default=None)


@dataclass(frozen=True)
class BillLine:
    unit: str
    dims: str
    amount: float
    dollars: float
    basis: str


def bill(
    rows: Iterable[Mapping[str, str]],
    prices: list[UnitPrice],
    *,
    records: int = 0,
    size: str = cm.SCENARIOS[0].name,
) -> list[BillLine]:
    """The bill of an export's rows: each (unit, dims) summed and priced; bytes stored is a
    gauge, billed as byte-months from its running balance hour by hour."""
    totals: dict[tuple[str, str], float] = defaultdict(float)
    stored_deltas: dict[str, float] = defaultdict(float)
    for row in rows:
        unit, dims, value = row["unit"], row.get("dims", ""), float(row["value"])
        if unit == "bytes_stored":
            stored_deltas[row["period"]] += value
        else:
            totals[(unit, dims)] += value
    lines = []
    for (unit, dims), amount in sorted(totals.items()):
        price = _price_of(prices, unit, dims)
        dollars = amount * price.dollars if price else 0.0
        lines.append(BillLine(unit, dims, amount, dollars, price.basis if price else "unpriced"))
    if stored_deltas:
        # The balance after each period's change holds until the next change (a period
        # with no change has no row), the last one for its own period.
        periods = sorted(stored_deltas, key=_start)
        balance = byte_hours = 0.0
        for i, period in enumerate(periods):
            balance += stored_deltas[period]
            if i + 1 < len(periods):
                held = (_start(periods[i + 1]) - _start(period)) / 3600
            else:
                held = _hours_in(period)
            byte_hours += max(balance, 0.0) * held
        byte_months = byte_hours / HOURS_PER_MONTH
        price = _price_of(prices, "bytes_stored", "")
        assert price is not None
        lines.append(
            BillLine(
                "bytes_stored (byte-months)",
                "",
                byte_months,
                byte_months * price.dollars,
                price.basis,
            )
        )
    if records:
        per = record_month_price(size)
        lines.append(
            BillLine("index record-months", "", records, records * per, f"domain share, {size}")
        )
    return lines


def _start(period: str) -> float:
    """When an export period starts (epoch seconds, UTC)."""
    fmt = "%Y-%m-%dT%H" if "T" in period else "%Y-%m-%d" if len(period) == 10 else "%Y-%m"
    return datetime.strptime(period, fmt).replace(tzinfo=UTC).timestamp()


def _hours_in(period: str) -> float:
    """An export period's length in hours: hour `YYYY-MM-DDTHH`, day `YYYY-MM-DD`, month
    `YYYY-MM`."""
    if "T" in period:
        return 1.0
    if len(period) == 10:
        return 24.0
    return float(HOURS_PER_MONTH)


def example_rows(seconds: Mapping[str, Mapping[str, float]]) -> list[dict[str, str]]:
    """A month of the "team of 10" scenario written as the meters record it (one row per
    unit; the scenario's operations mapped to route families)."""
    s = cm.SCENARIOS[0]
    ops = cm.monthly_ops(s)
    fam = {"search": "search", "read": "fs", "write": "fs", "message": "sessions", "mcp": "mcp"}
    rows: dict[tuple[str, str], float] = defaultdict(float)
    for op, family in fam.items():
        rows[("requests", f"family={family}")] += ops.get(op, 0.0)
    rows[("requests", "family=sessions")] += ops.get("commit", 0.0)
    rows[("llm_tokens_in", "model=bedrock,purpose=extraction")] = sum(
        ops.get(k, 0) * t[0] for k, t in cm.LLM_TOKENS.items()
    )
    rows[("llm_tokens_out", "model=bedrock,purpose=extraction")] = sum(
        ops.get(k, 0) * t[1] for k, t in cm.LLM_TOKENS.items()
    )
    embed_tokens = ops.get("doc_mb", 0) * cm.TOKENS_PER_MB + ops.get("commit", 0) * 2000
    rows[("texts_embedded", "model=titan")] = embed_tokens / TOKENS_PER_TEXT
    rows[("bytes_downloaded", "")] = (ops.get("read", 0) + ops.get("search", 0)) * 8_000
    for op, count in ops.items():
        for worker, secs in seconds.get(op, {}).items():
            if worker in WORKER_OF_KIND:
                rows[("worker_ms", f"kind={worker}.run")] += count * secs * 1000
    out = [
        {"period": "2026-11", "unit": u, "dims": d, "value": f"{v:.0f}"}
        for (u, d), v in rows.items()
    ]
    out.append(
        {
            "period": "2026-11",
            "unit": "bytes_stored",
            "dims": "",
            "value": f"{s.stored_gb * 1e9:.0f}",
        }
    )
    return out


_SCALES = {
    "bytes_uploaded": (1e9, "GB"),
    "bytes_downloaded": (1e9, "GB"),
    "bytes_stored": (1e9, "GB-month"),
    "worker_ms": (3.6e6, "hour"),
}


def render_section(
    seconds: Mapping[str, Mapping[str, float]], memory_gb: Mapping[str, float]
) -> list[str]:
    prices = unit_prices(seconds, memory_gb)
    s = cm.SCENARIOS[0]
    lines = bill(example_rows(seconds), prices, records=s.records, size=s.name)
    out = [
        "",
        "## One account, from its meters",
        "",
        "Every billable unit is metered per account and user (docs/operations.md, "
        '"Metering"); `bench/cost_meters.py --csv <the account\'s usage.csv> --records N` '
        "prices a real export. The price of each metered unit, from the measurements above:",
        "",
        "| unit | dims | $ | per | basis |",
        "|---|---|---|---|---|",
    ]
    for u in prices:
        scale, per = _SCALES.get(u.unit, (1e6, "1M"))
        out.append(
            f"| {u.unit} | {u.dims or 'any'} | {u.dollars * scale:,.4f} | {per} | {u.basis} |"
        )
    for size in cm.SCENARIOS:
        out.append(
            f"| index record-month | {size.name} | {record_month_price(size.name) * 1e6:,.2f} "
            "| 1M record-months | the search domain's monthly cost / its records |"
        )
    out += [
        "",
        f"An example account: a month of the {s.name} scenario as its meters would record it "
        "(its operations filed under route families, its tokens, texts, downloads and "
        f"{s.stored_gb:g} GB stored), plus its {s.records:,} records' share of the domain:",
        "",
        "| unit | dims | amount | $ |",
        "|---|---|---|---|",
    ]
    out += [
        f"| {ln.unit} | {ln.dims or ''} | {ln.amount:,.0f} | {ln.dollars:,.2f} |" for ln in lines
    ]
    out += [
        f"| **total** | | | **{sum(ln.dollars for ln in lines):,.2f}** |",
        "",
        "The meters leave out what no account causes alone (the queues' long polls, the "
        "secret, logs), so an account's bill from its meters is below its scenario's share of "
        "the deployment's; a price list sets a margin over these figures for that.",
    ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, help="an account's usage export")
    parser.add_argument("--records", type=int, default=0, help="the account's index records")
    parser.add_argument(
        "--size", default=cm.SCENARIOS[-1].name, choices=[s.name for s in cm.SCENARIOS]
    )
    args = parser.parse_args()
    runs = json.loads(cm.SIZING.read_text())["runs"]
    data = next(r for r in runs if r["run"] == cm.MAIN_RUN)
    seconds, memory = cm.lambda_seconds(data), cm.lambda_memory_gb()
    if args.csv is None:
        print("\n".join(render_section(seconds, memory)))
        return 0
    with args.csv.open(newline="") as f:
        rows = list(csv.DictReader(f))
    lines = bill(rows, unit_prices(seconds, memory), records=args.records, size=args.size)
    for ln in lines:
        print(f"{ln.unit:28} {ln.dims:40} {ln.amount:>16,.0f} ${ln.dollars:>10,.2f}")
    print(f"{'total':28} {'':40} {'':>16} ${sum(ln.dollars for ln in lines):>10,.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
