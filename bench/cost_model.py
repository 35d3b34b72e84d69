"""Monthly AWS cost of a Skald deployment at three sizes, from the measured Lambda durations
(the main run in bench/lambda_sizing-summary.json), the catalogue's memory sizes and public
list prices.

    .venv/bin/python bench/cost_model.py [--write]     # --write: docs/cost.md

docs/cost.md ends with one account's cost from its meters (bench/cost_meters.py).

The usage of each size (operations per active user and day, records, stored bytes) is an
assumption stated in `SCENARIOS`; the per-operation Lambda time is measured; the per-operation
request counts of DynamoDB, S3 and SQS are estimates from the code paths (OP_REQUESTS). Prices
are us-east-1 on-demand list prices recalled from memory (no price API is reachable from the
machine that wrote this): check them against the AWS pricing pages before relying on them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers/common/python"))
sys.path.insert(0, str(ROOT))

from skald import catalog  # noqa: E402

SIZING = ROOT / "bench/lambda_sizing-summary.json"
MAIN_RUN = "lambda_sizing.json"  # as in bench/lambda_report.py
DOC = ROOT / "docs/cost.md"
PRICES_AS_OF = "list prices as remembered for 2025 (us-east-1), written 2026-12-05"
HOURS = 730.0  # per month
DAYS = 30.0


@dataclass(frozen=True)
class Prices:
    lambda_gb_s: float = 0.0000166667  # x86; arm64 is 20% cheaper
    lambda_request: float = 0.20 / 1e6
    api_request: float = 3.50 / 1e6  # REST API, first 333M a month
    dynamo_write: float = 0.625 / 1e6  # on-demand, per write request unit
    dynamo_read: float = 0.125 / 1e6  # per read request unit
    dynamo_gb_month: float = 0.25
    s3_put: float = 0.005 / 1000
    s3_get: float = 0.0004 / 1000
    s3_gb_month: float = 0.023
    sqs_request: float = 0.40 / 1e6
    logs_gb: float = 0.50  # CloudWatch Logs ingestion
    ebs_gb_month: float = 0.122  # OpenSearch gp3
    ocu_hour: float = 0.24  # OpenSearch Serverless
    aoss_gb_month: float = 0.024
    embed_tokens: float = 0.02 / 1e6  # Titan Text Embeddings v2
    llm_in_tokens: float = 0.25 / 1e6  # Claude 3 Haiku
    llm_out_tokens: float = 1.25 / 1e6
    secret_month: float = 0.40
    # OpenSearch data node types: (name, RAM GB, $ per hour, max EBS GB per node)
    instances: tuple[tuple[str, int, float, int], ...] = (
        ("t3.medium.search", 4, 0.073, 200),
        ("m6g.large.search", 8, 0.128, 512),
        ("r6g.large.search", 16, 0.167, 1024),
        ("r6g.xlarge.search", 32, 0.335, 1536),
        ("r6g.2xlarge.search", 64, 0.669, 3072),
        ("r6g.4xlarge.search", 128, 1.337, 6144),
        ("r6g.8xlarge.search", 256, 2.677, 12288),
        ("r6g.12xlarge.search", 384, 4.018, 18432),
    )
    master_hour: float = 0.128  # m6g.large.search, three of them in production


PRICES = Prices()

# -- what one operation costs in Lambda time, from the measurement ---------------------------

# operation -> the (function, route or job kind prefix, phase prefix) samples that make it;
# a job's time is the phase's total for that worker divided by the phase's units.
OPERATIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "search": (("search", "POST /api/v1/search/"),),
    "read": (("content", "GET /api/v1/content/read"), ("content", "GET /api/v1/fs/stat")),
    "write": (("content", "POST /api/v1/content/write"),),
    "message": (("sessions", "POST /api/v1/sessions/{id}/messages"),),
    "commit": (("sessions", "POST /api/v1/sessions/{id}/commit"),),
    "mcp": (("mcp", "POST /mcp"),),
    "authorize": (("authorizer", "authorize"),),
}
# Background work per unit: (worker, phase prefix, unit count in that phase)
JOBS_PER_UNIT = {
    "write": ("semantic", "content/fs", 13),  # 12 notes + 1 append
    "commit": ("memory", "sessions", None),  # per committed session
    "doc_mb": ("semantic", "semantic: one", None),  # per MB of the large document
}

# Requests to the other services per operation (estimates from the code paths).
OP_REQUESTS: dict[str, dict[str, float]] = {
    "authorize": {"ddb_read": 0.2},  # key lookup; its 60 s cache absorbs most
    "search": {"ddb_write": 1, "s3_get": 2},  # recall ledger; snippets of top hits
    "read": {"s3_get": 1.5},
    "write": {"s3_put": 3, "ddb_write": 6, "ddb_read": 4, "sqs": 3},
    "message": {"ddb_write": 2, "ddb_read": 1},
    "commit": {"s3_put": 12, "s3_get": 10, "ddb_write": 30, "ddb_read": 20, "sqs": 6},
    "mcp": {"s3_get": 2, "ddb_read": 1},
    "doc_mb": {"s3_put": 40, "s3_get": 40, "ddb_write": 30, "ddb_read": 20, "sqs": 30},
}
LOG_BYTES_PER_INVOCATION = 1500  # Powertools JSON line + EMF metrics
TOKENS_PER_MB = 250_000  # ~4 characters a token
LLM_SECONDS = {"commit": 6.0, "doc_mb": 20.0}  # Bedrock LLM wait billed to the worker
LLM_TOKENS = {"commit": (4000, 600), "doc_mb": (300_000, 6000)}  # (in, out) per unit
QUERY_TOKENS = 20


# As in bench/lambda_report.py: an assumed Titan v2 call (one text) and the adapter's pool.
BEDROCK_EMBED_S = 0.06
BEDROCK_PARALLEL = 4


def lambda_seconds(data: dict[str, Any]) -> dict[str, dict[str, float]]:
    """operation -> {function: billed seconds per operation} from the measurement (a run's
    invocations grouped by phase, function and route or job kind)."""
    groups = data["groups"]
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for op, parts in OPERATIONS.items():
        for fn, prefix in parts:
            gs = [g for g in groups if g["function"] == fn and g["label"].startswith(prefix)]
            n = sum(g["n"] for g in gs)
            mean = sum(g["total_ms"] for g in gs) / n if n else 0.0
            out[op][fn] = out[op].get(fn, 0.0) + mean / 1000 / len(parts)
    phases = {p["phase"]: p for p in data["phases"]}
    for unit, (worker, phase_prefix, count) in JOBS_PER_UNIT.items():
        phase = next((p for p in phases if p.startswith(phase_prefix)), None)
        total = sum(
            g["total_ms"] for g in groups if g["function"] == worker and g["phase"] == phase
        )
        # The local MiniLM server's time is replaced by Bedrock's (see BEDROCK_EMBED_S).
        emb = (phases[phase].get("embedding") or {}) if phase else {}
        bedrock_ms = emb.get("texts", 0) * BEDROCK_EMBED_S / BEDROCK_PARALLEL * 1000
        total = max(total - emb.get("seconds", 0) * 1000 + bedrock_ms, 0.0)
        if count is None and unit == "commit":
            outcome = phases[phase]["outcome"] if phase else []
            count = len(outcome) if isinstance(outcome, list) else 1
        if count is None and unit == "doc_mb":
            count = data["scale"]["large_doc_kb"] / 1024
            upload = [
                g["total_ms"]
                for g in groups
                if g["phase"] == phase and g["function"] == "content" and "/resources" in g["label"]
            ]
            out[unit]["content"] = sum(upload) / 1000 / count
        out[unit][worker] = out[unit].get(worker, 0.0) + total / 1000 / max(count or 1, 1)
        out[unit][worker] += LLM_SECONDS.get(unit, 0.0)
    return dict(out)


# -- scenarios ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    users: int
    active_share: float  # users active on a given day
    records: int  # index records (sections, files, directories, memories)
    stored_gb: float  # S3: originals, sidecars, parsed views, archives
    per_user_day: dict[str, float] = field(default_factory=dict)
    production: bool = True  # replicas and dedicated masters


USAGE = {"search": 60, "read": 40, "write": 5, "message": 60, "commit": 3, "mcp": 40, "doc_mb": 0.2}
SCENARIOS = (
    Scenario("team of 10", 10, 1.0, 50_000, 2.0, USAGE, production=False),
    Scenario("account with 10k users", 10_000, 0.3, 5_000_000, 400.0, USAGE),
    Scenario("SaaS: 100 accounts x 1M records", 20_000, 0.3, 100_000_000, 4000.0, USAGE),
)

# Bytes per index record: a 1,024-dim float32 vector (Titan v2), its HNSW graph
# (1.1 x (4 d + 8 m), m = 16), and the text and metadata fields with their inverted index.
DIMENSION = 1024
VECTOR_BYTES = 4 * DIMENSION
GRAPH_BYTES = 1.1 * (4 * DIMENSION + 8 * 16)
TEXT_BYTES = 3000
STORAGE_OVERHEAD = 1.45  # AWS sizing guidance: indexing, OS and service reserves


@dataclass(frozen=True)
class Domain:
    instance: str
    nodes: int
    ebs_gb_per_node: int
    monthly: float
    graph_gb: float
    storage_gb: float


def opensearch_domain(records: int, production: bool, prices: Prices = PRICES) -> Domain:
    """The cheapest data nodes that hold the k-NN graphs in memory and the index on EBS.
    k-NN graphs live outside the JVM heap (half the RAM, at most 32 GB) and may use half of
    what is left (the k-NN circuit breaker)."""
    replicas = 1 if production else 0
    graph_gb = records * GRAPH_BYTES * (1 + replicas) / 1e9
    storage_gb = (
        records
        * (VECTOR_BYTES + GRAPH_BYTES + TEXT_BYTES)
        * (1 + replicas)
        * STORAGE_OVERHEAD
        / 1e9
    )
    best: Domain | None = None
    for name, ram, hourly, max_ebs in prices.instances:
        knn_gb = (ram - min(ram / 2, 32)) * 0.5
        nodes = max(
            2 if production else 1, math.ceil(graph_gb / knn_gb), math.ceil(storage_gb / max_ebs)
        )
        ebs = max(10, math.ceil(storage_gb / nodes))
        monthly = nodes * (hourly * HOURS + ebs * prices.ebs_gb_month)
        if production:
            monthly += 3 * prices.master_hour * HOURS
        if best is None or monthly < best.monthly:
            best = Domain(name, nodes, ebs, monthly, graph_gb, storage_gb)
    assert best is not None
    return best


OCU_GRAPH_GB = 6.0  # HNSW memory per search OCU (an assumption: an OCU has 6 GB of RAM)


def opensearch_serverless(
    records: int,
    production: bool,
    prices: Prices = PRICES,
) -> tuple[float, float]:
    """(OCUs, monthly $): search OCUs hold the graphs (x2 with redundancy), indexing OCUs
    at least as many as the minimum; storage billed on S3-backed managed storage."""
    graph_gb = records * GRAPH_BYTES / 1e9
    redundancy = 2 if production else 1
    # OCUs come in halves; each replica of the search side holds every graph
    search = redundancy * max(0.5, math.ceil(graph_gb / OCU_GRAPH_GB * 2) / 2)
    indexing = 0.5 * redundancy
    ocus = search + indexing
    storage = records * (VECTOR_BYTES + TEXT_BYTES) / 1e9
    return ocus, ocus * prices.ocu_hour * HOURS + storage * prices.aoss_gb_month


@dataclass(frozen=True)
class Line:
    component: str
    monthly: float
    basis: str


def monthly_ops(s: Scenario) -> dict[str, float]:
    active = s.users * s.active_share
    ops = {op: n * active * DAYS for op, n in s.per_user_day.items()}
    ops["authorize"] = sum(v for k, v in ops.items() if k != "doc_mb")
    return ops


def lambda_memory_gb() -> dict[str, float]:
    return {fn.name: fn.memory_mb / 1024 for fn in catalog.FUNCTIONS}


def cost(
    s: Scenario,
    seconds: dict[str, dict[str, float]],
    prices: Prices = PRICES,
    memory_gb: dict[str, float] | None = None,
) -> list[Line]:
    memory_gb = memory_gb or lambda_memory_gb()
    ops = monthly_ops(s)
    gb_s = invocations = 0.0
    for op, count in ops.items():
        for fn, secs in seconds.get(op, {}).items():
            gb_s += count * secs * memory_gb[fn]
            invocations += count
    http_requests = sum(v for k, v in ops.items() if k not in ("doc_mb", "authorize"))
    reqs: dict[str, float] = defaultdict(float)
    for op, count in ops.items():
        for kind, n in OP_REQUESTS.get(op, {}).items():
            reqs[kind] += n * count
    # Event source mappings long-poll each of the 4 queues with ~5 pollers, every 20 s.
    reqs["sqs"] += 4 * 5 * 3 * 60 * 24 * DAYS
    llm_in = sum(ops.get(k, 0) * t[0] for k, t in LLM_TOKENS.items())
    llm_out = sum(ops.get(k, 0) * t[1] for k, t in LLM_TOKENS.items())
    embed = (
        ops.get("doc_mb", 0) * TOKENS_PER_MB
        + (ops.get("search", 0) + ops.get("mcp", 0)) * QUERY_TOKENS
        + ops.get("commit", 0) * 2000
    )
    domain = opensearch_domain(s.records, s.production, prices)
    ocus, serverless = opensearch_serverless(s.records, s.production, prices)
    table_gb = s.users * 0.002 + ops.get("message", 0) * 12 * 0.5e-6  # ~a year of messages
    return [
        Line(
            "Lambda compute",
            gb_s * prices.lambda_gb_s,
            f"{gb_s:,.0f} GB-s at the catalogue's memory",
        ),
        Line(
            "Lambda requests",
            invocations * prices.lambda_request,
            f"{invocations:,.0f} invocations",
        ),
        Line(
            "API Gateway (REST)",
            http_requests * prices.api_request,
            f"{http_requests:,.0f} requests",
        ),
        Line(
            "DynamoDB on-demand",
            reqs["ddb_write"] * prices.dynamo_write
            + reqs["ddb_read"] * prices.dynamo_read
            + table_gb * prices.dynamo_gb_month,
            f"{reqs['ddb_write']:,.0f} writes, {reqs['ddb_read']:,.0f} reads, {table_gb:,.1f} GB",
        ),
        Line(
            "S3",
            reqs["s3_put"] * prices.s3_put
            + reqs["s3_get"] * prices.s3_get
            + s.stored_gb * prices.s3_gb_month,
            f"{reqs['s3_put']:,.0f} PUT, {reqs['s3_get']:,.0f} GET, {s.stored_gb:,.0f} GB",
        ),
        Line(
            "SQS",
            reqs["sqs"] * prices.sqs_request,
            f"{reqs['sqs']:,.0f} requests (most are the event source mappings' long polls)",
        ),
        Line(
            "CloudWatch Logs",
            invocations * LOG_BYTES_PER_INVOCATION / 1e9 * prices.logs_gb,
            f"{invocations * LOG_BYTES_PER_INVOCATION / 1e9:,.1f} GB ingested",
        ),
        Line("Secrets Manager", prices.secret_month, "the root key"),
        Line("Bedrock embeddings", embed * prices.embed_tokens, f"{embed / 1e6:,.1f}M tokens"),
        Line(
            "Bedrock LLM",
            llm_in * prices.llm_in_tokens + llm_out * prices.llm_out_tokens,
            f"{llm_in / 1e6:,.1f}M in, {llm_out / 1e6:,.1f}M out tokens",
        ),
        Line(
            "OpenSearch domain",
            domain.monthly,
            f"{domain.nodes} x {domain.instance}, {domain.ebs_gb_per_node} GB gp3 each"
            f"{' + 3 m6g.large masters' if s.production else ''}; graphs "
            f"{domain.graph_gb:,.1f} GB, index {domain.storage_gb:,.1f} GB",
        ),
        Line("(or) OpenSearch Serverless", serverless, f"{ocus:g} OCUs"),
    ]


def total(lines: list[Line]) -> float:
    """The month's bill: everything but the serverless alternative to the domain."""
    return sum(line.monthly for line in lines if not line.component.startswith("(or)"))


