"""One Lambda execution environment: a process that imports one function's real handler module
(functions/<code>/<module>.py, as the Lambda runtime does) and invokes it once per event read
from its protocol pipe, one at a time (a Lambda instance serves one request at a time).

Protocol: the parent writes one JSON line `{"event": ...}` per invocation on stdin; the host
answers one JSON line on the file descriptor given as argv[2] (the handler's own logging,
Powertools' JSON lines among it, goes to stdout/stderr as in Lambda) with the result, the wall
and CPU time of the call, and the process's VmHWM/VmRSS after it. The first line it writes
reports the init (import) cost. The settings come from the environment, as in Lambda.

    python bench/lambda_host.py <function> <fd>
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers/common/python"))

from skald import catalog  # noqa: E402

# Set by the sizing harness only: its fixture web server listens on loopback, which the fetch
# path refuses everywhere but in `skald serve` tests (and the aws backend refuses the setting).
ALLOW_LOOPBACK_ENV = "SIZING_ALLOW_LOOPBACK"


class Context:
    """What the handlers read from a Lambda context."""

    def __init__(self, name: str, memory_mb: int, timeout_s: int) -> None:
        self.function_name = f"skald-{name}"
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:000000000000:function:skald-{name}"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = "sizing"
        self.log_group_name = f"/aws/lambda/skald-{name}"
        self.log_stream_name = "sizing"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def memory_kb() -> dict[str, int]:
    """VmHWM (peak resident set) and VmRSS of this process, in kB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0])
    return out


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def allow_loopback() -> None:
    from skald.domain.sources import netguard

    blocked = netguard.blocked_reason

    def lenient(ip: Any, *, allow_loopback: bool = False) -> str | None:
        return blocked(ip, allow_loopback=True)

    netguard.blocked_reason = lenient


def main() -> int:
    name, fd = sys.argv[1], int(sys.argv[2])
    out = os.fdopen(fd, "w", buffering=1)
    fn = catalog.function(name)
    wall0, cpu0 = time.perf_counter(), cpu_s()
    if os.environ.get(ALLOW_LOOPBACK_ENV):
        allow_loopback()
    module, _, attribute = fn.handler.partition(".")
    handler = runpy.run_path(str(ROOT / "functions" / fn.code / f"{module}.py"))[attribute]
    out.write(
        json.dumps(
            {
                "init_ms": (time.perf_counter() - wall0) * 1000,
                "init_cpu_ms": (cpu_s() - cpu0) * 1000,
                **memory_kb(),
            }
        )
        + "\n"
    )
    for line in sys.stdin:
        request = json.loads(line)
        context = Context(name, fn.memory_mb, fn.timeout_s)
        wall0, cpu0 = time.perf_counter(), cpu_s()
        result: Any = None
        error = None
        try:
            result = handler(request["event"], context)
        except Exception as exc:  # reported to the caller, as Lambda reports a failed invoke
            error = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        out.write(
            json.dumps(
                {
                    "result": result,
                    "error": error,
                    "ms": (time.perf_counter() - wall0) * 1000,
                    "cpu_ms": (cpu_s() - cpu0) * 1000,
                    **memory_kb(),
                },
                default=str,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
