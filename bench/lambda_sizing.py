"""Peak memory and durations of every Lambda function, measured on aws-local.

Each function runs its real handler module in its own process (bench/lambda_host.py), against
moto (S3, DynamoDB, SQS, Scheduler, Secrets Manager) and osmem-server (OpenSearch), behind a
local API Gateway stand-in with the REQUEST authorizer and real SQS event source mappings
(bench/lambda_gateway.py). The models are remote, as Bedrock is in the stack: embeddings come
from bench/embed_server.py (the same MiniLM, in its own process, so its memory is not the
function's), and no LLM is configured (summaries and memory extraction take their rule-based
paths; a Bedrock LLM adds its latency to the workers' durations, not to their memory).
Workloads (bench/lambda_workloads.py) run phase by phase, each phase on fresh processes.

The raw run (every invocation) goes to bench/out/ (git-ignored); written there as
lambda_sizing*.json, its summary is kept in bench/lambda_sizing-summary.json under that name,
replacing the former run of that name.

    .venv/bin/python bench/lambda_sizing.py [--small]     # measure; writes LAMBDA_SIZING.md
    .venv/bin/python bench/lambda_sizing.py --resize [--apply]   # sizes from every run kept
    .venv/bin/python bench/lambda_sizing.py --dimension 1024 \
        --out bench/out/lambda_sizing-dim1024.json              # a variant, kept beside it
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers/common/python"))
sys.path.insert(0, str(ROOT))

from bench.lambda_report import MAIN_RUN, keep, load_runs, report, resize, summarise  # noqa: E402
from skald import catalog  # noqa: E402

BENCH = ROOT / "bench"
JSON_OUT = BENCH / "out" / MAIN_RUN


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_embedder(log: Any, dimension: int) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    tile = ["--tile-to", str(dimension)] if dimension != 384 else []
    proc = subprocess.Popen(
        [
            sys.executable,
            str(BENCH / "embed_server.py"),
            "--port",
            str(port),
            "--threads",
            "1",
            *tile,
        ],
        stdout=log,
        stderr=log,
        env={**os.environ, "PYTHONPATH": str(ROOT / "layers/common/python")},
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return proc, url + "/v1"
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the embedding server did not start")


def environment(settings: Any, extra: dict[str, str]) -> dict[str, str]:
    """The settings as the SKALD_* environment a deployed function gets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKALD_")}
    for name, value in settings.model_dump().items():
        if value is None or name in ("queue_urls", "dlq_urls", "queue_arns"):
            continue
        env[f"SKALD_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    env.update(settings.queue_variables())
    env.update(extra)
    return env


def _scale(small: bool, doc_kb: int | None, folder_kb: int | None) -> Any:
    """The workloads' sizes: the small or the full set, with the document and folder file
    sizes given on the command line."""
    from bench.lambda_workloads import SMALL, Scale

    scale = SMALL if small else Scale()
    if doc_kb or folder_kb:
        scale = replace(
            scale,
            large_doc_kb=doc_kb or scale.large_doc_kb,
            folder_file_kb=folder_kb or scale.folder_file_kb,
        )
    return scale


def measure(
    small: bool, doc_kb: int | None, folder_kb: int | None, dimension: int = 384
) -> dict[str, Any]:
    import boto3
    from openviking_sdk import SyncHTTPClient

    from bench import lambda_workloads as w
    from bench.lambda_gateway import Gateway, Hosts, Pollers, Record
    from bench.lambda_workloads import WebSite
    from bench.lambda_workloads import admin as w_admin
    from skald.adapters.aws.local_stack import SCHEDULE_GROUP, LocalAwsStack
    from skald.config import Settings

    scale = _scale(small, doc_kb, folder_kb)
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="skald-sizing-"))
    log = (work / "sizing.log").open("w")
    print(f"logs in {work / 'sizing.log'}", flush=True)
    embedder, embed_url = start_embedder(log, dimension)
    stack = LocalAwsStack(
        Settings(backend="aws-local", llm_provider="none", data_dir=work / "data")
    )
    settings = stack.start()
    endpoint = settings.aws_endpoint_url

    def client(service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=endpoint,  # type: ignore[call-overload]
            region_name="us-east-1",
        )

    root_key = "sk-root-" + os.urandom(12).hex()
    secret = client("secretsmanager").create_secret(Name="skald-root-key", SecretString=root_key)[
        "ARN"
    ]
    ddb = client("dynamodb")
    ddb.create_table(
        TableName="skald-idempotency",
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    sqs = client("sqs")
    urls = {q.name: settings.queue_urls[q.name] for q in catalog.QUEUES}
    autocommit_arn = sqs.get_queue_attributes(
        QueueUrl=urls["autocommit"], AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    settings = settings.model_copy(
        update={
            "embedding_provider": "openai",
            "embedding_base_url": embed_url,
            "embedding_model": "minilm",
            "embedding_dimension": dimension,
            "llm_provider": "none",
            "root_api_key_secret_arn": secret,
            "root_api_key": None,
            "idempotency_table": "skald-idempotency",
            "scheduler_group": SCHEDULE_GROUP,
            "scheduler_role_arn": "arn:aws:iam::000000000000:role/skald-scheduler",
            "queue_arns": {catalog.QUEUE_AUTOCOMMIT: autocommit_arn},
        }
    )
    env = environment(
        settings,
        {
            "PYTHONPATH": str(ROOT / "layers/common/python"),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_NAMESPACE": "Skald",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
            "SIZING_ALLOW_LOOPBACK": "1",
        },
    )

    record = Record()
    hosts = Hosts(lambda name: {**env, "POWERTOOLS_SERVICE_NAME": f"skald-{name}"}, log, record)
    gateway = Gateway(hosts)
    pollers = Pollers(hosts, sqs, urls)
    notes: dict[str, Any] = {}
    phases: list[dict[str, Any]] = []

    def embed_stats() -> dict[str, Any]:
        with urllib.request.urlopen(embed_url.removesuffix("/v1") + "/stats", timeout=10) as r:
            stats: dict[str, Any] = json.loads(r.read())
            return stats

    def drain(timeout_s: float = 1800) -> None:
        deadline = time.monotonic() + timeout_s
        quiet = 0
        while time.monotonic() < deadline:
            quiet = quiet + 1 if pollers.idle(urls) else 0
            if quiet >= 3:
                return
            time.sleep(1.0)
        notes.setdefault("drain timeouts", []).append(hosts.phase)

    def phase(name: str, body: Any) -> Any:
        hosts.recycle(name)
        print(f"[{datetime.now(UTC):%H:%M:%S}] {name} (load {os.getloadavg()[0]:.2f})", flush=True)
        started = time.monotonic()
        load = os.getloadavg()[0]
        before = embed_stats()
        outcome = body()
        drain()
        after = embed_stats()
        phases.append(
            {
                "phase": name,
                "s": round(time.monotonic() - started, 1),
                "load_start": round(load, 2),
                "load_end": round(os.getloadavg()[0], 2),
                "outcome": outcome,
                "embedding": {
                    k: round(after[k] - before.get(k, 0), 2)
                    for k in after
                    if isinstance(after[k], (int, float))
                },
            }
        )
        return outcome

    try:
        phase("setup", lambda: hosts.get("setup").invoke({}, "setup")["error"])
        root = SyncHTTPClient(url=gateway.url, api_key=root_key, timeout=600)
        root.initialize()
        made: dict[str, str] = {}
        phase("admin", lambda: made.setdefault("key", w_admin(root, "sizing")) and "created")
        key = made["key"]
        user = SyncHTTPClient(url=gateway.url, api_key=key, timeout=600)
        user.initialize()
        notes_md = [w.markdown(4, seed=i) for i in range(12)]
        phase("content/fs", lambda: w.content_fs(user, notes_md))
        big = work / "corpus" / "conversation-log.md"
        big.parent.mkdir(parents=True)
        big.write_text(w.markdown(scale.large_doc_kb))
        phase(f"semantic: one {scale.large_doc_kb} KB document", lambda: w.add_path(user, big))
        folder = work / "corpus" / "logs"
        folder.mkdir()
        for i in range(scale.folder_files):
            (folder / f"log{i:03d}.md").write_text(w.markdown(scale.folder_file_kb, seed=i))
        phase(
            f"semantic: folder of {scale.folder_files} x {scale.folder_file_kb} KB",
            lambda: w.add_path(user, folder),
        )
        queries = [t.split(": ", 1)[1][:60] for _, _, t in (next(w.turns()) for _ in range(1))] + [
            "oolong tea",
            "adoption agency",
            "pottery class",
            "camping trip with kids",
            "support group",
            "painting a sunrise",
            "charity race",
            "career in counseling",
        ]
        queries = (queries * 4)[: scale.queries]
        phase("search/find", lambda: w.search(user, queries))
        phase("sessions + memory extraction", lambda: w.sessions(user, scale.sessions))

        def autocommit() -> int:
            made = w.sessions(user, max(1, scale.sessions // 2), idle=True)
            time.sleep(2.0)  # past the idle deadline, as the Scheduler's timer would fire
            for sid, _ in made:  # the Scheduler's message: no attributes, default kind
                sqs.send_message(
                    QueueUrl=urls["autocommit"],
                    MessageBody=json.dumps({"account": "sizing", "user": "ops", "session_id": sid}),
                )
            return len(made)

        phase("autocommit + memory extraction", autocommit)
        phase("mcp", lambda: w.mcp(gateway.url, key, queries[: max(3, scale.queries // 4)]))
        site = WebSite(work / "site", scale.web_pages, scale.web_page_kb)
        phase(
            f"fetch: {scale.web_pages} web pages of {scale.web_page_kb} KB",
            lambda: w.fetch(user, site),
        )
        site.close()
        # Removing a user, then the whole account (every file, record and session above):
        # what the purge worker holds at most.
        phase("purge: a user removed", lambda: root.admin_remove_user("sizing", "bob")["status"])
        phase("purge: the account removed", lambda: root.admin_delete_account("sizing")["status"])
        hosts.recycle("end")
    finally:
        pollers.stop()
        gateway.close()
        stack.stop()
        embedder.terminate()
        log.close()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}",
        "command": "bench/lambda_sizing.py"
        + (" --small" if small else "")
        + (f" --doc-kb {doc_kb}" if doc_kb else "")
        + (f" --folder-kb {folder_kb}" if folder_kb else "")
        + (f" --dimension {dimension}" if dimension != 384 else ""),
        "dimension": dimension,
        "scale": vars(scale),
        "load_start": [round(x, 2) for x in load_start],
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "phases": phases,
        "over_api_gateway_limit": gateway.over_limit,
        "notes": notes,
        **record.as_json(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a quick run on small corpora")
    parser.add_argument("--doc-kb", type=int, help="size of the large document")
    parser.add_argument("--folder-kb", type=int, help="size of each file of the folder")
    parser.add_argument(
        "--dimension",
        type=int,
        default=384,
        help="vector width (MiniLM's 384 values tiled): 1024 = Titan v2's",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=JSON_OUT,
        help="where the raw JSON goes; bench/out/lambda_sizing*.json keeps "
        "the run's summary among the runs the sizes come from",
    )
    parser.add_argument("--resize", action="store_true", help="print the sizes the kept runs imply")
    parser.add_argument(
        "--apply", action="store_true", help="with --resize: write them into the catalogue"
    )
    parser.add_argument(
        "--report", action="store_true", help="rewrite LAMBDA_SIZING.md from the kept runs"
    )
    args = parser.parse_args()
    if args.report:
        runs = load_runs()
        main_run = next(r for r in runs if r["run"] == MAIN_RUN)
        (BENCH / "LAMBDA_SIZING.md").write_text(report(main_run, runs))
        return 0
    if args.resize:
        print(resize(load_runs(), apply=args.apply))
        return 0
    data = measure(args.small, args.doc_kb, args.folder_kb, args.dimension)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    run = summarise(data, args.out.name)
    kept = (
        args.out.resolve().parent == JSON_OUT.parent
        and args.out.suffix == ".json"
        and args.out.name.startswith("lambda_sizing")
    )
    runs = keep(run) if kept else load_runs()
    if kept and args.out.name == MAIN_RUN:
        (BENCH / "LAMBDA_SIZING.md").write_text(report(run, runs))
    print(report(run, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
