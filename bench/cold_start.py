"""Cold-start proxy and asset sizes of the Lambda functions (AWS backend).

For each HTTP function (content, search, sessions) a fresh Python process imports the handler
module, which builds the FastAPI app and the AWS container (S3, DynamoDB, SQS, OpenSearch,
Bedrock clients; the search index is checked once) against emulators on loopback: moto for
AWS and osmem-server for OpenSearch. The time from interpreter start to a ready handler is
what a cold start costs on top of the Lambda runtime's own init. Sizes come from `build/`
(`make lambda-assets`), against Lambda's 250 MB unzipped limit.

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
FUNCTIONS = ("content", "search", "sessions")
LAMBDA_LIMIT_MB = 250.0
PROBE = (
    "import time, runpy; t0 = time.perf_counter(); "
    "ns = runpy.run_path({path!r}); assert callable(ns['handler']); "
    "print(time.perf_counter() - t0)"
)


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def measure(env: dict[str, str], runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for name in FUNCTIONS:
        path = str(ROOT / "functions" / name / "handler.py")
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", PROBE.format(path=path)], env=env,
                                  capture_output=True, text=True, timeout=120, check=False)
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
        subprocess.run([sys.executable, str(ROOT / "scripts/build_lambda_assets.py")],
                       check=True)
    sys.path.insert(0, str(ROOT / "layers/common/python"))
    from skald.adapters.aws.local_stack import LocalAwsStack
    from skald.config import Settings

    stack = LocalAwsStack(Settings(embedding_provider="bedrock"))
    settings = stack.start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKALD_")}
        for field, value in settings.model_dump().items():
            if value is not None and not isinstance(value, dict | list):
                env[f"SKALD_{field.upper()}"] = str(value)
        env.update(SKALD_BACKEND="aws", SKALD_EMBEDDING_PROVIDER="bedrock",
                   SKALD_EMBEDDING_DIMENSION="1024",
                   PYTHONPATH=str(ROOT / "layers/common/python"))
        samples = measure(env, args.runs)
    finally:
        stack.stop()
    lines = [
        "# Lambda cold-start proxy and asset sizes", "",
        f"- date: {datetime.now(UTC).isoformat(timespec='seconds')}",
        f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}",
        f"- command: `.venv/bin/python bench/cold_start.py --runs {args.runs}`",
        f"- load average at start: {os.getloadavg()[0]:.2f}", "",
        "Import of the handler module + FastAPI app + AWS container, in a fresh interpreter "
        "(wall time of the whole process, target <= 1.5 s):", "",
        "| function | p50 s | min s | max s |", "|---|---|---|---|",
    ]
    for name, values in samples.items():
        lines.append(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | "
                     f"{max(values):.2f} |")
    build = ROOT / "build"
    if (build / "layer").exists():
        layer = dir_mb(build / "layer")
        lines += ["", "Unzipped sizes (limit 250 MB for a function plus its layers):", "",
                  "| asset | MB | with layer |", "|---|---|---|", f"| layer | {layer:.1f} | |"]
        for fn in sorted((build / "functions").iterdir()) if (build / "functions").exists() \
                else []:
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
