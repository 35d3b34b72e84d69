"""Where does a find's time go inside `skald serve`? Samples the server with py-spy while a
client loops over find (or another operation) and prints the functions that hold the most
samples, by own time and by inclusive time.

    pip install --target /tmp/pyspy py-spy   # then pass --py-spy /tmp/pyspy/bin/py-spy
    .venv/bin/python bench/experiments/profile_find.py [--records 2000] [--op find] [--seconds 20]

The corpus is the benchmark's synthetic one; the data directory is kept under
bench/out/profile-<records>/ and reused by later runs (ingest is the slow part).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import synthetic  # noqa: E402
from bench.common import OUT_DIR, ServerProcess, client, free_port, log, percentiles  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=2000)
    p.add_argument(
        "--op",
        default="find",
        choices=[*synthetic.operations(), "ingest"],
        help="an operation of the latency run, or `ingest` (appends records)",
    )
    p.add_argument(
        "--ingest-records",
        type=int,
        default=1000,
        help="with --op ingest: how many records to append while sampling",
    )
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    p.add_argument("--top", type=int, default=25)
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="an existing Skald data directory that already holds the first "
        "--records synthetic records (e.g. bench/out/work/skald-data after a "
        "run), instead of ingesting them",
    )
    p.add_argument(
        "--account",
        default="bench",
        help="the account whose records are searched (bench/scale_build.py's data "
        "dirs: scalebench)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="SKALD_X=V",
        help="server setting to try (e.g. SKALD_WORKER_THREADS=1)",
    )
    args = p.parse_args()

    work = OUT_DIR / f"profile-{args.records}"
    data = args.data_dir or work / "data"
    # The marker names how many records the default data dir holds; an external data dir is
    # taken as it is (it once marked the default one "external", which then stayed empty).
    ready = work / "ingested"
    ingested = args.data_dir is not None or (
        ready.exists() and ready.read_text().strip() == str(args.records)
    )
    if not ingested and data.exists():
        shutil.rmtree(data)  # a half-ingested corpus from an interrupted run
    port = free_port()
    env = dict(kv.split("=", 1) for kv in args.env)
    srv = ServerProcess(
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
            str(data),
        ],
        port,
        work / "server.log",
        env=env,
    )
    srv.start()
    try:
        c = client(srv.url, args.account, "bench")
        if not ingested:
            log(f"ingesting {args.records} records (kept for later runs)")
            synthetic.ingest(c, args.seed, 0, args.records)
            work.mkdir(parents=True, exist_ok=True)
            ready.write_text(str(args.records))
        wl = synthetic.workload(args.seed, args.records, 400, 60, 200)
        call: synthetic.Op
        items: list[str]
        if args.op == "ingest":
            # The ingest itself is the sampled work (below); there is no call to loop over.
            call, items = (lambda _c, _q: None), [""]
        else:
            kind, call = synthetic.operations()[args.op]
            items = wl.of(kind)
            for q in items[:10]:
                call(c, q)
        raw = work / f"{args.op}.collapsed"
        assert srv.proc is not None
        spy = subprocess.Popen(
            [
                args.py_spy,
                "record",
                "--pid",
                str(srv.proc.pid),
                "--rate",
                "250",
                "--duration",
                str(int(args.seconds)),
                "--format",
                "raw",
                "--output",
                str(raw),
                "--nonblocking",
                "--threads",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # py-spy attaches
        times = _timed_calls(c, args, call, items)
        _, err = spy.communicate(timeout=args.seconds + 60)
        c.close()
    finally:
        srv.stop()
    s = percentiles(times)
    log(f"{args.op}: n={s['n']} p50={s['p50']:.1f} ms p95={s['p95']:.1f} ms")
    if not raw.exists():
        log(f"py-spy produced nothing: {err.decode(errors='replace')[-500:]}")
        return
    _print_top(raw, args.top)


def _timed_calls(
    c: Any, args: argparse.Namespace, call: synthetic.Op, items: list[str]
) -> list[float]:
    """The milliseconds of each call made while py-spy samples (one ingest with --op ingest)."""
    times: list[float] = []
    deadline = time.perf_counter() + args.seconds - 1.5
    i = 0
    if args.op == "ingest":
        start = args.records + 1_000_000  # far past the kept corpus: no collision
        t0 = time.perf_counter()
        done = synthetic.ingest(c, args.seed, start, start + args.ingest_records)
        times.append((time.perf_counter() - t0) * 1000)
        log(f"ingest while sampling: {done['files_per_s']:.1f} files/s")
        c.rm(f"{synthetic.ROOT}/a{start // 10_000:02d}", recursive=True)
        deadline = 0.0
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        call(c, items[i % len(items)])
        times.append((time.perf_counter() - t0) * 1000)
        i += 1
    return times


def _print_top(raw: Path, top: int) -> None:
    """The functions holding the most busy samples, by own and by inclusive samples."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith("thread")]
        # Only the request path: the event loop idling in select is not find's time.
        if not frames or "select" in frames[-1] or "wait (threading" in frames[-1]:
            continue
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    log(f"{total} busy samples; collapsed stacks in {raw}")
    print(f"\nTop {top} by own samples:")
    for f, n in own.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {f}")
    print(f"\nTop {top} by inclusive samples (skald frames):")
    for f, n in [x for x in inclusive.most_common(400) if "skald" in x[0]][:top]:
        print(f"  {100 * n / total:5.1f}%  {f}")


if __name__ == "__main__":
    main()
