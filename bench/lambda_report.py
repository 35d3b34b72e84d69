"""bench/LAMBDA_SIZING.md and the catalogue's sizes, from the kept runs' summaries
(bench/lambda_sizing-summary.json; the raw runs go to bench/out/, which git ignores).

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
CATALOG = ROOT / "layers/common/python/skald/sizes.py"
# The kept runs, one summary each (what the rule, the report and bench/cost_model.py read);
# the raw runs (every invocation) stay in bench/out/.
SUMMARY = ROOT / "bench/lambda_sizing-summary.json"
MAIN_RUN = "lambda_sizing.json"  # the run LAMBDA_SIZING.md and the cost model describe

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
    "fetch": (
        300,
        "a download may take SKALD_FETCH_TIMEOUT_S (120 s), then up to 5,000 files "
        "are written; the workload fetched 300 KB pages from loopback",
    ),
    "content": (
        29,
        "wait=true calls (write, add_resource, skills, wait_processed) hold the "
        "request until their jobs end: API Gateway's 29 s bounds them",
    ),
    "purge": (
        900,
        "a purge works until its deadline, then hands the rest to a new job: the "
        "whole budget takes a large account in fewer jobs; the workload's accounts "
        "are small",
    ),
}


@dataclass(frozen=True)
class Stats:
    """A function's worst over one run or several: what the sizing rule reads."""

    function: str
    kind: str
    peak_mb: float
    invocations: int
    errors: int  # exceptions and 5xx answers
    rejected: int  # 4xx answers
    max_ms: float
    cpu_max_ms: float
    io_at_max_ms: float  # wall - CPU of the slowest invocation
    init_cpu_ms: float  # the slowest cold start measured (CPU)
    init_ms: float
    slowest: str  # its label


@dataclass(frozen=True)
class Sized:
    memory_mb: int
    timeout_s: int
    note: str


def _mb(kb: float) -> float:
    return kb / 1024


def stats(rows: list[dict[str, Any]], kinds: Mapping[str, str]) -> dict[str, Stats]:
    """Each invoked function's worst over function rows (`summarise`) of one run or several:
    its highest peak (invocations and cold starts), its slowest call, its longest CPU time and
    its slowest cold start."""
    by_fn: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_fn[row["function"]].append(row)
    out = {}
    for name, rs in by_fn.items():
        called = [r for r in rs if r["invocations"]]
        if not called:
            continue
        slowest = max(called, key=lambda r: r["max_ms"])
        out[name] = Stats(
            name,
            kinds.get(name, "?"),
            _mb(max(r["peak_kb"] for r in rs)),
            sum(r["invocations"] for r in rs),
            sum(r["errors"] for r in rs),
            sum(r["rejected"] for r in rs),
            slowest["max_ms"],
            max(r["cpu_max_ms"] for r in called),
            max(0.0, slowest["max_ms"] - slowest["cpu_at_max_ms"]),
            max(r["init_cpu_ms"] for r in rs),
            max(r["init_ms"] for r in rs),
            slowest["slowest"],
        )
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
        floors.append(
            (
                _ceil_step(FULL_VCPU_MB * st.init_cpu_ms / 1000 / COLD_START_S),
                f"cold start {st.init_cpu_ms / 1000:.2f} s CPU within {COLD_START_S:.0f} s",
            )
        )
    budget = hi / 2 if st.kind in ("http", "authorizer") else WORKER_BUDGET_S
    room = budget - st.io_at_max_ms / 1000
    if room > 0 and st.cpu_max_ms / 1000 > room:
        floors.append(
            (
                _ceil_step(FULL_VCPU_MB * st.cpu_max_ms / 1000 / room),
                f"slowest call within {budget:.0f} s",
            )
        )
    return max(floors, default=(MIN_MB, "none"))


# The largest input each of these workers holds at once, beyond what the workloads gave them:
# the semantic worker, one document up to SKALD_MAX_WRITE_BYTES (16 MB); the fetch worker, a
# remote source's files up to SKALD_FETCH_MAX_BYTES (64 MB) as bytes and as text.
MAX_DOCUMENT_MB = 16.0
FETCH_HELD_MB = 2 * 64.0


