"""Index at scale: `find` through HTTP (openviking-sdk against `skald serve`) at 10k / 100k /
1M records, with the floor measured in the same run. Not a test.

The data dirs are built in-process by bench/scale_build.py (cached under
bench/out/scale-find/, git-ignored: reruns skip the build): records written straight into the
embedded index, their vectors the real embedder's for a sample of texts plus noise (see there).
Per size:

- startup: `skald serve` on the data dir until /health answers (it opens the index: at 1M, the
  first open after a build also writes the vector sidecar, so the server is started twice and
  both are reported);
- find p50/p95 through the client, default search (hybrid) and `search_type=semantic`, the
  queries bench/synthetic.py's find workload;
- the floor: the query's embedding (the same embedder, in this process) plus an exact float32
  scan of every record's vector (numpy, one thread) and its top 10;
- round trip: `health` through the same client (what any request costs; the floor leaves it
  out);
- client alone: the same finds through the same kind of client against bench/null_server.py,
  which answers each at once with the server's own answer to the first query (the client's
  cost of a find: building the request, the loopback, reading and parsing the answer, and the
  little a server must do to answer at all). A server that embedded the query and did nothing
  else would answer a find through this client in about its embedding plus this;
- recall@10: the semantic find's 10 URIs against that exact float32 top 10;
- RSS: the server's after the queries, per record, and over the empty server's.

OpenViking cannot be run at these sizes here (it ingests through its own pipeline, a few
records a second on this machine): the results say so.

    .venv/bin/python bench/scale_find.py --sizes 10000 100000 1000000 --queries 100
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from threadpoolctl import threadpool_limits

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scale_build  # noqa: E402
from bench.common import (  # noqa: E402
    REPO_ROOT,
    ServerProcess,
    client,
    free_port,
    load_average,
    log,
    merged_hits,
    percentiles,
    write_json,
)
from bench.sections import write_section  # noqa: E402
from bench.synthetic import ROOT, record_uri, workload  # noqa: E402
from skald.adapters.local.index.quant import EXACT_ROWS  # noqa: E402

RESULTS = REPO_ROOT / "bench" / "RESULTS.md"
ROUND_TRIPS = 200


def server(ddir: Path, name: str) -> ServerProcess:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "skald.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(ddir),
    ]
    return ServerProcess(
        name, cmd, port, ddir.parent / f"{name}.log", env={"SKALD_BACKEND": "local"}, cwd=REPO_ROOT
    )


def timed_finds(
    c: Any, queries: list[str], options: dict[str, Any] | None
) -> tuple[list[float], list[list[str]]]:
    times, uris = [], []
    for q in queries:
        t0 = time.perf_counter()
        res = c.find(q, target_uri=ROOT, limit=10, options=options)
        times.append((time.perf_counter() - t0) * 1000)
        uris.append([h["uri"] for h in merged_hits(res)])
    return times, uris


def round_trips(c: Any, n: int) -> list[float]:
    """The client's round trip to the server with no work behind it (`health`): what any
    request through this client costs, which the floor leaves out."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.health()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def client_alone(answer: bytes, queries: list[str], work: Path) -> dict[str, Any]:
    """The finds' and `health`'s times through a fresh openviking-sdk client against a
    server that does no work (bench/null_server.py) answering every find with `answer`."""
    canned = work / "null-find-answer.json"
    canned.write_bytes(answer)
    port = free_port()
    srv = ServerProcess(
        "null",
        [sys.executable, str(REPO_ROOT / "bench" / "null_server.py"), str(port), str(canned)],
        port,
        work / "null.log",
    )
    srv.start()
    try:
        c = client(srv.url, scale_build.ACCOUNT, "bench")
        timed_finds(c, queries[:5], None)
        find_ms, _ = timed_finds(c, queries, None)
        return {"find": percentiles(find_ms), "health": percentiles(round_trips(c, ROUND_TRIPS))}
    finally:
        srv.stop()


def find_answer(url: str, query: str) -> bytes:
    """The server's answer, as sent, to a default find of `query` (the SDK's request)."""
    r = httpx.post(
        url + "/api/v1/search/find",
        json={"query": query, "target_uri": ROOT, "limit": 10},
        headers={"X-OpenViking-Account": scale_build.ACCOUNT, "X-OpenViking-User": "bench"},
        timeout=60,
    )
    r.raise_for_status()
    return r.content


