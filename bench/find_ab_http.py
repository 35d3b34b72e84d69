"""find latency through HTTP, A/B: this tree's server against another tree's, one after the
other over the same data directory (A, B, A, B, ...), so both see the same corpus and, as
nearly as a shared machine allows, the same load.

    .venv/bin/python bench/find_ab_http.py --records 10000 \\
        --data-dir bench/out/profile-10000/data --base /tmp/base/layers/common/python

`--data-dir` holds the first `--records` synthetic records (bench/profile_find.py leaves one
under bench/out/profile-<records>/data). B runs this interpreter and its packages with the
given source tree first on PYTHONPATH: only the product code differs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import synthetic  # noqa: E402
from bench.common import OUT_DIR, ServerProcess, client, free_port, log, percentiles  # noqa: E402

HERE = Path(__file__).resolve().parent


def one_run(src: Path, data: Path, items: list[str], label: str) -> dict[str, float]:
    port = free_port()
    srv = ServerProcess(f"skald-{label}", [sys.executable, "-m", "skald.cli", "serve", "--host",
                                           "127.0.0.1", "--port", str(port), "--data-dir",
                                           str(data)],
                        port, OUT_DIR / f"find-ab-{label}.log",
                        env={"PYTHONPATH": f"{src}{os.pathsep}{HERE.parent}"})
    srv.start()
    try:
        c = client(srv.url, "bench", "bench")
        _, call = synthetic.operations()["find"]
        for q in items[:20]:  # warm-up: model sessions, caches, connection
            call(c, q)
        times: list[float] = []
        for q in items:
            t0 = time.perf_counter()
            call(c, q)
            times.append((time.perf_counter() - t0) * 1000)
        c.close()
    finally:
        srv.stop()
    s = percentiles(times)
    return {"p50": s["p50"], "p95": s["p95"], "n": s["n"], "load1": os.getloadavg()[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--base", type=Path, required=True, help="B's layers/common/python")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--seed", type=int, default=20240601)
    args = p.parse_args()
    items = synthetic.workload(args.seed, args.records, args.queries, 0, 0).find
    ours = HERE.parent / "layers" / "common" / "python"
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for _ in range(args.pairs):
        for label, src in (("A", ours), ("B", args.base.resolve())):
            row = one_run(src, args.data_dir.resolve(), items, label)
            runs[label].append(row)
            log(json.dumps({"side": label, **row}))
    for label, rows in runs.items():
        p50s = sorted(r["p50"] for r in rows)
        log(f"{label}: find p50 per run {[round(x, 1) for x in p50s]} ms, "
            f"median {p50s[len(p50s) // 2]:.1f} ms")
    log(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
