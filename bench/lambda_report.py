"""bench/LAMBDA_SIZING.md and the catalogue's sizes, from bench/lambda_sizing.json.

The sizing rule (`size`):

- memory = max(peak RSS x 1.3 rounded up to 64 MB, what the function's CPU share needs, what
  the largest input its limits allow needs: `input_floor`, for the semantic and fetch workers).
  Lambda gives CPU in proportion to memory (1 vCPU at 1,769 MB), so a small function runs its
  Python slower: a function's duration at M MB is estimated as its measured I/O wait plus its
  measured CPU time x 1769 / M (below 1,769 MB). The CPU floor is the least memory at which
  - the cold start (the handler module's import, CPU time) stays under COLD_START_S (3 s), for the
    functions behind API Gateway (HTTP and authorizer): a user waits for it;
  - the slowest measured invocation stays under half of its timeout cap (HTTP, authorizer) or
    under WORKER_BUDGET_S (120 s, workers).
- timeout = the slowest invocation estimated at that memory x TIMEOUT_FACTOR (3), plus the LLM
  allowance of the workers that call Bedrock's LLM (no LLM runs in the measurement), within
  the function kind's bounds; HTTP functions never above API Gateway's 29 s.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "layers/common/python/skald/catalog.py"

HEADROOM = 1.3
STEP_MB = 64
MIN_MB = 128
FULL_VCPU_MB = 1769
COLD_START_S = 3.0
WORKER_BUDGET_S = 120.0
TIMEOUT_FACTOR = 3.0
# Timeout bounds (min, max) per kind: API Gateway cuts HTTP calls at 29 s; an authorizer is a
# key lookup; workers and setup end at Lambda's 15 minutes.
BOUNDS = {"http": (10, 29), "authorizer": (5, 10), "worker": (60, 900), "setup": (60, 900)}
# Bedrock LLM time the measurement does not contain (no LLM is configured there), per worker:
# memory extraction: the extractor's 60 s call timeout x 3 attempts (first + 2 retries);
# semantic: a batch of 10 records, one summary call each at the 30 s LLM timeout.
LLM_ALLOWANCE_S = {"memory": 180, "semantic": 300}
# Kept above the rule, with the reason: paths the measurement does not time.
KEEP_TIMEOUT_S = {
    "setup": (900, "reindexing a changed index is not measured: whole budget"),
    "fetch": (300, "a download may take SKALD_FETCH_TIMEOUT_S (120 s), then up to 5,000 files "
                   "are written; the workload fetched 300 KB pages from loopback"),
    "content": (29, "wait=true calls (write, add_resource, skills, wait_processed) hold the "
                    "request until their jobs end: API Gateway's 29 s bounds them"),
    "purge": (900, "a purge works until its deadline, then hands the rest to a new job: the "
                   "whole budget takes a large account in fewer jobs; the workload's accounts "
                   "are small"),
}


@dataclass(frozen=True)
class Stats:
    function: str
    kind: str
    peak_mb: float
    invocations: int
    errors: int               # exceptions and 5xx answers
    rejected: int             # 4xx answers
    p50_ms: float
    max_ms: float
    cpu_p50_ms: float
    cpu_max_ms: float
    io_at_max_ms: float       # wall - CPU of the slowest invocation
    init_cpu_ms: float        # the slowest cold start measured (CPU)
    init_ms: float
    slowest: str              # its label


@dataclass(frozen=True)
class Sized:
    memory_mb: int
    timeout_s: int
    note: str


def _mb(kb: float) -> float:
    return kb / 1024


def stats(data: dict[str, Any], kinds: Mapping[str, str]) -> dict[str, Stats]:
    by_fn: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in data["samples"]:
        by_fn[s["function"]].append(s)
    inits: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for i in data["inits"]:
        inits[i["function"]].append(i)
    out = {}
    for name, samples in by_fn.items():
        slowest = max(samples, key=lambda s: s["ms"])
        peaks = [s["hwm_kb"] for s in samples] + [i["hwm_kb"] for i in inits[name]]
        out[name] = Stats(
            name, kinds.get(name, "?"), _mb(max(peaks)), len(samples),
            sum(1 for s in samples if _failed(s)), sum(1 for s in samples if _rejected(s)),
            statistics.median(s["ms"] for s in samples), slowest["ms"],
            statistics.median(s["cpu_ms"] for s in samples),
            max(s["cpu_ms"] for s in samples), max(0.0, slowest["ms"] - slowest["cpu_ms"]),
            max((i["cpu_ms"] for i in inits[name]), default=0.0),
            max((i["ms"] for i in inits[name]), default=0.0), slowest["label"])
    return out


def _failed(s: dict[str, Any]) -> bool:
    return bool(s["error"]) or (s.get("status") or 0) >= 500


def _rejected(s: dict[str, Any]) -> bool:
    return 400 <= (s.get("status") or 0) < 500


def estimate_s(io_ms: float, cpu_ms: float, memory_mb: int) -> float:
    """Seconds on Lambda at `memory_mb`: I/O as measured, CPU slowed by the vCPU share."""
    return (io_ms + cpu_ms * max(1.0, FULL_VCPU_MB / memory_mb)) / 1000


def _ceil_step(mb: float) -> int:
    return max(MIN_MB, math.ceil(mb / STEP_MB) * STEP_MB)


def cpu_floor(st: Stats) -> tuple[int, str]:
    lo, hi = BOUNDS.get(st.kind, (60, 900))
    floors: list[tuple[int, str]] = []
    if st.kind in ("http", "authorizer") and st.init_cpu_ms:
        floors.append((_ceil_step(FULL_VCPU_MB * st.init_cpu_ms / 1000 / COLD_START_S),
                       f"cold start {st.init_cpu_ms / 1000:.2f} s CPU within "
                       f"{COLD_START_S:.0f} s"))
    budget = hi / 2 if st.kind in ("http", "authorizer") else WORKER_BUDGET_S
    room = budget - st.io_at_max_ms / 1000
    if room > 0 and st.cpu_max_ms / 1000 > room:
        floors.append((_ceil_step(FULL_VCPU_MB * st.cpu_max_ms / 1000 / room),
                       f"slowest call within {budget:.0f} s"))
    return max(floors, default=(MIN_MB, "none"))


# The largest input each of these workers holds at once, beyond what the workloads gave them:
# the semantic worker, one document up to SKALD_MAX_WRITE_BYTES (16 MB); the fetch worker, a
# remote source's files up to SKALD_FETCH_MAX_BYTES (64 MB) as bytes and as text.
MAX_DOCUMENT_MB = 16.0
FETCH_HELD_MB = 2 * 64.0


def input_floor(st: Stats, data: dict[str, Any]) -> tuple[int, str]:
    """Memory for the largest input the limits allow, from the measured growth per MB."""
    if st.function == "fetch":
        need = st.peak_mb + FETCH_HELD_MB
        return (_ceil_step(need * HEADROOM),
                f"holds up to {FETCH_HELD_MB:.0f} MB of fetched files: {need:.0f} MB x "
                f"{HEADROOM}")
    if st.function != "semantic":
        return MIN_MB, "none"
    doc_mb = data["scale"]["large_doc_kb"] / 1024
    samples = [s for s in data["samples"] if s["function"] == "semantic"]
    doc = [s["hwm_kb"] / 1024 for s in samples if s["phase"].startswith("semantic: one")]
    small = [s["hwm_kb"] / 1024 for s in samples if s["phase"] == "content/fs"]
    if not doc or not small or doc_mb < 1.0:
        return MIN_MB, "none"  # a document under 1 MB: its growth is lost in the noise
    slope = max(0.0, (max(doc) - max(small)) / doc_mb)
    need = max(small) + slope * MAX_DOCUMENT_MB
    return (_ceil_step(need * HEADROOM),
            f"+{slope:.0f} MB per MB of document measured (small notes {max(small):.0f} MB, "
            f"{doc_mb:g} MB document {max(doc):.0f} MB), extrapolated to a "
            f"{MAX_DOCUMENT_MB:g} MB document: {need:.0f} MB x {HEADROOM}")


def size(st: Stats, runs: list[dict[str, Any]] = []) -> Sized:  # noqa: B006 - never mutated
    by_peak = _ceil_step(st.peak_mb * HEADROOM)
    floor, why = cpu_floor(st)
    by_input, input_why = max((input_floor(st, r) for r in runs), default=(MIN_MB, "none"))
    memory = max(by_peak, floor, by_input)
    lo, hi = BOUNDS.get(st.kind, (60, 900))
    worst = estimate_s(st.io_at_max_ms, st.cpu_max_ms, memory)
    allowance = LLM_ALLOWANCE_S.get(st.function, 0)
    timeout = min(hi, max(lo, math.ceil(worst * TIMEOUT_FACTOR + allowance)))
    kept = KEEP_TIMEOUT_S.get(st.function)
    note = (f"peak {st.peak_mb:.0f} MB x {HEADROOM} -> {by_peak} MB; CPU floor {floor} MB "
            f"({why}); " + (f"largest input {by_input} MB ({input_why}); "
                            if by_input > MIN_MB else "")
            + f"slowest {st.max_ms / 1000:.2f} s ({st.slowest}), ~{worst:.1f} s at {memory} MB")
    if allowance:
        note += f"; + {allowance} s Bedrock LLM allowance"
    if kept and kept[0] > timeout:
        timeout = kept[0]
        note += f"; timeout kept at {timeout} s: {kept[1]}"
    if worst > hi:
        note += f"; OVER the {hi} s cap"
    return Sized(memory, timeout, note)


def load_runs() -> list[dict[str, Any]]:
    """Every measurement kept in bench/: lambda_sizing.json (the main run) and
    lambda_sizing-<variant>.json (other corpora or vector widths). A run's "superseded"
    functions (name -> why) changed since it ran: their samples are left out, the other
    functions' still count."""
    runs = []
    for path in sorted(ROOT.glob("bench/lambda_sizing*.json")):
        run: dict[str, Any] = json.loads(path.read_text())
        run["file"] = path.name
        gone = run.get("superseded") or {}
        run["samples"] = [s for s in run["samples"] if s["function"] not in gone]
        run["inits"] = [i for i in run["inits"] if i["function"] not in gone]
        runs.append(run)
    return runs


def merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The samples and inits of all runs together: a function's peak and slowest call are
    the worst any run saw."""
    return {"samples": [s for r in runs for s in r["samples"]],
            "inits": [i for r in runs for i in r["inits"]]}


def sizes(runs: list[dict[str, Any]]) -> dict[str, Sized]:
    from skald import catalog

    kinds = {fn.name: fn.kind for fn in catalog.FUNCTIONS}
    st = stats(merged(runs), kinds)
    return {fn.name: size(st[fn.name], runs) for fn in catalog.FUNCTIONS if fn.name in st}


BEGIN, END = "    # generated: begin\n", "    # generated: end\n"


def resize(runs: list[dict[str, Any]], apply: bool = False) -> str:
    from skald import catalog

    new = sizes(runs)
    lines = ["| function | memory MB | timeout s | was | from |", "|---|---|---|---|---|"]
    for fn in catalog.FUNCTIONS:
        s = new.get(fn.name)
        if s is None:
            lines.append(f"| {fn.name} | - | - | {fn.memory_mb} / {fn.timeout_s} | "
                         "not measured |")
            continue
        lines.append(f"| {fn.name} | {s.memory_mb} | {s.timeout_s} | "
                     f"{fn.memory_mb} / {fn.timeout_s} | {s.note} |")
    if apply:
        text = CATALOG.read_text()
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        if not tail:
            raise RuntimeError(f"no generated block in {CATALOG}")
        loads = [x for r in runs for p in r["phases"] for x in (p["load_start"], p["load_end"])]
        stamp = (f"{len(runs)} run(s) {min(r['date'] for r in runs)[:16]} to "
                 f"{max(r['date'] for r in runs)[:16]}, load {min(loads, default=0)} to "
                 f"{max(loads, default=0)}")
        body = "".join(
            f"    {json.dumps(name)}: Size({s.memory_mb}, {s.timeout_s},\n"
            + "".join(f"               {json.dumps(chunk)}\n" for chunk in _wrap(
                f"{stamp}: {s.note}"))[:-1] + "),\n"
            for name, s in new.items())
        CATALOG.write_text(head + BEGIN + body + END + tail)
        lines.append(f"\nwritten to {CATALOG.relative_to(ROOT)}")
    return "\n".join(lines)


def _wrap(text: str, width: int = 78) -> list[str]:
    words, out, line = re.split(r"(?<= )", text), [], ""
    for w in words:
        if len(line) + len(w) > width and line:
            out.append(line)
            line = ""
        line += w
    return [*out, line] if line else out


def report(data: dict[str, Any], runs: list[dict[str, Any]] | None = None) -> str:
    from skald import catalog

    kinds = {fn.name: fn.kind for fn in catalog.FUNCTIONS}
    st = stats(data, kinds)
    out = [
        "# Lambda sizes from measurement", "",
        f"- date: {data['date']}", f"- machine: {data['machine']}",
        f"- command: `.venv/bin/python {data['command']}`",
        f"- load average at start: {' '.join(map(str, data['load_start']))}; at end: "
        f"{' '.join(map(str, data['load_end']))}",
        f"- scale: {data['scale']}", "",
        "Each function's real handler ran in its own process on aws-local (moto, osmem-server),"
        " behind an API Gateway stand-in with the REQUEST authorizer on every call and SQS "
        "event source mappings for the workers; embeddings from a separate MiniLM server (as "
        "Bedrock is remote), no LLM (rule-based summaries and extraction). Peak = VmHWM of the "
        "function's process; each phase started fresh processes. Durations are wall times on "
        "this shared machine (I/O to local emulators is faster than to AWS; CPU is slower "
        "under load); CPU = the process's user+system time.", "",
        "## Per function", "",
        "| function | kind | invocations | errors | 4xx | peak MB | p50 ms | max ms | "
        "CPU p50 ms | CPU max ms | cold start s (CPU s) | slowest |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for fn in catalog.FUNCTIONS:
        s = st.get(fn.name)
        if s is None:
            out.append(f"| {fn.name} | {fn.kind} | 0 | | | NOT MEASURED | | | | | | |")
            continue
        out.append(f"| {s.function} | {s.kind} | {s.invocations} | {s.errors} | {s.rejected} | "
                   f"{s.peak_mb:.0f} | {s.p50_ms:.0f} | {s.max_ms:.0f} | {s.cpu_p50_ms:.0f} | "
                   f"{s.cpu_max_ms:.0f} | {s.init_ms / 1000:.2f} ({s.init_cpu_ms / 1000:.2f}) |"
                   f" {s.slowest} |")
    out += ["", "## Sizes (the catalogue's, `bench/lambda_sizing.py --resize`)", "",
            _doc_rule(), "", "From every run below (peaks and slowest calls are the worst any "
            "run saw):", "", resize(runs or [data]), "", *_runs_table(runs or [data]), "",
            "## Per phase, function and route or job kind (the main run)", "",
            "| phase | function | route / job kind | n | errors | 4xx | p50 ms | max ms | "
            "peak MB after |", "|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for s in data["samples"]:
        groups[(s["phase"], s["function"], s["label"])].append(s)
    for (ph, fn_name, label), ss in groups.items():
        out.append(f"| {ph} | {fn_name} | {label} | {len(ss)} | "
                   f"{sum(1 for s in ss if _failed(s))} | {sum(1 for s in ss if _rejected(s))} | "
                   f"{statistics.median(s['ms'] for s in ss):.0f} | "
                   f"{max(s['ms'] for s in ss):.0f} | "
                   f"{_mb(max(s['hwm_kb'] for s in ss)):.0f} |")
    out += ["", "## Phases", "",
            "Embedding: texts the phase embedded and the seconds the local MiniLM server "
            "spent on them; the Bedrock estimate assumes Titan v2's one text per call, "
            f"{BEDROCK_EMBED_S * 1000:.0f} ms a call, {BEDROCK_PARALLEL} calls in parallel (the "
            "adapter's pool).", "",
            "| phase | s | load start | load end | embedded texts | embedding s | "
            "Bedrock est. s | outcome |", "|---|---|---|---|---|---|---|---|"]
    for p in data["phases"]:
        emb = p.get("embedding") or {}
        texts = int(emb.get("texts", 0))
        out.append(f"| {p['phase']} | {p['s']} | {p['load_start']} | {p['load_end']} | "
                   f"{texts} | {emb.get('seconds', 0):.1f} | "
                   f"{texts * BEDROCK_EMBED_S / BEDROCK_PARALLEL:.1f} | "
                   f"{str(p['outcome'])[:300]} |")
    over = [f"{r.get('file', '')}: {o}" for r in (runs or [data])
            for o in r.get("over_api_gateway_limit") or []]
    out += ["", "## What this measurement does not cover", "",
            "- Dense retrieval: osmem-server has no k-NN engine, so `find`, the default "
            "`search` and `skills/find` answer 400 (counted under 4xx). On AWS the k-NN "
            "query runs inside OpenSearch; the function adds one Bedrock embedding call, "
            "not memory.",
            "- The Bedrock LLM: summaries and memory extraction ran their rule-based paths. "
            "The LLM adds waiting time (the timeouts carry an allowance for it), not memory.",
            "- Latency to AWS services: S3, DynamoDB and SQS answered from loopback here; "
            "in a region each call costs a few ms more, which the timeouts' factor covers.",
            "- Embeddings ran in a separate process (bench/embed_server.py, one thread, on "
            "the same shared cores): the semantic worker's wall time is mostly waiting for "
            "it, and grows with the machine's load; Bedrock's embedding latency differs.",
            "- Vector width: the main run embeds 384-dim MiniLM vectors; the stack's Titan v2 "
            "gives 1,024. lambda_sizing-dim1024.json repeats the document workloads with the "
            "vectors tiled to 1,024 values, and the sizes take the worse of the two.",
            "- Issue 16's 1.7 GB peak comes from the in-process ONNX embedder of `skald "
            "serve`; no deployed function loads a model, so it does not apply to them.",
            "", "## Findings", "", *CONTINUATION_NOTE, "",
            "- Requests over API Gateway's 29 s: " + ("; ".join(over) if over else "none."),
            *(line for r in (runs or [data]) for line in _slow(r, kinds)),
            *_growth(runs or [data], kinds),
            *_folders(runs or [data]),
            *(f"- {k}: {v}" for k, v in (data.get("notes") or {}).items())]
    return "\n".join(out) + "\n"


def _runs_table(runs: list[dict[str, Any]]) -> list[str]:
    from skald import catalog

    names = [fn.name for fn in catalog.FUNCTIONS]
    out = ["## Runs (peak MB / slowest s per function)", "",
           "| run | date | load | vector dim | scale | " + " | ".join(names) + " |",
           "|---" * (5 + len(names)) + "|"]
    for r in runs:
        loads = [x for p in r["phases"] for x in (p["load_start"], p["load_end"])]
        kinds = {fn.name: fn.kind for fn in catalog.FUNCTIONS}
        st = stats(r, kinds)
        gone = r.get("superseded") or {}
        cells = [f"{st[n].peak_mb:.0f} / {st[n].max_ms / 1000:.1f}" if n in st
                 else "superseded" if n in gone else "-" for n in names]
        scale = r["scale"]
        out.append(f"| {r.get('file', '')} | {r['date'][:16]} | {min(loads, default=0)}-"
                   f"{max(loads, default=0)} | {r.get('dimension', 384)} | doc "
                   f"{scale['large_doc_kb']} KB, folder {scale['folder_files']} x "
                   f"{scale['folder_file_kb']} KB | " + " | ".join(cells) + " |")
    out += ["", *(f"- {r['file']}: {name} superseded, {why}." for r in runs
                  for name, why in (r.get("superseded") or {}).items())]
    return out


def _growth(runs: list[dict[str, Any]], kinds: Mapping[str, str]) -> list[str]:
    """How the semantic worker's peak grows with the document, per run."""
    out = []
    for r in runs:
        st = stats(r, kinds).get("semantic")
        if st is None:
            continue
        mb, why = input_floor(st, r)
        if mb > MIN_MB:
            out.append(f"- {r.get('file', 'this run')} ({r.get('dimension', 384)}-dim vectors):"
                       f" the semantic worker's peak grows {why.split(' (')[0].lstrip('+')}"
                       f" ({why.split(' (', 1)[1]}. Two sizes give the slope: the slice "
                       "of records being embedded and written (its texts, vectors and bulk "
                       "body, the same for any larger document) counts in it, so it "
                       "overstates larger documents; a job's own Python allocations grow "
                       "1.6 MB per MB of document (tests/unit/test_semantic_batches.py).")
    return out