def floor(size: int, queries: list[str]) -> dict[str, Any]:
    """Query embedding and exact float32 scan times, and the exact top 10 URIs."""
    from skald.adapters.models.onnx_embedder import OnnxMiniLMEmbedder

    emb = OnnxMiniLMEmbedder()
    emb.embed(["warm up"])
    embed_ms, qvecs = [], []
    for q in queries:
        t0 = time.perf_counter()
        qvecs.append(np.asarray(emb.embed([q])[0], dtype=np.float32))
        embed_ms.append((time.perf_counter() - t0) * 1000)
    mat = scale_build.all_vectors(size)
    scan_ms, exact = [], []
    with threadpool_limits(limits=1, user_api="blas"):
        for qv in qvecs:
            t0 = time.perf_counter()
            sims = mat @ (qv / np.linalg.norm(qv))
            part = np.argpartition(-sims, 9)[:10]
            top = part[np.argsort(-sims[part])]
            scan_ms.append((time.perf_counter() - t0) * 1000)
            exact.append([record_uri(int(i)) for i in top])
    del mat
    return {
        "embed": percentiles(embed_ms),
        "scan": percentiles(scan_ms),
        "exact": exact,
        "floor_p50_ms": statistics.median(embed_ms) + statistics.median(scan_ms),
    }


def recall(got: list[list[str]], exact: list[list[str]]) -> float:
    hits = sum(len(set(g[:10]) & set(e)) for g, e in zip(got, exact, strict=True))
    return hits / (10 * len(exact))


def run_size(size: int, n_queries: int, warmup: int, base_rss: float) -> dict[str, Any]:
    built = scale_build.build(size)
    ddir = scale_build.data_dir(size)
    queries = workload(scale_build.SEED, size, n_queries, 0, 0).find
    out: dict[str, Any] = {"records": size, "build": built, "load_start": load_average()}
    fresh_sidecar = not any(ddir.glob("index.db.vectors/*.ok"))
    starts: list[float] = []
    n_starts = 2 if fresh_sidecar and size > EXACT_ROWS else 1
    for attempt in range(n_starts):
        srv = server(ddir, f"skald-{attempt}")
        starts.append(srv.start(timeout_s=1800))
        log(f"n={size}: server healthy in {starts[-1]:.1f}s (load {load_average()[0]})")
        if attempt < n_starts - 1:
            srv.stop()
    out["startup_s"] = starts  # [first open (writes the sidecar), reopen] or [reopen]
    try:
        c = client(srv.url, scale_build.ACCOUNT, "bench")
        timed_finds(c, queries[:warmup], None)
        timed_finds(c, queries[:warmup], {"extra": {"search_type": "semantic"}})
        hyb_ms, _ = timed_finds(c, queries, None)
        sem_ms, sem_uris = timed_finds(c, queries, {"extra": {"search_type": "semantic"}})
        trip_ms = round_trips(c, ROUND_TRIPS)
        rss = srv.rss_mb()
        answer = find_answer(srv.url, queries[0])
    finally:
        srv.stop()
    alone = client_alone(answer, queries, ddir.parent)
    out["load_after_finds"] = load_average()
    fl = floor(size, queries)
    out.update(
        {
            "find_hybrid": percentiles(hyb_ms),
            "find_semantic": percentiles(sem_ms),
            "floor": {k: v for k, v in fl.items() if k != "exact"},
            "round_trip": percentiles(trip_ms),
            "client_alone": alone,
            "recall_at_10": recall(sem_uris, fl["exact"]),
            "rss_mb": rss,
            "rss_bytes_per_record": rss * 2**20 / size,
            "rss_over_empty_bytes_per_record": (rss - base_rss) * 2**20 / size,
            "load_end": load_average(),
        }
    )
    log(f"n={size}: {json.dumps({k: v for k, v in out.items() if k != 'build'})}")
    return out


def empty_server_rss() -> float:
    ddir = scale_build.ROOT_DIR / "empty" / "data"
    if ddir.exists():
        shutil.rmtree(ddir)
    ddir.mkdir(parents=True)
    srv = server(ddir, "skald-empty")
    srv.start()
    try:
        c = client(srv.url, scale_build.ACCOUNT, "bench")
        c.find("warm up the embedder", target_uri="viking://resources", limit=10)
        return srv.rss_mb()
    finally:
        srv.stop()