def input_floor(st: Stats, run: dict[str, Any]) -> tuple[int, str]:
    """Memory for the largest input the limits allow, from the measured growth per MB."""
    if st.function == "fetch":
        need = st.peak_mb + FETCH_HELD_MB
        return (
            _ceil_step(need * HEADROOM),
            f"holds up to {FETCH_HELD_MB:.0f} MB of fetched files: {need:.0f} MB x {HEADROOM}",
        )
    if st.function != "semantic":
        return MIN_MB, "none"
    doc_mb = run["scale"]["large_doc_kb"] / 1024
    peaks = run.get("semantic_peak_kb") or {}
    if peaks.get("document") is None or peaks.get("notes") is None or doc_mb < 1.0:
        return MIN_MB, "none"  # a document under 1 MB: its growth is lost in the noise
    doc, small = _mb(peaks["document"]), _mb(peaks["notes"])
    slope = max(0.0, (doc - small) / doc_mb)
    need = small + slope * MAX_DOCUMENT_MB
    return (
        _ceil_step(need * HEADROOM),
        f"+{slope:.0f} MB per MB of document measured (small notes {small:.0f} MB, "
        f"{doc_mb:g} MB document {doc:.0f} MB), extrapolated to a "
        f"{MAX_DOCUMENT_MB:g} MB document: {need:.0f} MB x {HEADROOM}",
    )


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
    note = (
        f"peak {st.peak_mb:.0f} MB x {HEADROOM} -> {by_peak} MB; CPU floor {floor} MB "
        f"({why}); "
        + (f"largest input {by_input} MB ({input_why}); " if by_input > MIN_MB else "")
        + f"slowest {st.max_ms / 1000:.2f} s ({st.slowest}), ~{worst:.1f} s at {memory} MB"
    )
    if allowance:
        note += f"; + {allowance} s Bedrock LLM allowance"
    if kept and kept[0] > timeout:
        timeout = kept[0]
        note += f"; timeout kept at {timeout} s: {kept[1]}"
    if worst > hi:
        note += f"; OVER the {hi} s cap"
    return Sized(memory, timeout, note)


def load_runs() -> list[dict[str, Any]]:
    """Every kept run's summary: the main run (lambda_sizing.json) and its variants
    (lambda_sizing-<variant>.json: other corpora or vector widths). A run's "superseded"
    functions (name -> why) changed since it ran: the summary holds no row of theirs, the other
    functions' still count."""
    return [_current(run) for run in json.loads(SUMMARY.read_text())["runs"]]


def _current(run: dict[str, Any]) -> dict[str, Any]:
    """The run without what it measured of the functions it marks superseded (a mark added
    by hand to a kept run)."""
    gone = run.get("superseded") or {}
    if not gone:
        return run
    out = {
        **run,
        "functions": [r for r in run["functions"] if r["function"] not in gone],
        "slow": [s for s in run["slow"] if s["function"] not in gone],
    }
    if "groups" in run:
        out["groups"] = [g for g in run["groups"] if g["function"] not in gone]
    if "semantic" in gone:
        out.update(folders=[], semantic_peak_kb={"notes": None, "document": None})
    return out


