"""find's index work in-process, without HTTP or the embedding model: p50 of
LocalSearchIndex.search as RetrievalService issues it for a default find (hybrid, limit 20,
scoped to the corpus root), the cost of its non-vector parts (filter masks, BM25), an
optional cProfile, and an A/B against another source tree of the package.

    .venv/bin/python bench/experiments/find_inproc.py --records 100000     # build once, then run
    .venv/bin/python bench/experiments/find_inproc.py --records 100000 --profile
    .venv/bin/python bench/experiments/find_inproc.py --records 100000 \
        --ab /tmp/base/layers/common/python

The corpus is bench/synthetic's (same URIs and texts as the HTTP latency run) with random unit
vectors in place of embeddings: the vector scan costs the same whatever the vectors hold. The
index file is kept under bench/out/inproc-<records>/ and reused. With --ab, the measurement
runs in alternating subprocesses (A = this tree, B = the given tree; A, B, A, B, ...) over the
same index file, each opening it fresh.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO_ROOT))
DIM = 384
ACCOUNT = "bench"


def build(path: Path, n: int, seed: int) -> None:
    from bench import synthetic
    from skald.adapters.local.index.searchindex import LocalSearchIndex
    from skald.ports import IndexRecord

    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    with LocalSearchIndex(path, DIM) as index:
        for start in range(0, n, synthetic.LEAF):
            batch: list[IndexRecord] = []
            vecs = rng.standard_normal((synthetic.LEAF + 2, DIM)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            leaf = synthetic.leaf_dir(start)
            parts = leaf.split("/")
            # Directories above the leaf, "viking://resources" included (as the ingest does).
            above = ["/".join(parts[:k]) for k in range(3, len(parts))]
            for i in range(start, min(n, start + synthetic.LEAF)):
                text = synthetic.record_text(seed, i)
                batch.append(
                    IndexRecord(
                        account=ACCOUNT,
                        uri=synthetic.record_uri(i),
                        level=2,
                        context_type="resource",
                        parent=leaf,
                        ancestors=[*above, leaf],
                        text=text,
                        abstract=text[:80],
                        vector=vecs[i - start].tolist(),
                        created_at=1.7e9 + i,
                        updated_at=1.7e9 + i,
                    )
                )
            # The leaf directory's abstract (L0) and overview (L1), like a processed folder.
            for level, name in ((0, ".abstract.md"), (1, ".overview.md")):
                batch.append(
                    IndexRecord(
                        account=ACCOUNT,
                        uri=f"{leaf}/{name}",
                        level=level,
                        context_type="resource",
                        parent=leaf,
                        ancestors=[*above, leaf],
                        text=f"directory {leaf}",
                        abstract="directory",
                        vector=vecs[synthetic.LEAF + level].tolist(),
                        created_at=1.7e9 + start,
                        updated_at=1.7e9 + start,
                    )
                )
            index.upsert(batch)
    print(f"built {n} records in {time.perf_counter() - t0:.1f}s", file=sys.stderr)


def measure(
    path: Path, n: int, seed: int, queries: int, rounds: int, profile: Path | None
) -> dict[str, float]:
    from bench import synthetic
    from skald.adapters.local.index import bm25
    from skald.adapters.local.index.filters import filter_mask
    from skald.adapters.local.index.searchindex import LocalSearchIndex
    from skald.domain.retrieval.fusion import keyword_query
    from skald.ports import IndexFilter, IndexQuery

    wl = synthetic.workload(seed, n, queries, 0, 0)
    rng = np.random.default_rng(seed + 1)
    qvecs = rng.standard_normal((queries, DIM)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    qlists = [v.tolist() for v in qvecs]
    index = LocalSearchIndex(path, DIM)
    flt = IndexFilter(scopes=[synthetic.ROOT], exclude_scopes=[])

    # As RetrievalService asks: stop words leave the keyword side of the query.
    texts = [keyword_query(t) for t in wl.find]

    def query(i: int) -> IndexQuery:
        return IndexQuery(
            account=ACCOUNT, mode="hybrid", limit=20, vector=qlists[i], text=texts[i], filter=flt
        )

    for i in range(min(20, queries)):  # warm caches, as a server that has answered before
        index.search(query(i))
    prof = cProfile.Profile() if profile else None
    search_ms: list[float] = []
    search_cpu_ms: list[float] = []  # this thread's CPU time: less sensitive to a busy machine
    for _ in range(rounds):
        for i in range(queries):
            q = query(i)
            if prof:
                prof.enable()
            c0, t0 = time.thread_time(), time.perf_counter()
            index.search(q)
            search_ms.append((time.perf_counter() - t0) * 1000)
            search_cpu_ms.append((time.thread_time() - c0) * 1000)
            if prof:
                prof.disable()
    # The parts, on the same snapshot (with the index's scope cache where it has one).
    cols = index._cols
    cache = getattr(index, "_scopes", None)
    filter_ms: list[float] = []
    bm25_ms: list[float] = []
    for i in range(queries):
        t0 = time.thread_time()
        masks = filter_mask(cols, ACCOUNT, flt, cache) if cache else filter_mask(cols, ACCOUNT, flt)
        filter_ms.append((time.thread_time() - t0) * 1000)
        assert masks is not None
        terms = bm25.query_terms(texts[i])
        t0 = time.thread_time()
        bm25.bm25_scores(cols.lex, terms, cols.doclen[: cols.n], masks[1], masks[0])
        bm25_ms.append((time.thread_time() - t0) * 1000)
    index.close()
    if prof and profile:
        prof.dump_stats(str(profile))
        pstats.Stats(str(profile)).sort_stats("cumulative").print_stats(35)
        pstats.Stats(str(profile)).sort_stats("tottime").print_stats(25)
    return {
        "search_p50": float(np.percentile(search_ms, 50)),
        "search_p95": float(np.percentile(search_ms, 95)),
        "search_cpu_p50": float(np.percentile(search_cpu_ms, 50)),
        "filter_cpu_p50": float(np.percentile(filter_ms, 50)),
        "bm25_cpu_p50": float(np.percentile(bm25_ms, 50)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--profile", action="store_true", help="cProfile the searches")
    p.add_argument(
        "--ab",
        type=Path,
        default=None,
        metavar="SRC",
        help="another tree's layers/common/python to compare with (B)",
    )
    p.add_argument("--pairs", type=int, default=3, help="with --ab: A/B alternations")
    p.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    work = REPO_ROOT / "bench" / "out" / f"inproc-{args.records}"
    path = work / "index.sqlite3"
    if args.measure_only:
        out = measure(path, args.records, args.seed, args.queries, args.rounds, None)
        print(json.dumps(out))
        return
    if not (work / "built").exists():
        work.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        build(path, args.records, args.seed)
        (work / "built").write_text(str(args.records))
    if args.ab is None:
        out = measure(
            path,
            args.records,
            args.seed,
            args.queries,
            args.rounds,
            work / "find.prof" if args.profile else None,
        )
        print(json.dumps({**out, "records": args.records, "load": os.getloadavg()}))
        return
    # A/B: alternating subprocesses, each importing skald from its own tree.
    ours = REPO_ROOT / "layers" / "common" / "python"
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for _ in range(args.pairs):
        for label, src in (("A", ours), ("B", args.ab.resolve())):
            env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{REPO_ROOT}"}
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--records",
                str(args.records),
                "--queries",
                str(args.queries),
                "--rounds",
                str(args.rounds),
                "--seed",
                str(args.seed),
                "--measure-only",
            ]
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            row = json.loads(res.stdout.strip().splitlines()[-1])
            row["load1"] = os.getloadavg()[0]
            runs[label].append(row)
            print(json.dumps({"side": label, **row}), flush=True)
    for label, rows in runs.items():
        med = {k: float(np.median([r[k] for r in rows])) for k in rows[0] if k != "load1"}
        print(f"{label}: " + " ".join(f"{k}={v:.2f}ms" for k, v in med.items()))
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
