"""What plans and quotas cost a request.

1. Through HTTP on `skald serve` (root key, the local backend): two accounts of one server
   hold the same small corpus, one on a plan with every limit set (the `business` tier, its
   request rate raised so that nothing is refused) and the request rate limit on, the other
   on the default `unlimited` plan. finds (and writes of new files, which check the index
   records quota) alternate between them one by one: p50 / p95 of each, side by side.
2. In-process on aws-local (moto DynamoDB, osmem-server OpenSearch): the state, session and
   index stores wrapped with a counter; a sequence of requests (ls, a session created, a file
   written) through the app as one account with every limit set and one unlimited: the store
   calls per request, and those the plan and the quota counts made (get_account,
   count_sessions, SearchIndex.count), cold and with warm caches.
3. The checks alone, in-process, warm: microseconds per call.

    .venv/bin/python bench/experiments/quota_cost.py [--files 300 --rounds 10] [--write]

`--write` puts the results in bench/RESULTS.md (section `quota-cost`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import (  # noqa: E402
    OUT_DIR,
    REPO_ROOT,
    ServerProcess,
    alternate,
    free_port,
    load_average,
    log,
    machine_info,
    percentiles,
    source_state,
    write_json,
)
from bench.sections import write_section  # noqa: E402

ROOT_KEY = "bench-root-" + uuid.uuid4().hex
PRODUCT = REPO_ROOT / "layers" / "common" / "python"
LIMITED_PLAN = {"plan": "business", "limits": {"rate_per_s": 1_000_000, "burst": 1_000_000}}
TOPICS = ["glaciers", "volcanoes", "coral reefs", "river deltas", "deserts", "tundra"]
QUOTA_CALLS = {"get_account", "count_sessions", "count"}


def _docs(n: int) -> list[dict[str, str]]:
    return [
        {
            "uri": f"viking://resources/corpus/doc-{i:04d}.md",
            "content": f"# Note {i}\n\nThis note is about {TOPICS[i % len(TOPICS)]} "
            f"and field trip {i} of the survey team.\n",
        }
        for i in range(n)
    ]


# ------------------------------------------------------------------------ 1. HTTP latency


def http_part(files: int, rounds: int, writes: int) -> dict[str, Any]:
    from openviking_sdk import SyncHTTPClient

    data = Path(tempfile.mkdtemp(prefix="quota-cost-", dir=OUT_DIR))
    port = free_port()
    srv = ServerProcess(
        "skald-quota-cost",
        [
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
        ],
        port,
        OUT_DIR / "quota-cost.log",
        env={"PYTHONPATH": f"{PRODUCT}{os.pathsep}{REPO_ROOT}", "SKALD_ROOT_API_KEY": ROOT_KEY},
    )
    srv.start()
    try:
        root = SyncHTTPClient(url=srv.url, api_key=ROOT_KEY, timeout=600)
        root.initialize()
        clients: dict[str, SyncHTTPClient] = {}
        for label in ("quotas on", "unlimited"):
            account = "bench-" + uuid.uuid4().hex[:8]
            key = root.admin_create_account(account, "admin")["user_key"]
            if label == "quotas on":
                resp = httpx.patch(
                    f"{srv.url}/api/v1/admin/accounts/{account}/settings",
                    json=LIMITED_PLAN,
                    headers={"X-API-Key": ROOT_KEY},
                )
                resp.raise_for_status()
            c = SyncHTTPClient(url=srv.url, api_key=key, timeout=600)
            c.initialize()
            c.batch_write("viking://resources", _docs(files), wait=True)
            clients[label] = c
        queries = [f"field notes about {t}" for t in TOPICS] * 5
        log(f"finds: {len(queries)} queries x {rounds} rounds, alternating")
        alternate(clients, queries[:6], lambda c, q: c.find(q, limit=10), 1)  # warm up
        finds, loads = alternate(clients, queries, lambda c, q: c.find(q, limit=10), rounds)
        counter = iter(range(10**9))
        wrote, _ = alternate(
            clients,
            [str(i) for i in range(writes)],
            lambda c, i: c.write(f"viking://resources/w/{next(counter)}-{i}.md", "# w\n"),
            1,
        )
        root.close()
        for c in clients.values():
            c.close()
        return {
            "files": files,
            "finds": {k: percentiles(v) for k, v in finds.items()},
            "writes": {k: percentiles(v) for k, v in wrote.items()},
            "n_finds": len(queries) * rounds,
            "n_writes": writes,
            "loads": loads,
        }
    finally:
        srv.stop()


# ------------------------------------------------------------------------ 2. store calls


class Counting:
    """An adapter whose every method call is counted by name."""

    def __init__(self, inner: Any, counts: Counter[str], port: str) -> None:
        self._inner, self._counts, self._port = inner, counts, port

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value) or name.startswith("_"):
            return value
        counts, port = self._counts, self._port

        def call(*args: Any, **kwargs: Any) -> Any:
            counts[f"{port}.{name}"] += 1
            return value(*args, **kwargs)

        return call


def aws_part(requests: int) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from skald import catalog
    from skald.adapters.aws.factory import AwsAdapterFactory
    from skald.adapters.aws.local_stack import LocalAwsStack
    from skald.api.app import create_app
    from skald.compose.composition import Composition
    from skald.compose.entrypoints import run_setup
    from skald.config import Settings

    data = Path(tempfile.mkdtemp(prefix="quota-aws-", dir=OUT_DIR))
    stack = LocalAwsStack(
        Settings(backend="aws-local", data_dir=data, root_api_key=ROOT_KEY, app_rate_limits=True)
    )
    settings = stack.start()
    try:
        factory = AwsAdapterFactory(settings)
        run_setup(settings, factory)
        counts: Counter[str] = Counter()
        for port in (catalog.STATE, catalog.SESSIONS, catalog.INDEX):
            factory._built[port] = Counting(factory.build(port), counts, port)
        app = create_app(Composition(settings, factory, name="serve"))
        out: dict[str, Any] = {
            "auth_cache_ttl_s": settings.auth_cache_ttl_s,
            "quota_count_ttl_s": settings.quota_count_ttl_s,
        }
        with TestClient(app) as http:
            root = {"X-API-Key": ROOT_KEY}
            for label in ("quotas on", "unlimited"):
                account = "bench-" + uuid.uuid4().hex[:8]
                made = http.post(
                    "/api/v1/admin/accounts",
                    json={"account_id": account, "admin_user_id": "admin"},
                    headers=root,
                )
                key = made.json()["result"]["user_key"]
                if label == "quotas on":
                    http.patch(
                        f"/api/v1/admin/accounts/{account}/settings",
                        json=LIMITED_PLAN,
                        headers=root,
                    ).raise_for_status()
                me = {"X-API-Key": key}
                http.get("/api/v1/fs/ls", params={"uri": "viking://"}, headers=me)  # presets

                def one(i: int, me: dict[str, str] = me) -> None:
                    kind = i % 3
                    if kind == 0:
                        r = http.get("/api/v1/fs/ls", params={"uri": "viking://"}, headers=me)
                    elif kind == 1:
                        r = http.post("/api/v1/sessions", json={}, headers=me)
                    else:
                        r = http.post(
                            "/api/v1/content/write",
                            json={"uri": f"viking://resources/w/{i}.md", "content": "# w\n"},
                            headers=me,
                        )
                    assert r.status_code == 200, r.text

                per: list[tuple[int, int]] = []
                started = time.monotonic()
                for i in range(requests):
                    before = counts.copy()
                    one(i)
                    diff = counts - before
                    quota = sum(n for k, n in diff.items() if k.split(".", 1)[1] in QUOTA_CALLS)
                    per.append((sum(diff.values()), quota))
                elapsed = time.monotonic() - started
                warm = per[3:]  # the first request of each kind reads its caches cold
                out[label] = {
                    "cold_quota_calls": [q for _, q in per[:3]],
                    "warm_quota_calls_max": max(q for _, q in warm),
                    "warm_quota_calls_mean": sum(q for _, q in warm) / len(warm),
                    "store_calls_mean": sum(t for t, _ in per) / len(per),
                    "requests": requests,
                    "seconds": elapsed,
                }
        return out
    finally:
        factory.close()
        stack.stop()


# ------------------------------------------------------------------------ 3. in-process


def inproc_part() -> dict[str, float]:
    """The checks alone with warm caches, in microseconds per call (best of 5 x 20,000)."""
    import timeit
    from functools import partial

    from skald.domain.access.identity import Identity
    from skald.ports.accounts import Account
    from skald.services.plans import PlanBook, Quotas, RateLimits

    class Accounts:
        def __init__(self, settings: dict[str, Any]) -> None:
            self.settings = settings

        def get_account(self, account_id: str) -> Account:
            return Account(account_id, 0.0, self.settings)

    class Counts:
        def count_sessions(self, account_id: str) -> int:
            return 10

        def count(self, account: str, flt: Any = None) -> int:
            return 10

    out: dict[str, float] = {}
    who = Identity("acme", "alice", "user")
    for label, settings in (("quotas on", LIMITED_PLAN), ("unlimited", {})):
        book = PlanBook(Accounts(settings), ttl_s=3600)  # type: ignore[arg-type]
        limits = RateLimits(book)
        quotas = Quotas(book, sessions=Counts(), index=Counts(), ttl_s=3600)  # type: ignore[arg-type]
        limits.admit(who)
        quotas.check_sessions("acme")
        quotas.check_index_records("acme", 1)
        runs = 20_000
        for name, call in (
            ("rate", partial(limits.admit, who)),
            ("sessions", partial(quotas.check_sessions, "acme")),
            ("index_records", partial(quotas.check_index_records, "acme", 1)),
        ):
            best = min(timeit.repeat(call, number=runs, repeat=5)) / runs
            out[f"{label}: {name}"] = best * 1e6
    return out


# ------------------------------------------------------------------------ report


def report(
    http: dict[str, Any], aws: dict[str, Any], inproc: dict[str, float], meta: dict[str, Any]
) -> str:
    f, w = http["finds"], http["writes"]
    on, off = f["quotas on"], f["unlimited"]
    lines = [
        "## Plans and quotas: their cost per request (bench/experiments/quota_cost.py)",
        "",
        f"{meta['date']}, commit `{meta['commit']}`, {meta['cpu']}, load {meta['load']}.",
        "",
        f"Through HTTP on `skald serve` (openviking-sdk, sequential): two accounts of one server "
        f"with the same {http['files']} files, one on a plan with every limit set and the request "
        "rate limit on (the `business` tier, its rate raised so nothing is refused), one on the "
        f"default `unlimited` plan, requests alternating one by one ({http['n_finds']} finds, "
        f"{http['n_writes']} writes of a new file each).",
        "",
        "| request | quotas on: p50 / p95 | unlimited: p50 / p95 | p50 added |",
        "|---|---|---|---|",
        f"| find | {on['p50']:.2f} / {on['p95']:.2f} ms | {off['p50']:.2f} / {off['p95']:.2f} ms "
        f"| {on['p50'] - off['p50']:+.2f} ms |",
        f"| write (index records checked) | {w['quotas on']['p50']:.2f} / "
        f"{w['quotas on']['p95']:.2f} ms | {w['unlimited']['p50']:.2f} / "
        f"{w['unlimited']['p95']:.2f} ms | "
        f"{w['quotas on']['p50'] - w['unlimited']['p50']:+.2f} ms |",
        "",
        "Store calls on aws-local (moto DynamoDB, osmem-server OpenSearch; the state, session and "
        "index adapters wrapped with a counter), in-process through the app, "
        f"{aws['quotas on']['requests']} requests per account cycling ls / create a session / "
        "write a file; quota calls are the plan's read (`get_account`) and the counts "
        f"(`count_sessions`, `SearchIndex.count`); caches: plan {aws['auth_cache_ttl_s']:g} s, "
        f"counts {aws['quota_count_ttl_s']:g} s.",
        "",
        "| account | quota calls of the first ls / session / write (plan read before) | quota "
        "calls per request after (mean / max) | store calls per request (mean, all) |",
        "|---|---|---|---|",
    ]
    for label in ("quotas on", "unlimited"):
        a = aws[label]
        lines.append(
            f"| {label} | {' / '.join(map(str, a['cold_quota_calls']))} | "
            f"{a['warm_quota_calls_mean']:.3f} / {a['warm_quota_calls_max']} | "
            f"{a['store_calls_mean']:.2f} |"
        )
    lines += [
        "",
        "The checks alone, in-process with warm caches (best of 5 x 20,000 calls):",
        "",
        "| check | every limit set | unlimited |",
        "|---|---|---|",
    ]
    for name in ("rate", "sessions", "index_records"):
        lines.append(
            f"| {name} | {inproc['quotas on: ' + name]:.2f} µs | "
            f"{inproc['unlimited: ' + name]:.2f} µs |"
        )
    worst = max(aws[label]["warm_quota_calls_max"] for label in ("quotas on", "unlimited"))
    alone = inproc["quotas on: rate"] + inproc["quotas on: index_records"]
    lines += [
        "",
        "Target: a quota check adds at most 1 ms to a find's p50, and at most one store call "
        "per request on AWS with warm caches (a cache is read again once per bound, by the "
        "request that finds it stale).",
        f"Result: a find's p50 moved by {on['p50'] - off['p50']:+.2f} ms, within this "
        f"machine's noise (the rate check and a quota check alone: {alone:.1f} µs); after the "
        f"first request, at most {worst} store call per request came from plans and quotas.",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=300)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--writes", type=int, default=100)
    p.add_argument("--requests", type=int, default=150)
    p.add_argument("--write", action="store_true", help="write bench/RESULTS.md's section")
    p.add_argument("--report-only", action="store_true", help="the report of the last run")
    args = p.parse_args()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        import json

        last = json.loads((OUT_DIR / "quota-cost.json").read_text())
        text = report(last["http"], last["aws"], last["inproc"], last["meta"])
        print(text)
        if args.write:
            write_section(REPO_ROOT / "bench" / "RESULTS.md", "quota-cost", text)
        return
    http = http_part(args.files, args.rounds, args.writes)
    log(f"http: {http['finds']}")
    aws = aws_part(args.requests)
    log(f"aws-local: {aws}")
    inproc = inproc_part()
    meta = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": source_state()["commit"],
        "cpu": f"{machine_info()['cpu_model']} ({os.cpu_count()} logical cores)",
        "load": " / ".join(f"{x:.1f}" for x in load_average()),
    }
    write_json(
        OUT_DIR / "quota-cost.json", {"http": http, "aws": aws, "inproc": inproc, "meta": meta}
    )
    text = report(http, aws, inproc, meta)
    print(text)
    if args.write:
        write_section(REPO_ROOT / "bench" / "RESULTS.md", "quota-cost", text)


if __name__ == "__main__":
    main()
