"""Smoke check of a Skald deployment, in under a minute, through openviking-sdk.

    python scripts/smoke.py --url https://<api>/prod --api-key <user key>
    make smoke URL=https://<api>/prod KEY=<user key>

Checks, in order: /health answers; a request without a key is refused (401) and the key is
accepted; a file written is read back; `find` retrieves it (dense retrieval: needs the k-NN
engine of a real search domain or the embedded index); a session commit is accepted and its
archive completes. Everything it writes lives under a fresh viking://resources/smoke-<id>/
and session smoke-<id>, removed at the end. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from openviking_sdk import SyncHTTPClient


class SmokeFailure(AssertionError):
    pass


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


def _until(probe: Callable[[], Any], deadline: float, what: str) -> Any:
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SmokeFailure(f"timed out waiting for {what}")
        time.sleep(1.0)


def run(
    url: str, api_key: str, *, timeout_s: float = 55.0, out: Callable[[str], None] = print
) -> bool:
    url = url.rstrip("/")
    deadline = time.monotonic() + timeout_s
    run_id = uuid.uuid4().hex[:8]
    folder = f"viking://resources/smoke-{run_id}"
    session_id = f"smoke-{run_id}"
    client = SyncHTTPClient(url=url, api_key=api_key, timeout=30)
    client.initialize()
    state: dict[str, Any] = {}

    def health() -> None:
        body = httpx.get(f"{url}/health", timeout=10).json()
        _check(body.get("status") == "ok", f"/health answered {body}")

    def auth() -> None:
        refused = httpx.get(f"{url}/api/v1/fs/ls", params={"uri": "viking://resources"}, timeout=10)
        _check(refused.status_code == 401, f"a request without key got {refused.status_code}")
        client.ls("viking://resources")

    def write_read() -> None:
        text = f"# Smoke {run_id}\n\nThe lighthouse keeper logs tide tables at dawn.\n"
        client.write(f"{folder}/tides.md", text, mode="create", wait=True)
        _check(client.read(f"{folder}/tides.md") == text, "the file read back differs")

    def find() -> None:
        def hit() -> bool:
            found = client.find("lighthouse keeper tide tables", target_uri=folder, limit=5)
            return any(r["uri"].endswith("/tides.md") for r in found.get("resources", []))

        _until(hit, deadline, "find to return the written file")

    def commit() -> None:
        client.create_session(session_id)
        client.add_message(session_id, "user", "I prefer smoked tea; my name is Smoke.")
        done = client.commit_session(session_id)
        _check(done.get("status") == "accepted", f"commit answered {done}")
        task_id = done.get("task_id")
        state["task"] = task_id

        def finished() -> bool:
            task = client.get_task(task_id) if task_id else None
            status = (task or {}).get("status")
            _check(status != "failed", f"the archive task failed: {task}")
            return status == "completed"

        _until(finished, deadline, "the commit's archive to complete")

    steps = (
        ("health", health),
        ("auth", auth),
        ("write/read", write_read),
        ("find", find),
        ("commit", commit),
    )
    try:
        return _run_steps(steps, out)
    finally:
        # Best effort: the checks' verdict stands whatever the cleanup meets.
        with contextlib.suppress(Exception):
            client.rm(folder, recursive=True)
        with contextlib.suppress(Exception):
            client.delete_session(session_id)
        client.close()


def _run_steps(
    steps: tuple[tuple[str, Callable[[], None]], ...], out: Callable[[str], None]
) -> bool:
    """Runs the checks in order, reporting each; True when every one passed."""
    ok = True
    for name, step in steps:
        started = time.monotonic()
        try:
            step()
        except Exception as exc:  # each failure is reported, the rest still tried
            ok = False
            out(f"FAIL {name}: {type(exc).__name__}: {exc}")
            if name in ("health", "auth"):
                break  # nothing else can work
        else:
            out(f"ok   {name} ({time.monotonic() - started:.1f} s)")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the API URL (stack output ApiUrl)")
    parser.add_argument("--api-key", required=True, help="a user key (not the root key)")
    parser.add_argument("--timeout", type=float, default=55.0, help="seconds for all checks")
    args = parser.parse_args(argv)
    started = time.monotonic()
    ok = run(args.url, args.api_key, timeout_s=args.timeout)
    print(f"{'smoke passed' if ok else 'smoke FAILED'} in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