def fmt(v: float) -> str:
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def section(res: dict[str, Any]) -> str:
    lines = [
        "## Index at scale (bench/scale_find.py)",
        "",
        f"- Date: {res['date']}; machine as above (2 cores shared with other work: compare "
        "rows of one run, and read each with its load average).",
        f"- Command: `{res['command']}`; {res['queries']} queries per size (bench/synthetic.py's "
        "find workload), after warm-up, one at a time through openviking-sdk's client.",
        "- Records: written straight into the data dir's embedded index (bench/scale_build.py): "
        "text from bench/synthetic.py, vectors the real embedder's (all-MiniLM-L6-v2 int8) for "
        f"{scale_build.SAMPLE:,} sample texts, each record one of them plus Gaussian noise "
        f"(sigma {scale_build.NOISE} per dimension, re-normalised). Not synthetic random vectors; "
        "not 1M embedded texts either (out of reach here).",
        "- find: default search (hybrid: BM25 + dense, fused) and `search_type=semantic`; "
        "floor = the query's embedding + an exact float32 numpy scan of every vector and its "
        "top 10, measured in the same run (bench process, server stopped). Recall@10: the "
        "semantic find's 10 URIs against that exact top 10. Round trip: p50 of "
        f"{ROUND_TRIPS} `health` calls through the same client, right after the finds (the cost "
        "of any request through openviking-sdk's client, which the floor leaves out). Client "
        "alone: the same finds through a new client of the same kind against "
        "bench/null_server.py, which answers each at once with this server's answer to the "
        "first query; '(embed + client) / floor' is then about the ratio of a server that "
        "embedded the query and did nothing else, through this client.",
        "- Above 32,768 vectors the index holds 8-bit codes + float32 re-scoring "
        "(adapters/local/index/quant.py); below, the float32 matrix. RSS is the server's after "
        f"the queries; 'over empty' subtracts an empty server's ({fmt(res['empty_rss_mb'])} MB "
        "after one find).",
        "- OpenViking: not run at these sizes (its ingestion pipeline embeds every record "
        "through its own server; 100k records would take hours on this machine, 1M days).",
        "",
        "| records | find p50 / p95 ms (hybrid) | find p50 / p95 ms (semantic) | floor p50 ms "
        "(embed + scan) | p50 / floor | round trip p50 ms | p50 / (floor + round trip) | "
        "client alone p50 ms (find / health) | (embed + client) / floor | recall@10 | RSS MB | "
        "bytes/record (over empty) | build s | startup s | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["sizes"]:
        fl = r["floor"]
        ratio = r["find_hybrid"]["p50"] / fl["floor_p50_ms"]
        trip = r.get("round_trip", {}).get("p50")
        trip_cols = (
            "n/a | n/a"
            if trip is None
            else f"{fmt(trip)} | {r['find_hybrid']['p50'] / (fl['floor_p50_ms'] + trip):.2f}"
        )
        alone = r.get("client_alone")
        alone_cols = (
            "n/a | n/a"
            if alone is None
            else f"{fmt(alone['find']['p50'])} / {fmt(alone['health']['p50'])} | "
            f"{(fl['embed']['p50'] + alone['find']['p50']) / fl['floor_p50_ms']:.2f}"
        )
        starts = " / ".join(fmt(s) for s in r["startup_s"])
        lines.append(
            f"| {r['records']:,} | {fmt(r['find_hybrid']['p50'])} / "
            f"{fmt(r['find_hybrid']['p95'])} | {fmt(r['find_semantic']['p50'])} / "
            f"{fmt(r['find_semantic']['p95'])} | {fmt(fl['floor_p50_ms'])} "
            f"({fmt(fl['embed']['p50'])} + {fmt(fl['scan']['p50'])}) | {ratio:.2f} | {trip_cols} | "
            f"{alone_cols} | "
            f"{r['recall_at_10']:.3f} | {fmt(r['rss_mb'])} | "
            f"{r['rss_bytes_per_record']:,.0f} ({r['rss_over_empty_bytes_per_record']:,.0f}) | "
            f"{fmt(r['build']['build_s'])} | {starts} | "
            f"{r['load_start'][0]:.2f} -> {r['load_end'][0]:.2f} |"
        )
    lines += [
        "",
        "Startup: with two values, the first open after the build (it writes the "
        "vector sidecar) then a reopen (it reads it).",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="leave bench/RESULTS.md alone")
    args = ap.parse_args()
    res: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python bench/scale_find.py " + " ".join(sys.argv[1:]),
        "queries": args.queries,
        "load_start": load_average(),
        "sizes": [],
    }
    res["empty_rss_mb"] = empty_server_rss()
    for size in args.sizes:
        res["sizes"].append(run_size(size, args.queries, args.warmup, res["empty_rss_mb"]))
        write_json(scale_build.ROOT_DIR / "results-latest.json", res)
    text = section(res)
    print(text)
    if not args.no_write:
        write_section(RESULTS, "scale-find", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