def keep(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Puts a run's summary among the kept ones (replacing the run of the same name) and
    returns them all."""
    runs = sorted(
        [r for r in load_runs() if r["run"] != run["run"]] + [run], key=lambda r: str(r["run"])
    )
    write_runs(runs)
    return runs


def write_runs(runs: list[dict[str, Any]]) -> None:
    """The summaries as JSON with one row a line, so a new run reads as a short diff. Only
    the main run keeps its phases and per-route groups (its report and the cost model)."""
    lists = ("functions", "folders", "slow", "phases", "groups")
    parts = []
    for run in runs:
        fields = []
        for key, value in run.items():
            if key in ("phases", "groups") and run["run"] != MAIN_RUN:
                continue
            if key in lists and value:
                rows = ",\n".join(f"    {json.dumps(row)}" for row in value)
                fields.append(f"  {json.dumps(key)}: [\n{rows}]")
            else:
                fields.append(f"  {json.dumps(key)}: {json.dumps(value)}")
        parts.append("{\n" + ",\n".join(fields) + "}")
    SUMMARY.write_text('{"runs": [\n' + ",\n".join(parts) + "]}\n")


def summarise(data: dict[str, Any], name: str) -> dict[str, Any]:
    """What the sizing rule, the report and the cost model read from a raw run: one row per
    function (peaks, counts, the slowest call), the semantic worker's peaks for the input
    floor, its folder jobs, the calls over their limits, and the phases and per-route groups.
    Functions the raw run marks superseded are left out."""
    from skald import catalog

    kinds = {fn.name: fn.kind for fn in catalog.FUNCTIONS}
    gone = data.get("superseded") or {}
    samples = [s for s in data["samples"] if s["function"] not in gone]
    inits = [i for i in data["inits"] if i["function"] not in gone]
    semantic = [s for s in samples if s["function"] == "semantic"]
    doc = [s["hwm_kb"] for s in semantic if s["phase"].startswith("semantic: one")]
    notes = [s["hwm_kb"] for s in semantic if s["phase"] == "content/fs"]
    loads = [x for p in data["phases"] for x in (p["load_start"], p["load_end"])]
    return {
        "run": name,
        "date": data["date"],
        "machine": data["machine"],
        "command": data["command"],
        "dimension": data.get("dimension", 384),
        "scale": data["scale"],
        "load_start": data["load_start"],
        "load_end": data["load_end"],
        "load": [min(loads, default=0), max(loads, default=0)],
        "over_api_gateway_limit": data.get("over_api_gateway_limit") or [],
        "notes": data.get("notes") or {},
        **({"superseded": gone} if gone else {}),
        "semantic_peak_kb": {"notes": max(notes, default=None), "document": max(doc, default=None)},
        "functions": _function_rows(samples, inits),
        "folders": _folder_rows(data["phases"], semantic),
        "slow": [
            {k: s[k] for k in ("function", "label", "phase", "ms", "cpu_ms")}
            for s in sorted(samples, key=lambda s: -s["ms"])
            if _is_slow(s, kinds)
        ],
        "phases": data["phases"],
        "groups": _groups(samples),
    }


def _function_rows(
    samples: list[dict[str, Any]], inits: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    by_fn: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        by_fn[s["function"]].append(s)
    cold: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for i in inits:
        cold[i["function"]].append(i)
    rows = []
    for name in dict.fromkeys([*by_fn, *cold]):
        ss, ii = by_fn.get(name, []), cold.get(name, [])
        slowest = max(ss, key=lambda s: s["ms"]) if ss else None
        rows.append(
            {
                "function": name,
                "invocations": len(ss),
                "errors": sum(1 for s in ss if _failed(s)),
                "rejected": sum(1 for s in ss if _rejected(s)),
                "peak_kb": max(x["hwm_kb"] for x in (*ss, *ii)),
                "p50_ms": statistics.median(s["ms"] for s in ss) if ss else 0.0,
                "cpu_p50_ms": statistics.median(s["cpu_ms"] for s in ss) if ss else 0.0,
                "max_ms": slowest["ms"] if slowest else 0.0,
                "cpu_at_max_ms": slowest["cpu_ms"] if slowest else 0.0,
                "cpu_max_ms": max((s["cpu_ms"] for s in ss), default=0.0),
                "init_ms": max((i["ms"] for i in ii), default=0.0),
                "init_cpu_ms": max((i["cpu_ms"] for i in ii), default=0.0),
                "slowest": slowest["label"] if slowest else "",
            }
        )
    return rows


def _folder_rows(
    phases: list[dict[str, Any]], semantic: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A folder is one semantic job (or a few): its invocations, peak and length, per phase."""
    rows = []
    for p in phases:
        jobs = [s for s in semantic if s["phase"] == p["phase"]]
        if not jobs or not p["phase"].startswith("semantic: folder"):
            continue
        emb = p.get("embedding") or {}
        rows.append(
            {
                "phase": p["phase"],
                "jobs": len(jobs),
                "longest_ms": max(s["ms"] for s in jobs),
                "peak_kb": max(s["hwm_kb"] for s in jobs),
                "texts": int(emb.get("texts", 0)),
                "embedding_s": emb.get("seconds", 0),
            }
        )
    return rows


def _groups(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Invocations per phase, function and route or job kind."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        groups[(s["phase"], s["function"], s["label"])].append(s)
    return [
        {
            "phase": ph,
            "function": fn,
            "label": label,
            "n": len(ss),
            "errors": sum(1 for s in ss if _failed(s)),
            "rejected": sum(1 for s in ss if _rejected(s)),
            "p50_ms": statistics.median(s["ms"] for s in ss),
            "max_ms": max(s["ms"] for s in ss),
            "total_ms": sum(s["ms"] for s in ss),
            "peak_kb": max(s["hwm_kb"] for s in ss),
        }
        for (ph, fn, label), ss in groups.items()
    ]


def sizes(runs: list[dict[str, Any]]) -> dict[str, Sized]:
    from skald import catalog

    kinds = {fn.name: fn.kind for fn in catalog.FUNCTIONS}
    st = stats([row for r in runs for row in r["functions"]], kinds)
    return {fn.name: size(st[fn.name], runs) for fn in catalog.FUNCTIONS if fn.name in st}


BEGIN, END = "    # generated: begin\n", "    # generated: end\n"


def resize(runs: list[dict[str, Any]], apply: bool = False) -> str:
    from skald import catalog

    new = sizes(runs)
    lines = ["| function | memory MB | timeout s | was | from |", "|---|---|---|---|---|"]
    for fn in catalog.FUNCTIONS:
        s = new.get(fn.name)
        if s is None:
            lines.append(f"| {fn.name} | - | - | {fn.memory_mb} / {fn.timeout_s} | not measured |")
            continue
        lines.append(
            f"| {fn.name} | {s.memory_mb} | {s.timeout_s} | "
            f"{fn.memory_mb} / {fn.timeout_s} | {s.note} |"
        )
    if apply:
        text = CATALOG.read_text()
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        if not tail:
            raise RuntimeError(f"no generated block in {CATALOG}")
        stamp = (
            f"{len(runs)} run(s) {min(r['date'] for r in runs)[:16]} to "
            f"{max(r['date'] for r in runs)[:16]}, load {min(r['load'][0] for r in runs)}"
            f" to {max(r['load'][1] for r in runs)}"
        )
        body = "".join(
            f"    {json.dumps(name)}: Size({s.memory_mb}, {s.timeout_s},\n"
            + "".join(
                f"               {json.dumps(chunk)}\n" for chunk in _wrap(f"{stamp}: {s.note}")
            )[:-1]
            + "),\n"
            for name, s in new.items()
        )
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
    """LAMBDA_SIZING.md: one run's summary (`summarise`) in detail, the sizes from `runs`."""
    from skald import catalog

    kinds = {fn.name: fn.kind for fn in catalog.FUNCTIONS}
    rows = {r["function"]: r for r in data["functions"] if r["invocations"]}
    out = [
        "# Lambda sizes from measurement",
        "",
        f"- date: {data['date']}",
        f"- machine: {data['machine']}",
        f"- command: `.venv/bin/python {data['command']}`",
        f"- load average at start: {' '.join(map(str, data['load_start']))}; at end: "
        f"{' '.join(map(str, data['load_end']))}",
        f"- scale: {data['scale']}",
        "",
        "Each function's real handler ran in its own process on aws-local (moto, osmem-server),"
        " behind an API Gateway stand-in with the REQUEST authorizer on every call and SQS "
        "event source mappings for the workers; embeddings from a separate MiniLM server (as "
        "Bedrock is remote), no LLM (rule-based summaries and extraction). Peak = VmHWM of the "
        "function's process; each phase started fresh processes. Durations are wall times on "
        "this shared machine (I/O to local emulators is faster than to AWS; CPU is slower "
        "under load); CPU = the process's user+system time.",
        "",
        "## Per function",
        "",
        "| function | kind | invocations | errors | 4xx | peak MB | p50 ms | max ms | "
        "CPU p50 ms | CPU max ms | cold start s (CPU s) | slowest |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fn in catalog.FUNCTIONS:
        r = rows.get(fn.name)
        if r is None:
            out.append(f"| {fn.name} | {fn.kind} | 0 | | | NOT MEASURED | | | | | | |")
            continue
        out.append(
            f"| {fn.name} | {fn.kind} | {r['invocations']} | {r['errors']} | "
            f"{r['rejected']} | {_mb(r['peak_kb']):.0f} | {r['p50_ms']:.0f} | "
            f"{r['max_ms']:.0f} | {r['cpu_p50_ms']:.0f} | {r['cpu_max_ms']:.0f} | "
            f"{r['init_ms'] / 1000:.2f} ({r['init_cpu_ms'] / 1000:.2f}) | {r['slowest']} |"
        )
    out += [
        "",
        "## Sizes (the catalogue's, `bench/lambda_sizing.py --resize`)",
        "",
        _doc_rule(),
        "",
        "From every run below (peaks and slowest calls are the worst any run saw):",
        "",
        resize(runs or [data]),
        "",
        *_runs_table(runs or [data]),
        "",
        "## Per phase, function and route or job kind (the main run)",
        "",
        "| phase | function | route / job kind | n | errors | 4xx | p50 ms | max ms | "
        "peak MB after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for g in data["groups"]:
        out.append(
            f"| {g['phase']} | {g['function']} | {g['label']} | {g['n']} | "
            f"{g['errors']} | {g['rejected']} | {g['p50_ms']:.0f} | {g['max_ms']:.0f} | "
            f"{_mb(g['peak_kb']):.0f} |"
        )
    out += [
        "",
        "## Phases",
        "",
        "Embedding: texts the phase embedded and the seconds the local MiniLM server "
        "spent on them; the Bedrock estimate assumes Titan v2's one text per call, "
        f"{BEDROCK_EMBED_S * 1000:.0f} ms a call, {BEDROCK_PARALLEL} calls in parallel (the "
        "adapter's pool).",
        "",
        "| phase | s | load start | load end | embedded texts | embedding s | "
        "Bedrock est. s | outcome |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in data["phases"]:
        emb = p.get("embedding") or {}
        texts = int(emb.get("texts", 0))
        out.append(
            f"| {p['phase']} | {p['s']} | {p['load_start']} | {p['load_end']} | "
            f"{texts} | {emb.get('seconds', 0):.1f} | "
            f"{texts * BEDROCK_EMBED_S / BEDROCK_PARALLEL:.1f} | "
            f"{str(p['outcome'])[:300]} |"
        )
    over = [
        f"{r['run']}: {o}" for r in (runs or [data]) for o in r.get("over_api_gateway_limit") or []
    ]
    out += [
        "",
        "## What this measurement does not cover",
        "",
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
        "",
        "## Findings",
        "",
        *CONTINUATION_NOTE,
        "",
        "- Requests over API Gateway's 29 s: " + ("; ".join(over) if over else "none."),
        *(line for r in (runs or [data]) for line in _slow(r, kinds)),
        *_growth(runs or [data], kinds),
        *_folders(runs or [data]),
        *(f"- {k}: {v}" for k, v in (data.get("notes") or {}).items()),
    ]
    return "\n".join(out) + "\n"


def _runs_table(runs: list[dict[str, Any]]) -> list[str]:
    from skald import catalog

    names = [fn.name for fn in catalog.FUNCTIONS]
    kinds = {fn.name: fn.kind for fn in catalog.FUNCTIONS}
    out = [
        "## Runs (peak MB / slowest s per function)",
        "",
        "| run | date | load | vector dim | scale | " + " | ".join(names) + " |",
        "|---" * (5 + len(names)) + "|",
    ]
    for r in runs:
        st = stats(r["functions"], kinds)
        gone = r.get("superseded") or {}
        cells = [
            f"{st[n].peak_mb:.0f} / {st[n].max_ms / 1000:.1f}"
            if n in st
            else "superseded"
            if n in gone
            else "-"
            for n in names
        ]
        scale = r["scale"]
        out.append(
            f"| {r['run']} | {r['date'][:16]} | {r['load'][0]}-{r['load'][1]} | "
            f"{r['dimension']} | doc {scale['large_doc_kb']} KB, folder "
            f"{scale['folder_files']} x {scale['folder_file_kb']} KB | " + " | ".join(cells) + " |"
        )
    out += [
        "",
        *(
            f"- {r['run']}: {name} superseded, {why}."
            for r in runs
            for name, why in (r.get("superseded") or {}).items()
        ),
    ]
    return out


def _growth(runs: list[dict[str, Any]], kinds: Mapping[str, str]) -> list[str]:
    """How the semantic worker's peak grows with the document, per run."""
    out = []
    for r in runs:
        st = stats(r["functions"], kinds).get("semantic")
        if st is None:
            continue
        mb, why = input_floor(st, r)
        if mb > MIN_MB:
            out.append(
                f"- {r['run']} ({r['dimension']}-dim vectors):"
                f" the semantic worker's peak grows {why.split(' (')[0].lstrip('+')}"
                f" ({why.split(' (', 1)[1]}. Two sizes give the slope: the slice "
                "of records being embedded and written (its texts, vectors and bulk "
                "body, the same for any larger document) counts in it, so it "
                "overstates larger documents; a job's own Python allocations grow "
                "1.6 MB per MB of document "
                "(tests/unit/services/ingest/test_semantic_batches.py)."
            )
    return out


def _folders(runs: list[dict[str, Any]]) -> list[str]:
    """A folder is one semantic job: its peak and its length, per run."""
    out = []
    for r in runs:
        for f in r["folders"]:
            longest = f["longest_ms"] / 1000
            over = " - over Lambda's 900 s maximum" if longest > 900 else ""
            out.append(
                f"- {r['run']}: {f['phase'].removeprefix('semantic: ')} was "
                f"{f['jobs']} semantic invocation(s), peak {_mb(f['peak_kb']):.0f} MB (memory "
                f"follows the largest document, not the folder), the longest {longest:.0f} s"
                f"{over}: {f['texts']} texts embedded in {f['embedding_s']:.0f} s here, about "
                f"{f['texts'] * BEDROCK_EMBED_S / BEDROCK_PARALLEL:.0f} s on Bedrock, plus an "
                "LLM summary per file on AWS. The job's length grows with the folder; "
                f"{invocations_note(f['jobs'])}"
            )
    return out


CONTINUATION_NOTE = (
    "A semantic job short of time hands its remaining files to a new job on the semantic",
    "queue (same task; the job that indexes the last file refreshes the directories and",
    "completes the task with the totals), so a folder of any size is indexed over as many",
    "invocations as it needs, each ending before the 900 s timeout. In these runs each folder",
    "fitted in one invocation.",
)


def invocations_note(invocations: int) -> str:
    """A semantic job short of time continues in a new job (skald/jobs/semantic.py), so one
    folder may take several invocations, each ending before the timeout."""
    if invocations > 1:
        return f"it continued across {invocations} invocations, each under the timeout."
    return "one invocation did it all (the folder fitted in one)."


SLOW_HTTP_S = 10.0
BEDROCK_EMBED_S = 0.06  # an assumption, not measured: one InvokeModel of Titan v2
BEDROCK_PARALLEL = 4  # the Bedrock embedder's thread pool (max_workers)
SHIPPED_TIMEOUT_S = {"semantic": 300, "memory": 600, "autocommit": 120, "fetch": 300}


def _is_slow(s: dict[str, Any], kinds: Mapping[str, str]) -> bool:
    """An HTTP call past a third of API Gateway's limit, or a job past the timeout its worker
    shipped with."""
    limit = _slow_limit(s["function"], kinds)
    return limit is not None and s["ms"] / 1000 > limit


def _slow_limit(function: str, kinds: Mapping[str, str]) -> float | None:
    if kinds.get(function) in ("http", "authorizer"):
        return SLOW_HTTP_S
    return SHIPPED_TIMEOUT_S.get(function)


def _slow(run: dict[str, Any], kinds: Mapping[str, str]) -> list[str]:
    """The run's slow calls (`_is_slow`), each with its CPU time (the rest is waiting on
    I/O)."""
    out = []
    for s in run["slow"]:
        limit = _slow_limit(s["function"], kinds)
        what = (
            ""
            if kinds.get(s["function"]) in ("http", "authorizer")
            else ", the timeout it shipped with"
        )
        out.append(
            f"- {run['run']}: {s['function']} `{s['label']}` in "
            f'phase "{s["phase"]}": '
            f"{s['ms'] / 1000:.1f} s wall, {s['cpu_ms'] / 1000:.1f} s CPU "
            f"(over {limit:g} s{what})."
        )
    return out


def _doc_rule() -> str:
    doc = __doc__ or ""
    return doc.split("The sizing rule (`size`):", 1)[-1].strip()
