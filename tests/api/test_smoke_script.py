"""scripts/smoke.py (`make smoke`) against a live `skald serve` with API keys, so the
deploy check cannot rot: it passes with a user key and fails, with a non-zero status, when a
check fails."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from tests.api.conftest import ROOT_KEY, make_client
from tests.support.server import SkaldServer

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "smoke.py"


def _smoke(url: str, key: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--url", url, "--api-key", key],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_smoke_passes_on_a_healthy_server(key_server: SkaldServer) -> None:
    root = make_client(key_server.url, api_key=ROOT_KEY)
    key = root.admin_create_account("smoke-" + uuid.uuid4().hex[:8], "ops")["user_key"]
    root.close()
    done = _smoke(key_server.url, key)
    assert done.returncode == 0, done.stdout + done.stderr
    for check in ("health", "auth", "write/read", "find", "commit"):
        assert f"ok   {check}" in done.stdout
    assert "smoke passed" in done.stdout


def test_smoke_fails_with_a_bad_key(key_server: SkaldServer) -> None:
    done = _smoke(key_server.url, "not-a-key")
    assert done.returncode == 1
    assert "ok   health" in done.stdout
    assert "FAIL auth" in done.stdout
    assert "smoke FAILED" in done.stdout
