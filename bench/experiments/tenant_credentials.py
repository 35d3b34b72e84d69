"""The cost per request of tenant-scoped credentials (skald.adapters.aws.tenancy.clients), on
moto: the same S3 HeadObject and DynamoDB GetItem sent

- with the function's own client (no tenant-scoped credentials: the baseline);
- through the routed client in an account's scope, its credentials cached (a cache hit: the
  routing decision and the cache lookup on top of the baseline);
- through the routed client for an account seen for the first time (a cache miss: the STS
  AssumeRole round trip, then the request);

and, without any request, the routing decision alone (classify the call, read the tenant, look
its credentials up) and the STS AssumeRole round trip alone.

moto runs in its own process on loopback: its latencies are a local emulator's, not AWS's (a
request to S3 or DynamoDB, and to STS, takes milliseconds to tens of milliseconds there). What
carries over is the shape: a hit adds microseconds, a miss adds one STS round trip, once per
account and container per session (an hour at most: role chaining).

    .venv/bin/python bench/experiments/tenant_credentials.py [--requests 300] [--misses 40]

Writes bench/out/tenant-credentials-<time>.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "layers/common/python"))

OUT_DIR = ROOT / "bench" / "out"

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/skald-bench-tenant"
BUCKET, TABLE = "skald-bench", "skald-bench-state"


# bench/common.py needs the bench extra (psutil, the SDK); this needs only the dev extra.
def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentiles(values_ms: list[float]) -> dict[str, float]:
    xs = sorted(values_ms)

    def q(p: float) -> float:
        pos = (len(xs) - 1) * p
        lo, hi = math.floor(pos), math.ceil(pos)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return {"n": len(xs), "p50": q(0.5), "p95": q(0.95), "mean": sum(xs) / len(xs)}


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    import boto3
    import moto

    return {
        "cpu_model": cpu,
        "logical_cores": os.cpu_count(),
        "python": platform.python_version(),
        "boto3": boto3.__version__,
        "moto": moto.__version__,
    }


def _moto(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("moto did not start")


def _ms(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def _row(name: str, values_ms: list[float]) -> dict[str, Any]:
    stats = percentiles(values_ms)
    return {
        "case": name,
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in stats.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--misses", type=int, default=40)
    args = parser.parse_args()
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }.items():
        os.environ[name] = value
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    moto = _moto(port)
    try:
        rows = _measure(endpoint, args.requests, args.misses)
    finally:
        moto.terminate()
        moto.wait(10)
    result: dict[str, Any] = {
        "benchmark": "tenant_credentials",
        "when": datetime.now(UTC).isoformat(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "machine": machine(),
        "rows": rows,
    }
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"tenant-credentials-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2))
    print(
        f"\n{result['when'][:16]} UTC, load {result['load_average']}, "
        f"{result['machine']['cpu_model']}, moto on loopback\n"
    )
    print("| case | n | p50 ms | p95 ms | mean ms |\n|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['case']} | {row['n']} | {row['p50']:.3f} | {row['p95']:.3f} | "
            f"{row['mean']:.3f} |"
        )


def _measure(endpoint: str, requests: int, misses: int) -> list[dict[str, Any]]:
    import boto3

    from skald.adapters.aws.factory import AwsAdapterFactory
    from skald.adapters.aws.local_stack import create_state_table
    from skald.config import Settings
    from skald.domain.access.call_context import tenant_scope

    admin_s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    admin_s3.create_bucket(Bucket=BUCKET)
    create_state_table(boto3.client("dynamodb", endpoint_url=endpoint, region_name=REGION), TABLE)
    accounts = ["acme", *(f"acct{i}" for i in range(misses + 1))]
    for account in accounts:
        admin_s3.put_object(Bucket=BUCKET, Key=f"{account}/notes/a.md", Body=b"# A\n")
    settings = Settings(backend="aws", bucket=BUCKET, state_table=TABLE, aws_endpoint_url=endpoint)
    own = AwsAdapterFactory(settings)
    scoped = AwsAdapterFactory(settings.model_copy(update={"tenant_role_arn": ROLE}))
    own_s3, own_dynamo = own._s3(), own._table("state")[0]
    routed_s3, routed_dynamo = scoped._s3(), scoped._table("state")[0]
    sessions = scoped.tenant_sessions()

    def head(client: Any, account: str) -> Callable[[], Any]:
        return lambda: client.head_object(Bucket=BUCKET, Key=f"{account}/notes/a.md")

    def get_item(client: Any, account: str) -> Callable[[], Any]:
        return lambda: client.get_item(
            TableName=TABLE, Key={"pk": {"S": f"ACCT#{account}"}, "sk": {"S": "META"}}
        )

    rows = []
    log("warming up (service models, connections)")
    for fn in (head(own_s3, "acme"), get_item(own_dynamo, "acme")):
        _ms(fn, 20)
    with tenant_scope("acme"):
        _ms(head(routed_s3, "acme"), 20)
        _ms(get_item(routed_dynamo, "acme"), 20)
    # Alternate own and routed runs so drift on a shared machine hits both alike.
    log(f"{requests} requests per case, hits")
    own_head: list[float] = []
    own_get: list[float] = []
    hit_head: list[float] = []
    hit_get: list[float] = []
    for _ in range(requests // 20):
        own_head += _ms(head(own_s3, "acme"), 20)
        own_get += _ms(get_item(own_dynamo, "acme"), 20)
        with tenant_scope("acme"):
            hit_head += _ms(head(routed_s3, "acme"), 20)
            hit_get += _ms(get_item(routed_dynamo, "acme"), 20)
    rows += [
        _row("S3 HeadObject, own credentials", own_head),
        _row("S3 HeadObject, tenant credentials cached (hit)", hit_head),
        _row("DynamoDB GetItem, own credentials", own_get),
        _row("DynamoDB GetItem, tenant credentials cached (hit)", hit_get),
    ]
    log("routing decision alone")
    params = {"Bucket": BUCKET, "Key": "acme/notes/a.md"}

    def decide() -> Any:
        account = routed_s3.account_for("HeadObject", params)
        return sessions.credentials(account)

    with tenant_scope("acme"):
        decided = _ms(decide, requests * 10)
    rows.append(_row("routing decision + credentials lookup alone (no request)", decided))
    log(f"{misses} misses: a new account each")
    miss_head = []
    for account in accounts[1 : misses + 1]:
        with tenant_scope(account):
            miss_head += _ms(head(routed_s3, account), 1)
    assert sessions.stats.assumed == misses + 1, sessions.stats
    rows.append(
        _row("S3 HeadObject, first request of an account (miss: AssumeRole + request)", miss_head)
    )
    sts = scoped.client("sts")
    assume = _ms(
        lambda: sts.assume_role(
            RoleArn=ROLE,
            RoleSessionName="skald-bench",
            DurationSeconds=3600,
            Tags=[{"Key": "skald_account", "Value": "acme"}],
        ),
        misses,
    )
    rows.append(_row("STS AssumeRole alone", assume))
    log(
        f"median hit overhead: S3 "
        f"{statistics.median(hit_head) - statistics.median(own_head):+.3f} ms, DynamoDB "
        f"{statistics.median(hit_get) - statistics.median(own_get):+.3f} ms"
    )
    return rows


if __name__ == "__main__":
    main()
