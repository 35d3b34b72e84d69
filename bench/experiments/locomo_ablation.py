"""Ablation of the ranking features on LoCoMo dev: ingest once, then measure every variant.

The server runs in this process (the same composition and HTTP app as `skald serve`, on a
loopback port) so a variant can switch one ranking feature off by replacing the function or
constant that implements it, for the duration of its questions; the product has no switch for
it. Both processing modes are ingested once, as in locomo_client_view.py: account `default`
(L0/L1 sidecars and vectors) and account `vectors` (`processing_mode=vectors_only`). The data
directory is kept (bench/out/work-ablation/) and reused by later runs of the same data set, so
a new variant costs the questions only (760 finds per account), not a re-ingest. Metrics are
the client view's: every hit returned by `find(query, target_uri=<conversation>, limit=10)`
holds its rank, sidecars included.

    .venv/bin/python bench/experiments/locomo_ablation.py [--variants all|NAME ...] [--fresh]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "layers" / "common" / "python"))

from openviking_sdk import SyncHTTPClient  # noqa: E402

from bench.common import free_port, log, machine_info, merged_hits, percentiles  # noqa: E402
from bench.experiments.locomo_client_view import (  # noqa: E402
    PROCESSING,
    client_view_metrics,
    ingest,
)
from bench.locomo import ROOT, aggregate, default_locomo_path, load_locomo  # noqa: E402

OUT_DIR = REPO_ROOT / "bench" / "out"
WORK = OUT_DIR / "work-ablation"
MARKER = "ingested.json"

Patch = tuple[str, str, Callable[[Any], Any]]  # module, attribute, new value from the old


def _no_sequence_context(old: Any) -> Any:
    return lambda cands, **_: cands


def _fuse_without_summary_rule(old: Any) -> Any:
    return lambda *rankings, is_summary=None: old(*rankings)


def _stats_over_every_record(old: Any) -> Any:
    return lambda cols, base: base


SEQ = "skald.domain.retrieval.sequence"
RET = "skald.services.retrieval.service"
RANK = "skald.adapters.local.index.ranking"

# Each variant is the final code with the listed features switched off or changed.
VARIANTS: dict[str, list[Patch]] = {
    "final": [],
    "no sequence context": [(RET, "sequence_context", _no_sequence_context)],
    "no file-only fusion": [(RANK, "rrf_fuse", _fuse_without_summary_rule)],
    "no file-only BM25 statistics": [(RANK, "bm25_stats_mask", _stats_over_every_record)],
    "none of the three (base ranking)": [
        (RET, "sequence_context", _no_sequence_context),
        (RANK, "rrf_fuse", _fuse_without_summary_rule),
        (RANK, "bm25_stats_mask", _stats_over_every_record),
    ],
    "sequence context alone (no file-only fusion or BM25 statistics)": [
        (RANK, "rrf_fuse", _fuse_without_summary_rule),
        (RANK, "bm25_stats_mask", _stats_over_every_record),
    ],
    "sequence context, pool 2 per result (base depth)": [
        (RET, "CANDIDATES_PER_RESULT", lambda old: 2)
    ],
    "neighbours at distance 1 only (0.5)": [(SEQ, "NEIGHBOUR_WEIGHTS", lambda old: (0.5,))],
    "neighbour weights 0.25 / 0.125": [(SEQ, "NEIGHBOUR_WEIGHTS", lambda old: (0.25, 0.125))],
    "neighbour weights 1.0 / 0.5": [(SEQ, "NEIGHBOUR_WEIGHTS", lambda old: (1.0, 0.5))],
    "absent neighbour = lowest candidate score": [
        (SEQ, "absent_neighbour_score", lambda old: lambda scores: min(scores, default=0.0))
    ],
    "context never lowers a part below its own score": [
        (
            RET,
            "sequence_scores",
            lambda old: (
                lambda cands: (
                    None
                    if (new := old(cands)) is None
                    else [max(own, ctx) for (_, own), ctx in zip(cands, new, strict=True)]
                )
            ),
        )
    ],
    "absent neighbour = 0": [(SEQ, "absent_neighbour_score", lambda old: lambda scores: 0.0)],
}


@contextlib.contextmanager
def patched(patches: list[Patch]) -> Iterator[None]:
    saved: list[tuple[Any, str, Any]] = []
    try:
        for module_name, attr, make in patches:
            module = importlib.import_module(module_name)
            old = getattr(module, attr)  # AttributeError: the variant names nothing real
            saved.append((module, attr, old))
            setattr(module, attr, make(old))
        yield
    finally:
        for module, attr, old in reversed(saved):
            setattr(module, attr, old)


class InProcessServer:
    """`skald serve`'s composition and app in this process, uvicorn in a thread."""

    def __init__(self, data_dir: Path) -> None:
        import uvicorn

        from skald.api.app import create_app
        from skald.compose.serve import ServeRuntime
        from skald.config import Settings

        self.port = free_port()
        settings = Settings(host="127.0.0.1", port=self.port, data_dir=data_dir, backend="local")
        self.runtime = ServeRuntime(settings)
        self.runtime.recover_commits()
        self.runtime.start_workers()
        config = uvicorn.Config(
            create_app(self.runtime.services), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.runtime.stop()


def evaluate(
    c: SyncHTTPClient, questions: list[Any]
) -> tuple[dict[str, Any], dict[str, float], list[float]]:
    """Client-view metrics per category, recall@10 per conversation (a change tuned to one
    conversation would show as a gain in some and a loss in others), find latencies."""
    rows: list[dict[str, Any]] = []
    times: list[float] = []
    for q in questions:
        t0 = time.perf_counter()
        answer = c.find(q.text, target_uri=f"{ROOT}/{q.sample_id}", limit=10)
        times.append((time.perf_counter() - t0) * 1000.0)
        rows.append(
            {
                "category": q.category,
                "conversation": q.sample_id,
                **client_view_metrics(merged_hits(answer), q.evidence),
            }
        )
    per_conversation: dict[str, list[float]] = {}
    for row in rows:
        per_conversation.setdefault(row["conversation"], []).append(row["recall@10"])
    return (
        aggregate(rows, ["recall@5", "recall@10", "sidecars@10"]),
        {k: sum(v) / len(v) for k, v in per_conversation.items()},
        times,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--locomo", type=Path, default=default_locomo_path(REPO_ROOT))
    ap.add_argument("--variants", nargs="+", default=["all"])
    ap.add_argument("--fresh", action="store_true", help="re-ingest into a new data dir")
    args = ap.parse_args()
    names = list(VARIANTS) if args.variants == ["all"] else args.variants
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants: {unknown}; known: {list(VARIANTS)}")
    data = load_locomo(args.locomo)
    data_dir = WORK / "skald-data"
    marker = WORK / MARKER
    if args.fresh and WORK.exists():
        import shutil

        shutil.rmtree(WORK)
    reuse = marker.exists() and json.loads(marker.read_text()).get("locomo") == str(args.locomo)
    WORK.mkdir(parents=True, exist_ok=True)
    srv = InProcessServer(data_dir)
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "locomo": str(args.locomo),
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
        "variants": {},
    }
    clients: dict[str, SyncHTTPClient] = {}
    try:
        for account, mode in PROCESSING.items():
            c = SyncHTTPClient(url=srv.url, account=account, user="bench", timeout=600)
            c.initialize()
            clients[account] = c
            if not reuse:
                seconds = ingest(c, data, mode)
                results[f"ingest_s ({account})"] = seconds
                log(f"ingested ({account}) in {seconds:.0f} s")
        if not reuse:
            marker.write_text(
                json.dumps({"locomo": str(args.locomo), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ")})
            )
        for turn, name in enumerate(names, start=1):
            # A variant may be named twice (alternating runs compare latencies under drifting
            # load): each run keeps its own row.
            label = name if name not in results["variants"] else f"{name} (run {turn})"
            with patched(VARIANTS[name]):
                row: dict[str, Any] = {}
                for account, c in clients.items():
                    metrics, by_conv, times = evaluate(c, data.questions)
                    row[account] = {
                        "metrics": metrics,
                        "find_ms": percentiles(times),
                        "recall@10 per conversation": by_conv,
                        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
                    }
                    o = metrics["overall"]
                    log(
                        f"{label:<48} {account:<8} recall@5={o['recall@5']:.3f} "
                        f"recall@10={o['recall@10']:.3f} sidecars@10={o['sidecars@10']:.3f} "
                        f"find p50={row[account]['find_ms']['p50']:.1f} ms "
                        f"load={row[account]['loadavg']}"
                    )
                results["variants"][label] = row
    finally:
        for c in clients.values():
            c.close()
        srv.stop()
    results["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"locomo-ablation-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=1, default=str))
    print(table(results))
    log(f"raw results: {path}")


def table(results: dict[str, Any]) -> str:
    """Markdown rows for bench/README.md: one per (variant, processing)."""
    lines = [
        "| variant | processing | recall@5 | recall@10 | sidecars@10 | multi-hop | "
        "temporal | open-domain | single-hop | recall@10 per conversation | find p50 ms | "
        "load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results["variants"].items():
        for account, r in row.items():
            m = r["metrics"]
            cats = " | ".join(
                f"{m[c]['recall@10']:.3f}"
                for c in ("multi-hop", "temporal", "open-domain", "single-hop")
            )
            o = m["overall"]
            convs = " / ".join(f"{v:.3f}" for v in r["recall@10 per conversation"].values())
            lines.append(
                f"| {name} | {account} | {o['recall@5']:.3f} | {o['recall@10']:.3f} | "
                f"{o['sidecars@10']:.3f} | {cats} | {convs} | "
                f"{r['find_ms']['p50']:.1f} | {r['loadavg'][0]} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
