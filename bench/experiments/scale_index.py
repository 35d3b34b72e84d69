"""Vector search at 10k / 100k / 1M records: the embedded index's exact float32 scan side by side
with a compact exact scan (8-bit scalar quantisation, faiss `IndexScalarQuantizer`, then exact
float32 re-scoring of the top candidates) and a graph ANN (usearch HNSW over int8 vectors, the
same re-scoring). Not a test: a measurement to choose from.

Vectors are synthetic 384-d, L2-normalised: `random` (uniform on the sphere: no structure, the
hardest case for an ANN graph) and `clustered` (2,000 centres, points near them, queries near
points: closer to real embeddings). Recall@10 is against the exact float32 top 10. Latency is
one query at a time on one thread (numpy BLAS, faiss OpenMP and usearch all capped at 1), p50
over the queries. Memory is the structure's own bytes per record and the process RSS growth
while building it.

    .venv/bin/python bench/experiments/scale_index.py --sizes 10000 100000 1000000 --queries 200
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import OUT_DIR, load_average, log, percentiles, write_json  # noqa: E402

DIM = 384
K = 10
RESCORE = 100  # candidates re-scored in float32 by the compact variants
F32 = npt.NDArray[np.float32]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def unit(x: F32) -> F32:
    out: F32 = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def dataset(kind: str, n: int, queries: int, seed: int) -> tuple[F32, F32]:
    rng = np.random.default_rng(seed)
    if kind == "random":
        data = np.empty((n, DIM), dtype=np.float32)
        for s in range(0, n, 100_000):  # in slices: float64 temporaries stay small
            e = min(n, s + 100_000)
            data[s:e] = rng.standard_normal((e - s, DIM), dtype=np.float32)
        data = unit(data)
        q = unit(rng.standard_normal((queries, DIM), dtype=np.float32))
        return data, q
    centres = unit(rng.standard_normal((2000, DIM), dtype=np.float32))
    data = np.empty((n, DIM), dtype=np.float32)
    for s in range(0, n, 100_000):
        e = min(n, s + 100_000)
        which = rng.integers(0, len(centres), e - s)
        data[s:e] = centres[which] + 0.06 * rng.standard_normal((e - s, DIM), dtype=np.float32)
    data = unit(data)
    picks = rng.integers(0, n, queries)
    q = unit(data[picks] + 0.04 * rng.standard_normal((queries, DIM), dtype=np.float32))
    return data, q


def exact_top(data: F32, q: F32, k: int) -> npt.NDArray[np.int64]:
    sims = data @ q
    part = np.argpartition(-sims, k - 1)[:k]
    return part[np.argsort(-sims[part])].astype(np.int64)


def rescored(data: F32, q: F32, cand: npt.NDArray[np.int64], k: int) -> npt.NDArray[np.int64]:
    cand = cand[cand >= 0]
    sims = data[cand] @ q
    return cand[np.argsort(-sims)[:k]]


def measure(
    name: str,
    build: Callable[[], Any],
    search: Callable[[Any, F32], Any],
    queries: F32,
    truth: list[set[int]],
    structure_bytes: Callable[[Any], int],
    n: int,
) -> dict[str, Any]:
    before = rss_mb()
    t0 = time.perf_counter()
    index = build()
    build_s = time.perf_counter() - t0
    grown = rss_mb() - before
    search(index, queries[0])  # warm
    times, hits = [], 0
    for i, q in enumerate(queries):
        t = time.perf_counter()
        top = search(index, q)
        times.append((time.perf_counter() - t) * 1000)
        hits += len(truth[i] & {int(x) for x in top[:K]})
    p = percentiles(times)
    row = {
        "variant": name,
        "n": n,
        "build_s": round(build_s, 2),
        "bytes_per_record": round(structure_bytes(index) / n, 1),
        "rss_growth_mb": round(grown, 1),
        "p50_ms": round(p["p50"], 2),
        "p95_ms": round(p["p95"], 2),
        "recall_at_10": round(hits / (K * len(queries)), 4),
    }
    log(f"  {row}")
    return row


def run_size(kind: str, n: int, nq: int, seed: int, ann_max: int) -> list[dict[str, Any]]:
    import faiss
    from usearch.index import Index

    faiss.omp_set_num_threads(1)
    log(f"{kind} n={n}: generating")
    data, queries = dataset(kind, n, nq, seed)
    truth = [set(exact_top(data, q, K).tolist()) for q in queries]
    rows: list[dict[str, Any]] = []
    rows.append(
        measure(
            "exact float32 (today)",
            lambda: data,
            lambda d, q: exact_top(d, q, K),
            queries,
            truth,
            lambda d: int(d.nbytes),
            n,
        )
    )

    def sq8() -> Any:
        idx = faiss.IndexScalarQuantizer(
            DIM, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )
        idx.train(data[: min(n, 100_000)])
        idx.add(data)
        return idx

    def sq8_search(idx: Any, q: F32) -> Any:
        _, cand = idx.search(q[None, :], RESCORE)
        return rescored(data, q, cand[0].astype(np.int64), K)

    rows.append(
        measure(
            f"exact int8 scan + float32 re-score of {RESCORE} (faiss SQ8)",
            sq8,
            sq8_search,
            queries,
            truth,
            lambda idx: int(idx.sa_code_size()) * n,
            n,
        )
    )
    if n <= ann_max:

        def hnsw() -> Any:
            idx = Index(
                ndim=DIM,
                metric="ip",
                dtype="i8",
                connectivity=16,
                expansion_add=128,
                expansion_search=128,
            )
            idx.add(np.arange(n), data, threads=1)
            return idx

        def hnsw_search(idx: Any, q: F32) -> Any:
            found = idx.search(q, RESCORE, threads=1)
            return rescored(data, q, np.asarray(found.keys, dtype=np.int64), K)

        rows.append(
            measure(
                f"usearch HNSW int8 (M=16, ef=128) + float32 re-score of {RESCORE}",
                hnsw,
                hnsw_search,
                queries,
                truth,
                lambda idx: int(idx.memory_usage),
                n,
            )
        )
    for r in rows:
        r["data"] = kind
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument(
        "--kinds", nargs="+", default=["clustered", "random"], choices=["clustered", "random"]
    )
    p.add_argument("--queries", type=int, default=200)
    p.add_argument(
        "--ann-max",
        type=int,
        default=1_000_000,
        help="skip the HNSW build above this size (its build is the slow part)",
    )
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    threadpool_limits(limits=1)
    start_load = load_average()
    rows: list[dict[str, Any]] = []
    for n in args.sizes:
        for kind in args.kinds:
            rows += run_size(kind, n, args.queries, args.seed, args.ann_max)
            write_json(
                OUT_DIR / "scale-index-latest.json",
                {"rows": rows, "load": [start_load, load_average()]},
            )
    print(
        "| data | records | variant | recall@10 | p50 ms | p95 ms | bytes/record | "
        "RSS growth MB | build s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['data']} | {r['n']:,} | {r['variant']} | {r['recall_at_10']} | "
            f"{r['p50_ms']} | {r['p95_ms']} | {r['bytes_per_record']} | "
            f"{r['rss_growth_mb']} | {r['build_s']} |"
        )
    print(f"load average at start {start_load}, at end {load_average()}")


if __name__ == "__main__":
    main()
