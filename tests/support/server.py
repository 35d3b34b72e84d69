"""A live `skald serve` subprocess on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PortTaken(RuntimeError):
    """The server could not bind its port: another process took it first."""


REPO_ROOT = Path(__file__).resolve().parents[2]


class SkaldServer:
    """`capture`: a file where every AWS request the server sends is written, with the tenant
    of the call sending it (tests/support/tenancy_launcher.py)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        root_api_key: str | None = None,
        env: dict[str, str] | None = None,
        capture: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.root_api_key = root_api_key
        self.extra_env = env or {}
        self.capture = capture
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        # Test workers run side by side: a port found free may be taken before the server
        # binds it. The server then exits at once, and another port is tried.
        for attempt in range(3):
            try:
                self._start(timeout_s)
                return
            except PortTaken:
                if attempt == 2:
                    raise

    def _start(self, timeout_s: float) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKALD_")}
        env.update(self.extra_env)
        entry = ["skald.cli"]
        if self.capture is not None:
            entry = ["tests.support.tenancy_launcher", str(self.capture)]
            # The launcher is a module of this repository's tests.
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (env.get("PYTHONPATH", ""), str(REPO_ROOT)) if p
            )
        cmd = [
            sys.executable,
            "-m",
            *entry,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        if self.root_api_key:
            cmd += ["--root-api-key", self.root_api_key]
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text()[-2000:]
                if f"{self.port}): address already in use" in tail:
                    raise PortTaken(self.port)
                raise RuntimeError(f"skald serve exited: {tail}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("skald serve did not become healthy in time")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def running_server(data_dir: Path, **kw: object) -> Iterator[SkaldServer]:
    server = SkaldServer(data_dir, **kw)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()
