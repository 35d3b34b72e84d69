"""Cold-start proxy and asset sizes of the Lambda functions (AWS backend).

For each function of the catalogue a fresh Python process imports its handler module, which
builds its handler (the FastAPI app for an HTTP function) over an empty composition: adapters
and AWS clients are built by the first invocation that uses them, so the import needs no
emulator and makes no AWS call (tests/unit/compose/test_lambda_imports.py checks that). The
time from interpreter start to a ready handler is what a cold start costs on top of the Lambda
runtime's own init. Sizes come from `build/` (`make lambda-assets`), against Lambda's 250 MB
unzipped limit.

    .venv/bin/python bench/cold_start.py [--runs 5] [--build]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers/common/python"))
from skald import catalog  # noqa: E402

LAMBDA_LIMIT_MB = 250.0
PROBE = (
    "import time, runpy; t0 = time.perf_counter(); "
    "ns = runpy.run_path({path!r}); assert callable(ns[{attribute!r}]); "
    "print(time.perf_counter() - t0)"
)
# A deployed function's environment; nothing listens there, and nothing should be called.
NOWHERE = "http://127.0.0.1:9"


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def measure(env: dict[str, str], runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for fn in catalog.FUNCTIONS:
        module, _, attribute = fn.handler.partition(".")
        path = str(ROOT / "functions" / fn.code / f"{module}.py")
        name = fn.name
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            probe = PROBE.format(path=path, attribute=attribute)
            done = subprocess.run(
                [sys.executable, "-c", probe],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            wall = time.perf_counter() - start
            if done.returncode != 0:
                raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
            samples.append(wall)
        out[name] = samples
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--build", action="store_true", help="run make lambda-assets first")
    args = parser.parse_args()
    if args.build:
        subprocess.run([sys.executable, str(ROOT / "scripts/build_lambda_assets.py")], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKALD_")}
    env.update({name: "deployed" for fn in catalog.FUNCTIONS for name in catalog.environment(fn)})
    env.update(
        SKALD_BACKEND="aws",
        SKALD_AWS_ENDPOINT_URL=NOWHERE,
        SKALD_OPENSEARCH_ENDPOINT=NOWHERE,
        SKALD_OPENSEARCH_AUTH="none",
        SKALD_EMBEDDING_PROVIDER="bedrock",
        SKALD_EMBEDDING_DIMENSION="1024",
        SKALD_LLM_PROVIDER="bedrock",
        SKALD_JOB_MAX_ATTEMPTS="5",
        SKALD_SETUP_WAIT_S="0",
        AWS_DEFAULT_REGION="us-east-1",
        PYTHONPATH=str(ROOT / "layers/common/python"),
    )
    samples = measure(env, args.runs)
    lines = [
        "# Lambda cold-start proxy and asset sizes",
        "",
        f"- date: {datetime.now(UTC).isoformat(timespec='seconds')}",
        f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}",
        f"- command: `.venv/bin/python bench/cold_start.py --runs {args.runs}`",
        f"- load average at start: {os.getloadavg()[0]:.2f}",
        "",
        "Import of the handler module (app + empty composition), in a fresh interpreter "
        "(wall time of the whole process, target <= 1.5 s):",
        "",
        "| function | p50 s | min s | max s |",
        "|---|---|---|---|",
    ]
    for name, values in samples.items():
        lines.append(
            f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )
    build = ROOT / "build"
    if (build / "layer").exists():
        layer = dir_mb(build / "layer")
        lines += [
            "",
            "Unzipped sizes (limit 250 MB for a function plus its layers):",
            "",
            "| asset | MB | with layer |",
            "|---|---|---|",
            f"| layer | {layer:.1f} | |",
        ]
        for fn in sorted((build / "functions").iterdir()) if (build / "functions").exists() else []:
            size = dir_mb(fn)
            lines.append(f"| functions/{fn.name} | {size:.3f} | {size + layer:.1f} |")
    else:
        lines += ["", "(no build/: run `make lambda-assets` or pass --build for sizes)"]
    report = "\n".join(lines) + "\n"
    (ROOT / "bench" / "COLD_START.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
