"""Opening the embedded index at scale: how long `LocalSearchIndex(...)` takes on a data dir of
bench/scale_build.py (default 1M records), and the process's peak RSS, in each case an open
meets. Not a test.

Each open runs in its own process (peak RSS is that process's), in this order:

1. no generation in the sidecar folder: every column rebuilt from SQLite row by row, vectors
   encoded, the generation (vectors + columns snapshot) written;
2. reopen: the generation read as is;
3. after a few writes (`--small` records added in another account): the generation plus the
   rows added since, read from SQLite;
4. after many writes (`--large` more, past the reuse bound): a new generation written from the
   old one and the rows since (`_renewed`: no row-by-row rebuild of the old rows);
5. after deleting every added record: the generation, those rows dropped as tombstones;
6. reopen again.

The added records are deleted again in step 5, so the data dir's content ends as it started
(their rowids are gone for good; the next step-1 open rebuilds the folder anyway).

    .venv/bin/python bench/experiments/index_reopen.py --size 1000000
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import scale_build  # noqa: E402
from bench.common import REPO_ROOT, load_average, log, machine_info, write_json  # noqa: E402
from skald.adapters.local.index import load as index_load  # noqa: E402
from skald.adapters.local.index.searchindex import LocalSearchIndex  # noqa: E402
from skald.ports import IndexRecord  # noqa: E402

SCRATCH = "reopen-bench"


def db_path(size: int) -> Path:
    return scale_build.data_dir(size) / "index.db"


def open_once(path: Path) -> dict[str, Any]:
    """Child process: one open, timed, with its peak RSS."""
    t = time.perf_counter()
    index = LocalSearchIndex(path, scale_build.DIM)
    took = time.perf_counter() - t
    cols = index._cols
    # VmHWM, not getrusage's ru_maxrss: that one carries the parent's peak over fork+exec.
    status = dict(
        line.split(":", 1)
        for line in Path("/proc/self/status").read_text().splitlines()
        if ":" in line
    )
    out = {
        "open_s": took,
        "rows": cols.n,
        "tombstones": cols.dead,
        "peak_rss_mb": int(status["VmHWM"].split()[0]) / 1024,
    }
    index.close()
    return out


def timed_open(path: Path, label: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(path)],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    res: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    res.update(
        case=label,
        load=load_average()[0],
        generations=sorted(p.name for p in index_load.sidecar_path(path).glob("*.ok")),
    )
    log(f"{label}: {json.dumps(res)}")
    return res


def add(path: Path, first: int, count: int) -> None:
    rng = np.random.default_rng(first)
    with LocalSearchIndex(path, scale_build.DIM) as index:
        for s in range(first, first + count, 2000):
            vecs = rng.standard_normal((min(2000, first + count - s), scale_build.DIM))
            index.upsert(
                [
                    IndexRecord(
                        account=SCRATCH,
                        uri=f"viking://resources/scratch/f{s + i}.md",
                        level=2,
                        context_type="resource",
                        parent="viking://resources/scratch",
                        ancestors=["viking://resources", "viking://resources/scratch"],
                        text=f"scratch record {s + i}",
                        vector=v.tolist(),
                    )
                    for i, v in enumerate(vecs)
                ]
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--large", type=int, default=140_000)
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(open_once(args.child)))
        return 0
    scale_build.build(args.size)
    path = db_path(args.size)
    started = dt.datetime.now(dt.UTC)
    for ok in index_load.sidecar_path(path).glob("*.ok"):
        ok.unlink()  # step 1 rebuilds
    runs = [timed_open(path, "no generation: rebuilt from SQLite"), timed_open(path, "reopen")]
    add(path, 0, args.small)
    runs.append(timed_open(path, f"after {args.small:,} records added"))
    add(path, args.small, args.large)
    runs.append(timed_open(path, f"after {args.small + args.large:,} added: renewed"))
    with LocalSearchIndex(path, scale_build.DIM) as index:
        index.delete_prefix(SCRATCH, "viking://resources/scratch")
    runs.append(timed_open(path, "after deleting them"))
    runs.append(timed_open(path, "reopen"))
    out = {
        "started": started.isoformat(timespec="seconds"),
        "size": args.size,
        "machine": machine_info(),
        "runs": runs,
    }
    write_json(REPO_ROOT / "bench" / "out" / f"index_reopen-{args.size}.json", out)
    print("| case | open s | peak RSS MB | rows | tombstones | load |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        print(
            f"| {r['case']} | {r['open_s']:.1f} | {r['peak_rss_mb']:,.0f} | {r['rows']:,} "
            f"| {r['tombstones']:,} | {r['load']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
