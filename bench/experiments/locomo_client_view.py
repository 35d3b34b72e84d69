"""LoCoMo dev recall of default `find` as a client sees it, default processing against
vectors-only processing.

Every LoCoMo turn is one file (as in locomo.py), written twice on one fresh `skald serve`: in
account `default` with the default processing (L0/L1 sidecars of every directory, vectors)
and in account `vectors` with `processing_mode=vectors_only` (vectors only, no sidecars).
Each question of categories 1-4 is asked with `find(query, target_uri=<conversation>,
limit=10)` and nothing else, the call a client makes by default. Every returned hit holds its
rank, sidecars included: recall@k is the share of the question's evidence turns among the
first k hits (a sidecar is a hit that is no evidence turn). For reference the level-2-only
ranking of locomo.py (`level=2`, limit 20, distinct files) is measured as well.

    .venv/bin/python bench/experiments/locomo_client_view.py [--locomo PATH] [--conversations N]

Prints one table row per (processing, ranking) and writes the raw numbers to
bench/out/locomo-client-view-<time>.json. The data set is read in place.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from openviking_sdk import SyncHTTPClient  # noqa: E402

from bench.common import log, machine_info, merged_hits  # noqa: E402
from bench.locomo import (  # noqa: E402
    ROOT,
    LoCoMo,
    aggregate,
    default_locomo_path,
    dia_of_uri,
    load_locomo,
)
from bench.systems import skald_server  # noqa: E402

OUT_DIR = REPO_ROOT / "bench" / "out"
KS = (5, 10)
PROCESSING = {"default": None, "vectors": "vectors_only"}


def ingest(c: SyncHTTPClient, data: LoCoMo, processing_mode: str | None) -> float:
    t0 = time.perf_counter()
    c.mkdir(ROOT)
    options: dict[str, Any] = {}
    if processing_mode is not None:
        options["processing_mode"] = processing_mode
    for conv in data.conversations:
        root = f"{ROOT}/{conv.sample_id}"
        c.mkdir(root)
        turns = [t for s in conv.sessions.values() for t in s]
        for start in range(0, len(turns), 200):
            ops = [{"uri": t.uri, "content": t.file_text()} for t in turns[start : start + 200]]
            c.batch_write(root, ops, wait=False, options=options or None)
    c.wait_processed()
    return time.perf_counter() - t0


def client_view_metrics(hits: list[dict[str, Any]], evidence: tuple[str, ...]) -> dict[str, float]:
    """recall@k over the first k hits as returned, every hit (a sidecar too) taking a rank."""
    relevant = set(evidence)
    dias = [dia_of_uri(str(h.get("uri", ""))) for h in hits]
    out = {f"recall@{k}": len(relevant & {d for d in dias[:k] if d}) / len(relevant) for k in KS}
    out["sidecars@10"] = float(
        sum(
            1 for h in hits[:10] if str(h.get("uri", "")).endswith((".abstract.md", ".overview.md"))
        )
    )
    return out


def level2_metrics(hits: list[dict[str, Any]], evidence: tuple[str, ...]) -> dict[str, float]:
    """locomo.py's ranking: distinct level-2 files, sidecars never asked for."""
    relevant = set(evidence)
    ranked: list[str] = []
    for h in hits:
        d = dia_of_uri(str(h.get("uri", "")))
        if d is not None and d not in ranked:
            ranked.append(d)
    return {f"recall@{k}": len(relevant & set(ranked[:k])) / len(relevant) for k in KS}


def evaluate(c: SyncHTTPClient, data: LoCoMo) -> dict[str, Any]:
    client_rows: list[dict[str, Any]] = []
    level2_rows: list[dict[str, Any]] = []
    for q in data.questions:
        scope = f"{ROOT}/{q.sample_id}"
        hits = merged_hits(c.find(q.text, target_uri=scope, limit=10))
        client_rows.append({"category": q.category, **client_view_metrics(hits, q.evidence)})
        l2 = merged_hits(c.find(q.text, target_uri=scope, limit=20, options={"level": 2}))
        level2_rows.append({"category": q.category, **level2_metrics(l2, q.evidence)})
    return {
        "client view (find default, limit 10)": aggregate(
            client_rows, [*(f"recall@{k}" for k in KS), "sidecars@10"]
        ),
        "level 2 only (locomo.py)": aggregate(level2_rows, [f"recall@{k}" for k in KS]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--locomo", type=Path, default=default_locomo_path(REPO_ROOT))
    ap.add_argument("--conversations", type=int, default=None)
    args = ap.parse_args()
    data = load_locomo(args.locomo, limit_conversations=args.conversations)
    log(
        f"LoCoMo: {len(data.conversations)} conversations, {len(data.turns)} turns, "
        f"{len(data.questions)} questions"
    )
    srv = skald_server(OUT_DIR / "work-client-view")
    srv.start()
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "locomo": str(args.locomo),
    }
    try:
        for name, mode in PROCESSING.items():
            c = SyncHTTPClient(url=srv.url, account=name, user="bench", timeout=600)
            c.initialize()
            results[f"ingest_s ({name})"] = ingest(c, data, mode)
            log(f"ingested ({name}) in {results[f'ingest_s ({name})']:.0f} s")
            results[name] = evaluate(c, data)
            for ranking, metrics in results[name].items():
                o = metrics["overall"]
                extra = f" sidecars@10={o['sidecars@10']:.2f}" if "sidecars@10" in o else ""
                log(
                    f"  {name} processing, {ranking}: recall@5={o['recall@5']:.3f} "
                    f"recall@10={o['recall@10']:.3f}{extra} (n={o['n']})"
                )
            c.close()
    finally:
        srv.stop()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"locomo-client-view-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=1, default=str))
    log(f"raw results: {path}")


if __name__ == "__main__":
    main()