def _folders(runs: list[dict[str, Any]]) -> list[str]:
    """A folder is one semantic job: its peak and its length, per run."""
    out = []
    for r in runs:
        for p in r["phases"]:
            if not p["phase"].startswith("semantic: folder"):
                continue
            jobs = [s for s in r["samples"] if s["phase"] == p["phase"]
                    and s["function"] == "semantic"]
            if not jobs:
                continue
            emb = p.get("embedding") or {}
            texts = int(emb.get("texts", 0))
            longest = max(s["ms"] for s in jobs) / 1000
            peak = max(s["hwm_kb"] for s in jobs) / 1024
            over = " - over Lambda's 900 s maximum" if longest > 900 else ""
            out.append(
                f"- {r.get('file', 'this run')}: {p['phase'].removeprefix('semantic: ')} was "
                f"{len(jobs)} semantic invocation(s), peak {peak:.0f} MB (memory follows the "
                f"largest document, not the folder), the longest {longest:.0f} s{over}"
                f": {texts} texts embedded in {emb.get('seconds', 0):.0f} s here, about "
                f"{texts * BEDROCK_EMBED_S / BEDROCK_PARALLEL:.0f} s on Bedrock, plus an LLM "
                "summary per file on AWS. The job's length grows with the folder; "
                f"{invocations_note(len(jobs))}")
    return out


