"""Memory and timeout of each function of the catalogue (skald/catalog.py), from its measured
peak memory and durations.

bench/lambda_sizing.py measures them on aws-local; each kept run's summary is in
bench/lambda_sizing-summary.json, the raw runs in bench/out/; `bench/lambda_sizing.py --resize
--apply` rewrites the generated block below from every kept run, and bench/LAMBDA_SIZING.md
states the rule: memory >= peak x 1.3, more where the CPU share or the largest allowed input
needs it; HTTP timeouts <= 29 s, API Gateway's limit. Plain data, no import: infra and the
Lambda asset build read it without the product.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    memory_mb: int
    timeout_s: int
    sizing: str  # the measurement and the rule these values come from


SIZES: dict[str, Size] = {
    # generated: begin
    "content": Size(
        640,
        29,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 112 MB "
        "x 1.3 -> 192 MB; CPU floor 640 MB (cold start 0.99 s CPU within 3 s); slowest "
        "16.65 s (POST /api/v1/resources), ~18.6 s at 640 MB",
    ),
    "search": Size(
        384,
        14,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 140 MB "
        "x 1.3 -> 192 MB; CPU floor 384 MB (cold start 0.56 s CPU within 3 s); slowest "
        "1.89 s (POST /api/v1/search/grep), ~4.5 s at 384 MB",
    ),
    "sessions": Size(
        384,
        26,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 83 MB "
        "x 1.3 -> 128 MB; CPU floor 384 MB (cold start 0.64 s CPU within 3 s); slowest "
        "6.50 s (POST /api/v1/sessions/{id}/messages), ~8.6 s at 384 MB",
    ),
    "mcp": Size(
        960,
        10,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 182 MB "
        "x 1.3 -> 256 MB; CPU floor 960 MB (cold start 1.60 s CPU within 3 s); slowest "
        "1.40 s (POST /mcp), ~2.0 s at 960 MB",
    ),
    "authorizer": Size(
        192,
        10,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 61 MB "
        "x 1.3 -> 128 MB; CPU floor 192 MB (cold start 0.31 s CPU within 3 s); slowest "
        "3.01 s (authorize), ~5.6 s at 192 MB",
    ),
    "semantic": Size(
        640,
        900,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 149 MB "
        "x 1.3 -> 256 MB; CPU floor 128 MB (none); largest input 640 MB (+22 MB per MB "
        "of document measured (small notes 94 MB, 2 MB document 138 MB), extrapolated "
        "to a 16 MB document: 446 MB x 1.3); slowest 528.33 s (semantic.process), "
        "~538.5 s at 640 MB; + 300 s Bedrock LLM allowance",
    ),
    "memory": Size(
        192,
        299,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 99 MB "
        "x 1.3 -> 192 MB; CPU floor 128 MB (none); slowest 25.99 s "
        "(session.extract_memories), ~39.4 s at 192 MB; + 180 s Bedrock LLM allowance",
    ),
    "autocommit": Size(
        128,
        60,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 83 MB "
        "x 1.3 -> 128 MB; CPU floor 128 MB (none); slowest 1.65 s "
        "(session.auto_commit), ~8.1 s at 128 MB",
    ),
    "fetch": Size(
        320,
        300,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 82 MB "
        "x 1.3 -> 128 MB; CPU floor 128 MB (none); largest input 320 MB (holds up to "
        "128 MB of fetched files: 210 MB x 1.3); slowest 2.16 s (resource.fetch), ~4.1 "
        "s at 320 MB; timeout kept at 300 s: a download may take SKALD_FETCH_TIMEOUT_S "
        "(120 s), then up to 5,000 files are written; the workload fetched 300 KB "
        "pages from loopback",
    ),
    "purge": Size(
        128,
        900,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 89 MB "
        "x 1.3 -> 128 MB; CPU floor 128 MB (none); slowest 0.70 s (tenant.purge), ~6.2 "
        "s at 128 MB; timeout kept at 900 s: a purge works until its deadline, then "
        "hands the rest to a new job: the whole budget takes a large account in fewer "
        "jobs; the workload's accounts are small",
    ),
    "setup": Size(
        128,
        900,
        "14 run(s) 2026-12-05T08:08 to 2026-12-07T20:32, load 0.0 to 8.79: peak 73 MB "
        "x 1.3 -> 128 MB; CPU floor 128 MB (none); slowest 1.56 s (setup), ~7.7 s at "
        "128 MB; timeout kept at 900 s: reindexing a changed index is not measured: "
        "whole budget",
    ),
    # generated: end
}
# A function not measured yet (a new worker, until `bench/lambda_sizing.py --resize --apply`
# writes its entry above from a run that drives it).
UNMEASURED = Size(
    512,
    900,
    "not measured yet: 512 MB and Lambda's longest timeout until a "
    "bench/lambda_sizing.py run drives it",
)
