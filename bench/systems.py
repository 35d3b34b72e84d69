"""How each compared system is started: Skald (`skald serve`) and OpenViking
(`openviking-server` from its own venv, embeddings from bench/embed_server.py).

Both are plain subprocesses on loopback ports with their data under bench/out/, started from an
empty data directory so their startup times compare like for like."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import PEERS_DIR, REPO_ROOT, ServerProcess, free_port

OPENVIKING_VENV = PEERS_DIR / "openviking-venv"
OPENVIKING_SERVER = OPENVIKING_VENV / "bin" / "openviking-server"
OPENVIKING_PYTHON = OPENVIKING_VENV / "bin" / "python"
EMBED_MODEL = "all-MiniLM-L6-v2-int8"


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def skald_server(workdir: Path) -> ServerProcess:
    data = _fresh(workdir / "skald-data")
    port = free_port()
    # The same command line as `make serve`, through this interpreter (the project's venv).
    cmd = [
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
    ]
    # No SKALD_* variable leaks in from the caller's shell (ServerProcess drops them): the
    # defaults are what is measured.
    env = {"SKALD_BACKEND": "local"}
    return ServerProcess("skald", cmd, port, workdir / "skald-server.log", env=env, cwd=REPO_ROOT)


def embed_server(workdir: Path) -> ServerProcess:
    port = free_port()
    cmd = [sys.executable, str(REPO_ROOT / "bench" / "embed_server.py"), "--port", str(port)]
    return ServerProcess(
        "embed-server",
        cmd,
        port,
        workdir / "embed-server.log",
        env={"PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
    )


@dataclass
class OpenVikingSetup:
    server: ServerProcess
    config_path: Path
    config: dict[str, object] = field(default_factory=dict)


def openviking_available() -> str | None:
    """None when the peer can run, else why not."""
    if not OPENVIKING_SERVER.exists():
        return (
            f"{OPENVIKING_SERVER} not found: run `bash bench/peers_setup.sh` first "
            "(or pass --setup-peers)"
        )
    return None


def openviking_server(workdir: Path, embed_url: str) -> OpenVikingSetup:
    root = _fresh(workdir / "openviking")
    port = free_port()
    # ov.conf: dev auth on loopback (no root key), local storage under bench/out, dense
    # embeddings from our OpenAI-compatible endpoint; no `vlm` section, so no LLM is ever
    # called (vectors only: no summaries, and session memory extraction cannot run).
    config: dict[str, object] = {
        "server": {"host": "127.0.0.1", "port": port},
        "storage": {"workspace": str(root / "data")},
        "embedding": {
            "dense": {
                "provider": "openai",
                "model": EMBED_MODEL,
                "api_base": f"{embed_url}/v1",
                "api_key": "bench-local",
                "dimension": 384,
            },
        },
    }
    config_path = root / "ov.conf"
    config_path.write_text(json.dumps(config, indent=2))
    cmd = [str(OPENVIKING_SERVER), "--config", str(config_path)]
    # HOME is moved under bench/out so the peer writes nothing (caches, ~/.openviking) to the
    # real home directory.
    env = {"HOME": str(root / "home"), "OPENVIKING_CONFIG_FILE": str(config_path)}
    (root / "home").mkdir()
    server = ServerProcess("openviking", cmd, port, root / "server.log", env=env, cwd=root)
    return OpenVikingSetup(server, config_path, config)