def dominant(lines: list[Line]) -> Line:
    return max(
        (ln for ln in lines if not ln.component.startswith("(or)")), key=lambda ln: ln.monthly
    )


def render(data: dict[str, Any]) -> str:
    seconds = lambda_seconds(data)
    memory = lambda_memory_gb()
    out = [
        "# Monthly AWS cost",
        "",
        "Generated by `bench/cost_model.py --write` from the main run in "
        f"`bench/lambda_sizing-summary.json` (measured {data['date']}, load average "
        f"{data['load_start'][0]}) and the "
        f"catalogue's memory sizes. Prices: {PRICES_AS_OF}; **every price here is from "
        "memory**, not read from a price list on the day: check them against the AWS "
        "pricing pages. Usage per active user and day is an assumption: "
        f"{', '.join(f'{k} {v:g}' for k, v in USAGE.items())} "
        "(doc_mb: MB of documents added).",
        "",
        "## Lambda time per operation (measured)",
        "",
        "Mean wall time on aws-local (bench/LAMBDA_SIZING.md), billed at the catalogue's "
        "memory; worker time per unit includes an assumed Bedrock LLM wait "
        f"({', '.join(f'{k} {v:g} s' for k, v in LLM_SECONDS.items())}). The workers "
        "mostly waited for embeddings from a single-threaded local MiniLM server on a "
        "loaded machine: their time here has that wait replaced by a Bedrock estimate "
        f"(texts x {BEDROCK_EMBED_S * 1000:.0f} ms / {BEDROCK_PARALLEL} in parallel, an "
        "assumption), as in bench/LAMBDA_SIZING.md's Phases table.",
        "",
        "| operation | function: seconds | Lambda $ per 1M operations |",
        "|---|---|---|",
    ]
    for op, fns in seconds.items():
        per = sum(secs * memory[fn] * PRICES.lambda_gb_s for fn, secs in fns.items())
        out.append(
            f"| {op} | {', '.join(f'{fn}: {secs:.3f}' for fn, secs in fns.items())}"
            f" | {per * 1e6:,.2f} |"
        )
    for s in SCENARIOS:
        lines = cost(s, seconds)
        top = dominant(lines)
        out += [
            "",
            f"## {s.name}",
            "",
            f"{s.users:,} users ({s.active_share:.0%} active a day), "
            f"{s.records:,} records, {s.stored_gb:,.0f} GB in S3"
            f"{', production (1 replica, dedicated masters)' if s.production else ''}.",
            "",
            "| component | $ / month | basis |",
            "|---|---|---|",
        ]
        out += [f"| {ln.component} | {ln.monthly:,.2f} | {ln.basis} |" for ln in lines]
        out += [
            f"| **total** (with the domain) | **{total(lines):,.2f}** | |",
            "",
            f"Dominant: **{top.component}** ({top.monthly / total(lines):.0%}).",
        ]
    tops = [(s.name, dominant(cost(s, seconds))) for s in SCENARIOS]
    out += [
        "",
        "## Reading it",
        "",
        "- Dominant component: "
        + "; ".join(f"{name}: {top.component}" for name, top in tops)
        + ".",
        "- The search index is a fixed cost: a domain bills by the hour whatever the "
        "traffic, and at 100M records the HNSW graphs of 1,024-dim vectors need about a "
        "terabyte of RAM across the replicas. The levers are the vectors, not the "
        "functions: Titan v2 at 256 or 512 dimensions, or fp16 / byte quantisation of the "
        "k-NN field, divide that memory by 2 to 4; OpenSearch's on-disk mode by more.",
        f"- Index sizing: per record a {DIMENSION}-dim float32 vector ({VECTOR_BYTES:,} B), "
        f"its HNSW graph (1.1 x (4 d + 8 m), m = 16: {GRAPH_BYTES:,.0f} B, held in RAM) "
        f"and text and metadata (~{TEXT_BYTES:,} B); disk = records x all three x "
        f"(1 + replicas) x {STORAGE_OVERHEAD}; a data node's graph memory = half of what "
        "the JVM heap (half the RAM, at most 32 GB) leaves; serverless: "
        f"{OCU_GRAPH_GB:g} GB of graphs per search OCU (an assumption), doubled for "
        "redundancy in production.",
        "- The Bedrock LLM grows with use: summaries read every added document once, and "
        "each commit sends its messages for extraction. A smaller model (or no LLM: the "
        "rule-based paths) is the lever there.",
        "- Lambda stays small because the functions are small (bench/LAMBDA_SIZING.md: "
        "the models are remote) and most calls take tens of ms.",
        "- Not included: data transfer out, NAT (the fetch worker runs outside the VPC "
        "the stack creates), backups and snapshots, free tiers, Bedrock rerank, support.",
    ]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write docs/cost.md")
    args = parser.parse_args()
    runs = json.loads(SIZING.read_text())["runs"]
    data = next(r for r in runs if r["run"] == MAIN_RUN)
    # One account's cost from its meters (bench/cost_meters.py builds on this model).
    from bench.cost_meters import render_section

    section = render_section(lambda_seconds(data), lambda_memory_gb())
    text = render(data) + "\n".join(section) + "\n"
    if args.write:
        DOC.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
