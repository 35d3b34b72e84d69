"""Skald benchmark: retrieval quality on LoCoMo, HTTP latency and ingest at growing corpus
sizes, server RSS, side by side with OpenViking in the same run. Writes bench/RESULTS.md,
raw JSON to bench/out/ and the latency plot to bench/out/latency.png (+ bench/latency.png).

    .venv/bin/python bench/run.py --quick   # 1k + 10k records, LoCoMo dev split (< 15 min)
    .venv/bin/python bench/run.py --full    # 1k + 10k + 100k records, more queries

See bench/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Run as a script (`python bench/run.py`): make `bench.*` importable from the repo root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import locomo, synthetic  # noqa: E402
from bench.common import (  # noqa: E402
    BENCH_DIR,
    OUT_DIR,
    REPO_ROOT,
    client,
    load_average,
    log,
    machine_info,
    peer_version,
    percentiles,
    source_state,
    timed,
    write_json,
)
from bench.report import write_plot, write_results  # noqa: E402
from bench.systems import (  # noqa: E402
    OPENVIKING_PYTHON,
    embed_server,
    openviking_available,
    openviking_server,
    skald_server,
)

ACCOUNT = "bench"
# One request may be the wait for a whole size step's processing: OpenViking's wait has no
# limit and took ~55 minutes for 90,000 records here, past the SDK's usual timeout.
WAIT_TIMEOUT_S = 4 * 3600.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="1k and 10k records (default)")
    mode.add_argument("--full", action="store_true", help="1k, 10k and 100k records")
    p.add_argument(
        "--locomo",
        type=Path,
        default=None,
        help="LoCoMo JSON (default: ../shared/data/locomo/locomo10-dev.json)",
    )
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="override record counts")
    p.add_argument("--queries", type=int, default=None, help="find/search queries per size")
    p.add_argument(
        "--conversations",
        type=int,
        default=None,
        help="only the first N LoCoMo conversations (for smoke runs)",
    )
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--no-peers", action="store_true", help="skip OpenViking")
    p.add_argument(
        "--no-setup-peers",
        dest="setup_peers",
        action="store_false",
        help="do not run bench/peers_setup.sh when OpenViking is not installed "
        "(by default it is installed on first use, ~1.3 GB)",
    )
    p.add_argument(
        "--peer-max-records",
        type=int,
        default=None,
        help="stop OpenViking's corpus growth at this size (default: 1,000 with "
        "--quick, which keeps the run under 15 minutes; every size with "
        "--full)",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the LoCoMo memory path")
    p.add_argument("--results", type=Path, default=BENCH_DIR / "RESULTS.md")
    return p.parse_args(argv)


def bare_embedder(texts: list[str], queries: list[str]) -> dict[str, Any]:
    """Texts/s of the bare embedder on the corpus' own texts, in this process, with the same
    defaults `skald serve` uses (OnnxMiniLMEmbedder())."""
    from skald.adapters.models.onnx_embedder import OnnxMiniLMEmbedder

    emb = OnnxMiniLMEmbedder()
    emb.warm_up()
    emb.embed(texts[:64])  # first-run allocations are not throughput
    t0 = time.perf_counter()
    for start in range(0, len(texts), 256):
        emb.embed(texts[start : start + 256])
    elapsed = time.perf_counter() - t0
    single = [timed(lambda q=q: emb.embed([q]))[0] for q in queries]  # type: ignore[misc]
    return {
        "texts": len(texts),
        "seconds": elapsed,
        "texts_per_s": len(texts) / elapsed,
        "single_query_ms": percentiles(single),
    }


def grow_and_measure(
    c: Any,
    server: Any,
    sizes: list[int],
    seed: int,
    n_queries: int,
    label: str,
    embedded: Callable[[], int] | None = None,
) -> dict[str, Any]:
    """Appends records up to each size, then times every operation at that size.
    `embedded` (texts embedded so far, when embeddings are served out of process) lets each
    ingest step count the texts it had embedded."""
    out: dict[str, Any] = {"sizes": {}}
    have = 0
    for size in sizes:
        log(f"{label}: ingest {have}..{size}")
        before = embedded() if embedded else None
        ing = synthetic.ingest(c, seed, have, size)
        if embedded is not None and before is not None:
            ing["texts_embedded"] = embedded() - before
        log(f"  {ing['files']} files in {ing['total_s']:.1f}s ({ing['files_per_s']:.1f} files/s)")
        have = size
        # grep scans the whole corpus (seconds at 100k): fewer of them
        wl = synthetic.workload(
            seed, size, n_queries, max(10, n_queries // 20), max(20, n_queries // 2)
        )
        log(f"{label}: latency at {size} records")
        lat = synthetic.measure_latency(c, wl)
        out["sizes"][str(size)] = {"ingest": ing, "latency_ms": lat, "rss_mb": server.rss_mb()}
    return out


def run_skald(
    args: argparse.Namespace, data: locomo.LoCoMo, sizes: list[int], n_queries: int
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    srv = skald_server(OUT_DIR / "work")
    log("skald: starting")
    res["startup_s"] = srv.start()
    res["rss_idle_mb"] = srv.rss_mb()
    log(f"skald: healthy after {res['startup_s']:.2f}s, RSS {res['rss_idle_mb']:.0f} MB")
    try:
        c = client(srv.url, ACCOUNT, "bench", timeout=WAIT_TIMEOUT_S)
        # /health can answer before the model is loaded: the first find shows the rest.
        res["first_find_ms"] = timed(lambda: c.find("warm up", limit=1))[0]
        res["synthetic"] = grow_and_measure(c, srv, sizes, args.seed, n_queries, "skald")
        res["rss_mb"] = srv.rss_mb()
        log(f"skald: RSS at {sizes[-1]} records {res['rss_mb']:.0f} MB")
        log("skald: LoCoMo resources ingest")
        res["locomo_ingest"] = locomo.ingest_resources(c, data)
        log(f"  {res['locomo_ingest']['files']} turns in {res['locomo_ingest']['total_s']:.1f}s")
        res["locomo"] = locomo.evaluate_resources(c, data, locomo.resource_askers(peer=False))
        res["locomo_fusion"] = locomo.fusion_analysis(data, res["locomo"])
        if not args.no_memory:
            log("skald: LoCoMo memory path")
            res["memory"] = locomo.evaluate_memories(
                lambda user: client(srv.url, ACCOUNT, user), data
            )
        res["rss_end_mb"] = srv.rss_mb()
        c.close()
    finally:
        srv.stop()
    return res


def probe_openviking_memory(url: str, data: locomo.LoCoMo) -> dict[str, Any]:
    """Feeds ONE LoCoMo session and reports what the commit task does (it needs an LLM)."""
    conv = data.conversations[0]
    one = locomo.Conversation(
        conv.sample_id,
        conv.speaker_a,
        conv.speaker_b,
        {k: v for k, v in list(conv.sessions.items())[:1]},
    )
    c = client(url, ACCOUNT, conv.sample_id)
    try:
        tasks = locomo.feed_conversation(c, one, timeout_s=180)
    except Exception as exc:
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    finally:
        c.close()
    task = next(iter(tasks.values()))
    return {
        "status": task.get("status"),
        "error": task.get("error"),
        "processing_seconds": task.get("processing_seconds"),
    }


def run_openviking(
    args: argparse.Namespace, data: locomo.LoCoMo, sizes: list[int], n_queries: int
) -> dict[str, Any]:
    import httpx

    res: dict[str, Any] = {"version": peer_version(OPENVIKING_PYTHON, "openviking")}
    work = OUT_DIR / "work"
    emb = embed_server(work)
    log("embed-server: starting")
    emb.start()
    setup = openviking_server(work, emb.url)
    res["config"] = setup.config
    srv = setup.server
    try:
        log("openviking: starting")
        res["startup_s"] = srv.start(timeout_s=300)
        res["rss_idle_mb"] = srv.rss_mb()
        log(f"openviking: healthy after {res['startup_s']:.2f}s, RSS {res['rss_idle_mb']:.0f} MB")
        # What one query embedding costs over the extra HTTP hop OpenViking needs (a kept-alive
        # connection, as OpenViking's client keeps one).
        with httpx.Client() as hc:
            body = {"input": "who repaired a quiet lighthouse", "model": "m"}
            for _ in range(5):
                hc.post(f"{emb.url}/v1/embeddings", json=body)
            hop = [
                timed(lambda: hc.post(f"{emb.url}/v1/embeddings", json=body))[0] for _ in range(50)
            ]
        res["embed_hop_ms"] = percentiles(hop)
        c = client(srv.url, ACCOUNT, "bench", timeout=WAIT_TIMEOUT_S)
        res["first_find_ms"] = timed(lambda: c.find("warm up", limit=1))[0]
        peer_sizes = [
            s for s in sizes if args.peer_max_records is None or s <= args.peer_max_records
        ]
        res["synthetic"] = grow_and_measure(
            c,
            srv,
            peer_sizes,
            args.seed,
            n_queries,
            "openviking",
            embedded=lambda: int(httpx.get(f"{emb.url}/stats").json()["texts"]),
        )
        res["rss_mb"] = srv.rss_mb()
        res["embed_server_rss_mb"] = emb.rss_mb()
        log(
            f"openviking: RSS at {peer_sizes[-1]} records {res['rss_mb']:.0f} MB "
            f"(+ embed server {res['embed_server_rss_mb']:.0f} MB)"
        )
        log("openviking: LoCoMo resources ingest")
        res["locomo_ingest"] = locomo.ingest_resources(c, data)
        log(f"  {res['locomo_ingest']['files']} turns in {res['locomo_ingest']['total_s']:.1f}s")
        res["locomo"] = locomo.evaluate_resources(c, data, locomo.resource_askers(peer=True))
        c.close()
        if not args.no_memory:
            log("openviking: memory path probe (one session)")
            res["memory_probe"] = probe_openviking_memory(srv.url, data)
            log(f"  commit task: {res['memory_probe']}")
        res["rss_end_mb"] = srv.rss_mb()
    finally:
        srv.stop()
        emb.stop()
    return res


def ensure_peers(args: argparse.Namespace) -> str | None:
    why = openviking_available()
    if why and args.setup_peers:
        log("installing OpenViking (bench/peers_setup.sh)")
        subprocess.run(["bash", str(BENCH_DIR / "peers_setup.sh")], check=True)
        why = openviking_available()
    return why


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    full = bool(args.full)
    mode = "full" if full else "quick"
    if args.sizes:
        mode += ", custom sizes"
    sizes = args.sizes or ([1_000, 10_000, 100_000] if full else [1_000, 10_000])
    n_queries = args.queries or (500 if full else 200)
    if args.peer_max_records is None and not full:
        # OpenViking ingests at ~1/2-1/3 of Skald's rate here: growing it to 10k too would
        # add ~7 minutes, past the quick run's 15-minute budget.
        args.peer_max_records = 1_000
    locomo_path = (args.locomo or locomo.default_locomo_path(REPO_ROOT)).resolve()
    command = " ".join(
        shlex.quote(a) for a in [Path(sys.executable).name, "bench/run.py", *(argv or sys.argv[1:])]
    )
    started = datetime.now(UTC)
    t_start = time.perf_counter()
    results: dict[str, Any] = {
        "mode": mode,
        "command": command,
        "started_at": started.isoformat(timespec="seconds"),
        "machine": machine_info(),
        "source": source_state(),
        "load_average_start": load_average(),
        "sizes": sizes,
        "queries_per_size": n_queries,
        "seed": args.seed,
        "locomo_path": str(locomo_path),
        "peer_max_records": args.peer_max_records,
    }
    log(f"mode {mode}: sizes {sizes}, {n_queries} queries per size, load {load_average()}")

    data = locomo.load_locomo(locomo_path, limit_conversations=args.conversations)
    results["locomo_data"] = {
        "conversations": len(data.conversations),
        "turns": len(data.turns),
        "questions": len(data.questions),
        "dropped_questions": data.dropped_questions,
        "dropped_evidence": data.dropped_evidence,
    }
    log(
        f"LoCoMo: {len(data.conversations)} conversations, {len(data.turns)} turns, "
        f"{len(data.questions)} questions (categories 1-4)"
    )

    # The bare embedder is timed right before and right after Skald's phase, on the corpus'
    # own texts: on a shared machine the load drifts, and the ingest ratio compares the mean.
    n_texts = 2000 if full else 600
    texts = synthetic.embedder_texts(args.seed, n_texts)
    probe_queries = synthetic.workload(args.seed, 1000, 60, 1, 1).find
    embedder_runs = []
    for when in ("before Skald", "after Skald"):
        if when == "after Skald":
            results["skald"] = run_skald(args, data, sizes, n_queries)
        log(f"bare embedder throughput ({when})")
        run = {"when": when, **bare_embedder(texts, probe_queries)}
        embedder_runs.append(run)
        log(
            f"  {run['texts_per_s']:.1f} texts/s, single query p50 "
            f"{run['single_query_ms']['p50']:.1f} ms"
        )
    results["embedder_runs"] = embedder_runs
    results["embedder"] = {
        "texts": n_texts,
        "texts_per_s": sum(r["texts_per_s"] for r in embedder_runs) / len(embedder_runs),
        "single_query_ms": {
            "p50": sum(r["single_query_ms"]["p50"] for r in embedder_runs) / len(embedder_runs)
        },
    }

    why = "disabled with --no-peers" if args.no_peers else ensure_peers(args)
    if why is None:
        try:
            results["openviking"] = run_openviking(args, data, sizes, n_queries)
        except Exception as exc:  # recorded, never faked
            log(f"openviking failed: {type(exc).__name__}: {exc}")
            results["openviking"] = {"error": f"{type(exc).__name__}: {exc}"}
    else:
        log(f"openviking skipped: {why}")
        results["openviking"] = {"skipped": why}

    results["load_average_end"] = load_average()
    results["elapsed_s"] = time.perf_counter() - t_start
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    raw = OUT_DIR / f"results-{mode.split(',')[0]}-{stamp}.json"
    write_json(raw, results)
    write_json(OUT_DIR / "results-latest.json", results)
    # The plot sits beside its RESULTS file: bench/latency.png for the default one,
    # bench/<name>-latency.png for another (e.g. a 100k run kept beside the quick one).
    plot = BENCH_DIR / "latency.png"
    if args.results.resolve() != (BENCH_DIR / "RESULTS.md").resolve():
        plot = args.results.with_name(f"{args.results.stem.lower()}-latency.png")
    results["plot_file"] = plot.name
    png = write_plot(results, OUT_DIR / "latency.png")
    if png is not None:
        shutil.copyfile(png, plot)
    write_results(results, args.results)
    log(f"done in {results['elapsed_s'] / 60:.1f} min: {args.results}, {raw}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
