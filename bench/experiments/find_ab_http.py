"""find latency (or another operation's, `--op grep`) through HTTP, A/B: this tree's server
against another tree's, running side by side on copies of one data directory, the queries
alternating between them one by one, so both see the same corpus and, as nearly as a shared
machine allows, the same load. Each side gets its own copy of the directory (two servers never
share one).

    .venv/bin/python bench/experiments/find_ab_http.py --records 10000 \\
        --data-dir bench/out/profile-10000/data --base /tmp/base/layers/common/python

`--data-dir` holds the first `--records` synthetic records (bench/experiments/profile_find.py
leaves one under bench/out/profile-<records>/data). B runs this interpreter and its packages
with the given source tree first on PYTHONPATH: only the product code differs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from openviking_sdk import SyncHTTPClient

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import synthetic  # noqa: E402
from bench.common import (  # noqa: E402
    OUT_DIR,
    REPO_ROOT,
    ServerProcess,
    alternate,
    client,
    free_port,
    log,
    percentiles,
)


def server(src: Path, data: Path, label: str) -> ServerProcess:
    port = free_port()
    return ServerProcess(
        f"skald-{label}",
        [
            sys.executable,
            "-m",
            "skald.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--data-dir",
            str(data),
        ],
        port,
        OUT_DIR / f"find-ab-{label}.log",
        env={"PYTHONPATH": f"{src}{os.pathsep}{REPO_ROOT}"},
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--base", type=Path, required=True, help="B's layers/common/python")
    p.add_argument("--rounds", type=int, default=3, help="passes over the queries")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--op", default="find", choices=sorted(synthetic.operations()))
    p.add_argument(
        "--account",
        default="bench",
        help="the account searched (bench/scale_build.py's data dirs: scalebench)",
    )
    args = p.parse_args()
    kind, call = synthetic.operations()[args.op]
    wl = synthetic.workload(args.seed, args.records, args.queries, args.queries, args.queries)
    items = wl.of(kind)
    ours = REPO_ROOT / "layers" / "common" / "python"
    # Both servers run at once, each on its own copy of the corpus, and the queries
    # alternate between them one by one: a load spike from elsewhere hits both sides alike.
    sides: dict[str, ServerProcess] = {}
    for label, src in (("A", ours), ("B", args.base.resolve())):
        copy = OUT_DIR / f"find-ab-data-{label}"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(args.data_dir, copy)
        sides[label] = server(src, copy, label)
    try:
        clients: dict[str, SyncHTTPClient] = {}
        for label, srv in sides.items():
            srv.start()
            clients[label] = client(srv.url, args.account, "bench")
        for c in clients.values():
            for q in items[:20]:  # warm-up: model sessions, caches, connection
                call(c, q)
        times, loads = alternate(clients, items, call, args.rounds)
        for c in clients.values():
            c.close()
    finally:
        for srv in sides.values():
            srv.stop()
    for label in ("A", "B"):
        s = percentiles(times[label])
        log(f"{label}: {args.op} n={s['n']} p50={s['p50']:.2f} ms p95={s['p95']:.2f} ms")
    diffs = sorted(a - b for a, b in zip(times["A"], times["B"], strict=True))
    log(f"A - B per query pair: median {diffs[len(diffs) // 2]:.2f} ms")
    log(f"load average (1 min) per round: {loads}; at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
