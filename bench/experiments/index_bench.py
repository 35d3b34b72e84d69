"""Micro-benchmark of the embedded SearchIndex (not a test).

Builds 10k and 100k random L2-normalised 384-d records with synthetic Zipf-distributed text,
ancestors and tags, then prints upsert throughput and p50/p95 of dense, lexical and hybrid
search with and without a scope filter. Two kinds of query text: "natural" draws words from the
same Zipf law as the documents (so it carries stop-word-like very common words), "rare" draws
from the long tail only.

    .venv/bin/python bench/experiments/index_bench.py [--sizes 10000 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from skald.adapters.local.index.searchindex import LocalSearchIndex
from skald.ports import IndexFilter, IndexQuery, IndexRecord

DIM = 384
VOCAB = 20_000
PROJECTS = 50
DIRS = 10


def _words(rng: np.random.Generator) -> Callable[[int], list[str]]:
    # Zipf(1.1) over a fixed vocabulary: a few very common words and a long tail, like prose.
    ranks = np.arange(1, VOCAB + 1, dtype=np.float64)
    p = ranks**-1.1
    p /= p.sum()
    vocab = [f"w{i}x" for i in range(VOCAB)]

    def draw(k: int) -> list[str]:
        return [vocab[i] for i in rng.choice(VOCAB, size=k, p=p)]

    return draw


def _records(n: int, rng: np.random.Generator) -> list[IndexRecord]:
    draw = _words(rng)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    lengths = rng.integers(30, 120, size=n)
    out = []
    for i in range(n):
        proj, d = i % PROJECTS, (i // PROJECTS) % DIRS
        base = f"viking://resources/proj{proj}"
        parent = f"{base}/dir{d}"
        out.append(
            IndexRecord(
                account="bench",
                uri=f"{parent}/file{i}.md",
                level=2,
                context_type="resource",
                parent=parent,
                ancestors=["viking://resources", base, parent],
                text=" ".join(draw(int(lengths[i]))),
                abstract=f"file {i}",
                vector=vecs[i].tolist(),
                tags=[f"lang=l{i % 5}", f"team=t{i % 20}"],
                created_at=1_700_000_000.0 + i,
                updated_at=1_700_000_000.0 + i,
            )
        )
    return out


def _pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def run(n: int, n_queries: int) -> None:
    rng = np.random.default_rng(n)
    t0 = time.perf_counter()
    records = _records(n, rng)
    gen_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        index = LocalSearchIndex(Path(tmp) / "index.sqlite3", DIM)
        t0 = time.perf_counter()
        for start in range(0, n, 1000):
            index.upsert(records[start : start + 1000])
        up_s = time.perf_counter() - t0
        print(f"\n== {n} records (generated in {gen_s:.1f}s) ==")
        print(f"upsert (batches of 1000): {n / up_s:,.0f} records/s ({up_s:.2f}s)")
        # Re-upsert a batch of existing keys (replace path) and one-record writes.
        t0 = time.perf_counter()
        index.upsert(records[:1000])
        print(f"upsert replace 1000 existing: {1000 / (time.perf_counter() - t0):,.0f} records/s")
        t0 = time.perf_counter()
        for rec in records[1000:1200]:
            index.upsert([rec])
        print(f"upsert one at a time: {200 / (time.perf_counter() - t0):,.0f} records/s")
        index.close()
        t0 = time.perf_counter()
        index = LocalSearchIndex(Path(tmp) / "index.sqlite3", DIM)
        print(f"reopen (load into memory): {time.perf_counter() - t0:.2f}s")

        draw = _words(rng)
        qvecs = rng.standard_normal((n_queries, DIM)).astype(np.float32)
        qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
        natural = [" ".join(draw(4)) for _ in range(n_queries)]
        rare = [
            " ".join(f"w{int(i)}x" for i in rng.integers(500, VOCAB, 3)) for _ in range(n_queries)
        ]
        scope = IndexFilter(scopes=["viking://resources/proj7"])
        print(f"{'mode':8s} {'text':8s} {'filter':7s} {'p50 ms':>8s} {'p95 ms':>8s} {'hits':>5s}")
        for mode in ("dense", "lexical", "hybrid"):
            texts = [("natural", natural), ("rare", rare)] if mode != "dense" else [("-", rare)]
            for label, qtexts in texts:
                for fname, flt in (("none", IndexFilter()), ("scope", scope)):
                    times: list[float] = []
                    hits = 0
                    for i in range(n_queries):
                        q = IndexQuery(
                            account="bench",
                            mode=mode,
                            limit=10,
                            vector=qvecs[i].tolist(),
                            text=qtexts[i],
                            filter=flt,
                        )
                        t0 = time.perf_counter()
                        res = index.search(q)
                        times.append((time.perf_counter() - t0) * 1000)
                        hits += len(res)
                    print(
                        f"{mode:8s} {label:8s} {fname:7s} {_pct(times, 50):8.2f} "
                        f"{_pct(times, 95):8.2f} {hits / n_queries:5.1f}"
                    )
        index.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    for n in args.sizes:
        run(n, args.queries)


if __name__ == "__main__":
    main()
