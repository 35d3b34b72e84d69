"""An operation (grep by default) through the SDK, Skald beside OpenViking 0.5.2, each on its
own kept data directory of the same synthetic corpus (a `bench/run.py` run leaves both under
bench/out/work/), the queries alternating between them one by one, so both see, as nearly as a
shared machine allows, the same load.

    .venv/bin/python bench/experiments/peer_ab_http.py --records 100000 \\
        --skald-data bench/out/work/skald-data --openviking-data bench/out/work/openviking/data

Each server runs on a copy of its directory (both write to it). OpenViking gets the embedding
server it was built with (bench/embed_server.py), as in `bench/run.py`.
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
    ServerProcess,
    alternate,
    client,
    free_port,
    log,
    percentiles,
)
from bench.systems import embed_server, openviking_available, openviking_server  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--skald-data", type=Path, required=True)
    p.add_argument(
        "--openviking-data",
        type=Path,
        required=True,
        help="OpenViking's storage workspace (its ov.conf `storage.workspace`)",
    )
    p.add_argument("--rounds", type=int, default=2, help="passes over the queries")
    p.add_argument("--queries", type=int, default=10)
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--op", default="grep", choices=sorted(synthetic.operations()))
    p.add_argument("--account", default="bench")
    args = p.parse_args()
    why = openviking_available()
    if why is not None:
        sys.exit(why)
    kind, call = synthetic.operations()[args.op]
    wl = synthetic.workload(args.seed, args.records, args.queries, args.queries, args.queries)
    items = wl.of(kind)
    work = OUT_DIR / "peer-ab"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    skald_copy = work / "skald-data"
    shutil.copytree(args.skald_data, skald_copy)
    port = free_port()
    skald = ServerProcess(
        "skald",
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
            str(skald_copy),
        ],
        port,
        work / "skald.log",
        env={"SKALD_BACKEND": "local"},
    )
    emb = embed_server(work)
    sides: dict[str, ServerProcess] = {"skald": skald}
    try:
        emb.start()
        setup = openviking_server(work, emb.url)  # an empty workspace: replaced below
        workspace = Path(str(setup.config["storage"]["workspace"]))  # type: ignore[index]
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.copytree(args.openviking_data, workspace)
        sides["openviking"] = setup.server
        clients: dict[str, SyncHTTPClient] = {}
        for label, srv in sides.items():
            log(f"{label}: started in {srv.start(timeout_s=600):.1f} s")
            clients[label] = client(srv.url, args.account, "bench")
        for c in clients.values():
            for q in items[:3]:  # warm-up: caches, connection
                call(c, q)
        times, loads = alternate(clients, items, call, args.rounds)
        for c in clients.values():
            c.close()
    finally:
        for srv in (*sides.values(), emb):
            srv.stop()
    for label, values in times.items():
        s = percentiles(values)
        log(f"{label}: {args.op} n={s['n']} p50={s['p50']:.1f} ms p95={s['p95']:.1f} ms")
    ratio = percentiles(times["skald"])["p50"] / percentiles(times["openviking"])["p50"]
    log(f"Skald / OpenViking p50: {ratio:.2f}")
    log(f"load average (1 min) per round: {loads}; at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