CONTINUATION_NOTE = (
    "A semantic job short of time hands its remaining files to a new job on the semantic",
    "queue (same task; the job that indexes the last file refreshes the directories and",
    "completes the task with the totals), so a folder of any size is indexed over as many",
    "invocations as it needs, each ending before the 900 s timeout. In these runs each folder",
    "fitted in one invocation.")


def invocations_note(invocations: int) -> str:
    """A semantic job short of time continues in a new job (skald/jobs/semantic.py), so one
    folder may take several invocations, each ending before the timeout."""
    if invocations > 1:
        return f"it continued across {invocations} invocations, each under the timeout."
    return "one invocation did it all (the folder fitted in one)."


SLOW_HTTP_S = 10.0
BEDROCK_EMBED_S = 0.06      # an assumption, not measured: one InvokeModel of Titan v2
BEDROCK_PARALLEL = 4        # the Bedrock embedder's thread pool (max_workers)
SHIPPED_TIMEOUT_S = {"semantic": 300, "memory": 600, "autocommit": 120, "fetch": 300}


def _slow(data: dict[str, Any], kinds: Mapping[str, str]) -> list[str]:
    """HTTP calls past a third of API Gateway's limit, and jobs past the timeouts the stack
    shipped with, each with its CPU time (the rest is waiting on I/O)."""
    out = []
    for s in sorted(data["samples"], key=lambda s: -s["ms"]):
        http = kinds.get(s["function"]) in ("http", "authorizer")
        limit = SLOW_HTTP_S if http else SHIPPED_TIMEOUT_S.get(s["function"])
        if limit is not None and s["ms"] / 1000 > limit:
            what = "" if http else ", the timeout it shipped with"
            out.append(f"- {data.get('file', 'this run')}: {s['function']} `{s['label']}` in "
                       f"phase \"{s['phase']}\": "
                       f"{s['ms'] / 1000:.1f} s wall, {s['cpu_ms'] / 1000:.1f} s CPU "
                       f"(over {limit:g} s{what}).")
    return out


def _doc_rule() -> str:
    doc = __doc__ or ""
    return doc.split("The sizing rule (`size`):", 1)[-1].strip()
