"""Turns the raw results of bench/run.py into bench/RESULTS.md and the latency plot."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.sections import write_section

OPS = ("find", "search keywords", "grep", "glob", "ls", "health")
SKALD_RECALL_MODE = "find hybrid"
PEER_RECALL_MODE = "find (default)"


def _f(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _ratio(a: Any, b: Any) -> float:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return math.nan
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def _ran(system: dict[str, Any]) -> bool:
    return bool(system) and "error" not in system and "skipped" not in system


def common_size(res: dict[str, Any]) -> str | None:
    """The largest corpus size both systems reached (for like-for-like ratios)."""
    skald = set((_get(res, "skald", "synthetic", "sizes") or {}).keys())
    peer = set((_get(res, "openviking", "synthetic", "sizes") or {}).keys())
    both = skald & peer
    return max(both, key=int) if both else None


def ingest_seconds_to(system: dict[str, Any], size: str) -> float:
    """Seconds spent ingesting from 0 up to `size` records (sum over the growth steps)."""
    total = 0.0
    for s, entry in (_get(system, "synthetic", "sizes") or {}).items():
        if int(s) <= int(size):
            total += entry["ingest"]["total_s"]
    return total


def ratios(res: dict[str, Any]) -> list[tuple[str, float, float, float, str]]:
    """(what, skald, openviking, skald/openviking, note)."""
    sk, ov = res.get("skald", {}), res.get("openviking", {})
    if not _ran(ov):
        return []
    size = common_size(res)
    rows: list[tuple[str, float, float, float, str]] = []

    def add(what: str, a: Any, b: Any, note: str = "") -> None:
        a = float(a) if a is not None else math.nan
        b = float(b) if b is not None else math.nan
        rows.append((what, a, b, _ratio(a, b), note))

    add(
        "LoCoMo recall@10",
        _get(sk, "locomo", SKALD_RECALL_MODE, "metrics", "overall", "recall@10"),
        _get(ov, "locomo", PEER_RECALL_MODE, "metrics", "overall", "recall@10"),
        "Skald hybrid find vs OpenViking find (dense only)",
    )
    if size is not None:
        for p in ("p50", "p95"):
            add(
                f"find {p} at {int(size):,} records (ms)",
                _get(sk, "synthetic", "sizes", size, "latency_ms", "find", p),
                _get(ov, "synthetic", "sizes", size, "latency_ms", "find", p),
            )
        add(
            f"ingest time 0 -> {int(size):,} records (s)",
            ingest_seconds_to(sk, size),
            ingest_seconds_to(ov, size),
            "batch-write + wait for processing",
        )
    add(
        "LoCoMo ingest time, 2,760 turns (s)"
        if res.get("locomo_data", {}).get("turns") == 2760
        else "LoCoMo ingest time (s)",
        _get(sk, "locomo_ingest", "total_s"),
        _get(ov, "locomo_ingest", "total_s"),
    )
    add(
        "LoCoMo find p50, dense only (ms)",
        _get(sk, "locomo", "find semantic", "latency_ms", "p50"),
        _get(ov, "locomo", PEER_RECALL_MODE, "latency_ms", "p50"),
        "same work in both: Skald semantic find vs OpenViking find, scoped, level 2, limit 20",
    )
    add(
        "startup time, empty data dir (s)",
        sk.get("startup_s"),
        ov.get("startup_s"),
        "spawn -> GET /health 200",
    )
    if sk.get("first_find_ms") is not None and ov.get("first_find_ms") is not None:
        add(
            "startup + first find (s)",
            sk["startup_s"] + sk["first_find_ms"] / 1000,
            ov["startup_s"] + ov["first_find_ms"] / 1000,
            "the first find also loads the model where loading is lazy",
        )
    if size is not None:
        add(
            f"server RSS at {int(size):,} records (MB)",
            _get(sk, "synthetic", "sizes", size, "rss_mb"),
            _get(ov, "synthetic", "sizes", size, "rss_mb"),
            "OpenViking server alone; its embedding server is extra: see section 3",
        )
    return rows


def targets(res: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, measured, met?)."""
    sk, ov = res.get("skald", {}), res.get("openviking", {})
    out: list[tuple[str, str, str]] = []
    rec = _get(sk, "locomo", SKALD_RECALL_MODE, "metrics", "overall", "recall@10")
    out.append(
        (
            "LoCoMo dev recall@10 (hybrid find) >= 0.60",
            _f(rec),
            _yes(rec is not None and rec >= 0.60),
        )
    )
    peer_rec = _get(ov, "locomo", PEER_RECALL_MODE, "metrics", "overall", "recall@10")
    if rec is not None and peer_rec is not None:
        out.append(
            (
                "... and >= OpenViking's + 0.10 (same run)",
                f"{rec:.3f} vs {peer_rec:.3f} (+{rec - peer_rec:.3f})",
                _yes(rec >= peer_rec + 0.10),
            )
        )
    else:
        out.append(
            ("... and >= OpenViking's + 0.10 (same run)", "OpenViking did not run", "not measured")
        )
    size = common_size(res)
    if size is not None:
        a = _get(sk, "synthetic", "sizes", size, "latency_ms", "find", "p50")
        b = _get(ov, "synthetic", "sizes", size, "latency_ms", "find", "p50")
        out.append(
            (
                f"find p50 <= 1/2 of OpenViking's (at {int(size):,} records)",
                f"{_f(a, 1)} ms vs {_f(b, 1)} ms (ratio {_f(_ratio(a, b), 2)})",
                _yes(a is not None and b is not None and a <= b / 2),
            )
        )
    else:
        out.append(("find p50 <= 1/2 of OpenViking's", "OpenViking did not run", "not measured"))
    p50 = _get(sk, "synthetic", "sizes", "10000", "latency_ms", "find", "p50")
    out.append(
        (
            "find p50 <= 15 ms at 10k records",
            f"{_f(p50, 1)} ms",
            _yes(p50 is not None and p50 <= 15.0) if p50 is not None else "not measured",
        )
    )
    big = _get(sk, "synthetic", "sizes", "100000", "latency_ms", "find", "p50")
    out.append(
        (
            "find p50 <= 40 ms at 100k records",
            f"{_f(big, 1)} ms"
            if big is not None
            else "not in this run (see bench/RESULTS-100k.md)",
            _yes(big <= 40.0) if big is not None else "not measured",
        )
    )
    fps, eps = ingest_rate(res)
    measured = f"{_f(fps, 1)} files/s vs {_f(eps, 1)} texts/s = {_f(_ratio(fps, eps) * 100, 0)}%"
    rates = [float(r["texts_per_s"]) for r in res.get("embedder_runs") or []]
    if len(rates) >= 2 and min(rates) > 0 and max(rates) / min(rates) > 1.10:
        # The mean hides a machine that changed speed between the two measurements.
        measured += (
            f" (the bare embedder moved {' -> '.join(_f(r, 1) for r in rates)} texts/s "
            f"within the run: {_f(_ratio(fps, max(rates)) * 100, 0)}-"
            f"{_f(_ratio(fps, min(rates)) * 100, 0)}% against each)"
        )
    out.append(
        (
            "ingest >= 70% of the bare embedder's texts/s",
            measured,
            _yes(not math.isnan(_ratio(fps, eps)) and _ratio(fps, eps) >= 0.70),
        )
    )
    return out


def ingest_rate(res: dict[str, Any]) -> tuple[float, float]:
    """Skald's files/s over its largest growth step (the one least dominated by fixed costs)
    and the bare embedder's texts/s."""
    sizes = _get(res, "skald", "synthetic", "sizes") or {}
    best = max(sizes.values(), key=lambda e: e["ingest"]["files"], default=None)
    fps = best["ingest"]["files_per_s"] if best else math.nan
    eps = _get(res, "embedder", "texts_per_s") or math.nan
    return float(fps), float(eps)


def _yes(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _locomo_tables(system: str, loc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for mode, entry in loc.items():
        lines.append(
            f"**{system}, {mode}**"
            + (
                f" (latency p50 {_f(_get(entry, 'latency_ms', 'p50'), 1)} ms)"
                if "latency_ms" in entry
                else ""
            )
        )
        lines.append("")
        if "error" in entry:
            lines += [f"Not available: `{entry['error']}`", ""]
            continue
        rows = []
        for cat, m in entry["metrics"].items():
            rows.append(
                [
                    cat,
                    str(m["n"]),
                    _f(m["recall@5"]),
                    _f(m["recall@10"]),
                    _f(m["recall@20"]),
                    _f(m["ndcg@10"]),
                    _f(m["mrr"]),
                ]
            )
        lines += _table(
            ["category", "questions", "recall@5", "recall@10", "recall@20", "nDCG@10", "MRR"], rows
        )
        lines.append("")
    return lines


def _source_line(src: dict[str, Any]) -> str:
    dirty = src.get("uncommitted_product_files") or []
    state = f"with uncommitted changes in {', '.join(dirty)}" if dirty else "clean tree"
    note = f" ({src['note']})" if src.get("note") else ""
    return f"- Skald source: commit `{src.get('commit')}`, {state}{note}"


def write_results(res: dict[str, Any], path: Path) -> None:
    L: list[str] = []
    for section in (
        _header_lines,
        _machine_lines,
        _comparison_lines,
        _locomo_lines,
        _memory_lines,
        _latency_lines,
        _ingest_lines,
        _notes_lines,
    ):
        L += section(res)
    write_section(path, "run", "\n".join(L))


def _header_lines(res: dict[str, Any]) -> list[str]:
    """The title, the run's mode, date, command, source, load and LoCoMo data."""
    L: list[str] = []
    L += [
        "# Skald benchmark results",
        "",
        "Generated by `bench/run.py` (see `bench/README.md` for the method). Numbers from "
        "one run on a shared 2-core machine: see the load average below before comparing "
        "them with another run.",
        "",
    ]
    L += [
        f"- Mode: **{res['mode']}** (records: {', '.join(f'{s:,}' for s in res['sizes'])}; "
        f"{res['queries_per_size']} find/search queries per size)",
        f"- Date: {res['started_at']} (UTC); duration {res['elapsed_s'] / 60:.1f} min",
        f"- Command: `{res['command']}`",
        *([_source_line(res["source"])] if res.get("source") else []),
        *(
            [
                f"- OpenViking's corpus grew to {int(common_size(res) or 0):,} records only "
                f"(`--peer-max-records {res['peer_max_records']}`; the quick default keeps the "
                "run under 15 minutes): Skald / OpenViking ratios compare both at that size."
            ]
            if res.get("peer_max_records")
            and res["peer_max_records"] < max(res["sizes"])
            and common_size(res) is not None
            else []
        ),
        f"- Load average (1, 5, 15 min) at start: {res['load_average_start']}, at end: "
        f"{res['load_average_end']}",
        f"- LoCoMo: `{res['locomo_path']}` ({res['locomo_data']['conversations']} "
        f"conversations, {res['locomo_data']['turns']:,} turns, "
        f"{res['locomo_data']['questions']} questions of categories 1-4; "
        f"{res['locomo_data']['dropped_questions']} questions without a valid evidence id "
        f"left out; evidence ids naming no turn dropped: "
        f"{', '.join(res['locomo_data']['dropped_evidence']) or 'none'})",
        "",
    ]
    return L


def _machine_lines(res: dict[str, Any]) -> list[str]:
    """The machine and the packages."""
    L: list[str] = []
    ov = res.get("openviking", {})
    m = res["machine"]
    L += ["## Machine", ""]
    L += _table(
        ["CPU", "cores (logical / physical)", "RAM", "OS", "Python"],
        [
            [
                m["cpu_model"],
                f"{m['logical_cores']} / {m['physical_cores']}",
                f"{m['ram_gb']} GB",
                m["os"],
                m["python"],
            ]
        ],
    )
    L.append("")
    pk = dict(m["packages"])
    if _ran(ov) or ov.get("version"):
        pk["openviking (peer venv)"] = ov.get("version", "-")
    L.append("Packages: " + ", ".join(f"{k} {v}" for k, v in pk.items()))
    L.append("")
    return L


def _comparison_lines(res: dict[str, Any]) -> list[str]:
    """The targets met or missed, and the Skald / OpenViking ratios."""
    L: list[str] = []
    ov = res.get("openviking", {})
    L += ["## Targets", ""]
    L += _table(["target", "measured", "result"], [list(t) for t in targets(res)])
    L.append("")

    L += ["## Skald / OpenViking", ""]
    rows = ratios(res)
    if rows:
        L += _table(
            ["metric", "Skald", "OpenViking", "Skald / OpenViking", "note"],
            [
                [w, _f(a, 3 if a < 10 else 1), _f(b, 3 if b < 10 else 1), _f(r, 2), n]
                for w, a, b, r, n in rows
            ],
        )
    else:
        L.append(f"OpenViking did not run: `{ov.get('error') or ov.get('skipped')}`")
    L.append("")
    return L


def _locomo_lines(res: dict[str, Any]) -> list[str]:
    """Section 1: retrieval of LoCoMo turns as resources."""
    L: list[str] = []
    sk, ov = res.get("skald", {}), res.get("openviking", {})
    L += [
        "## 1. LoCoMo retrieval: resources (one file per turn)",
        "",
        "Top 20 distinct level-2 files per question, scoped to the question's conversation. "
        "recall@k = fraction of the question's evidence turns in the top k, averaged over "
        "questions; nDCG@10 with binary gains; MRR of the first evidence turn in the top "
        "20.",
        "",
    ]
    L += _locomo_tables("Skald", sk.get("locomo", {}))
    if _ran(ov):
        L += _locomo_tables(f"OpenViking {ov.get('version', '')}", ov.get("locomo", {}))

    fus = sk.get("locomo_fusion")
    if fus:
        L += [
            "**Why hybrid gains what it gains** (from the rankings above, no extra queries): "
            "*client RRF* fuses the semantic and keyword top-20 lists here with reciprocal "
            "rank fusion (k=60); *best of the two* takes, per question, the better of the "
            "dense and keyword recall@10; *union ceiling* is the recall of the union of both "
            f"top-10s. Hybrid beat dense on {fus['hybrid_better_than_dense']} questions and "
            f"lost on {fus['hybrid_worse_than_dense']} (of {fus['questions']}).",
            "",
        ]
        rows_f = [
            [
                cat,
                _f(v["client_rrf_recall@10"]),
                _f(v["dense_or_keywords_best_recall@10"]),
                _f(v["union_ceiling_recall@20"]),
            ]
            for cat, v in fus["metrics"].items()
        ]
        L += _table(
            [
                "category",
                "client RRF recall@10",
                "best of the two recall@10",
                "union ceiling (20 items)",
            ],
            rows_f,
        )
        L.append("")
    return L


def _memory_lines(res: dict[str, Any]) -> list[str]:
    """Section 1b: retrieval of LoCoMo sessions through memory extraction."""
    L: list[str] = []
    sk, ov = res.get("skald", {}), res.get("openviking", {})
    L += ["## 1b. LoCoMo retrieval: memories (sessions -> commit -> extraction)", ""]
    mem = sk.get("memory")
    if mem:
        k = "10"
        feed_msgs = res["locomo_data"]["turns"]
        L += [
            f"Skald: every LoCoMo session fed as one session and committed ("
            f"{sum(v['sessions'] for v in mem['feed'].values())} sessions, "
            f"{feed_msgs:,} messages in {mem['feed_s']:.1f}s = "
            f"{feed_msgs / mem['feed_s']:.1f} messages/s including extraction); commit "
            f"tasks: "
            + "; ".join(f"{s}: {v['task_status']}" for s, v in mem["feed"].items())
            + f". find p50 {_f(mem['latency_ms']['p50'], 1)} ms.",
            "",
            "A question is a hit when one of the top 10 memory hits (memories + session "
            "archives, context_type=memory, scoped to `viking://user/<conversation>`) comes "
            "from a session holding an evidence turn. *chance* = the hit rate of a random "
            "choice of as many sessions as the top 10 covered (so it grows with spread).",
            "",
        ]
        rows2 = []
        for cat, v in mem["metrics"].items():
            rows2.append(
                [
                    cat,
                    str(v["n"]),
                    _f(v[f"session_recall@{k}"]),
                    _f(v[f"session_coverage@{k}"]),
                    _f(v[f"chance@{k}"]),
                    _f(v["sessions_covered"], 1),
                    _f(v["mapped_hits"], 1),
                ]
            )
        L += _table(
            [
                "category",
                "questions",
                "session recall@10",
                "evidence sessions found",
                "chance",
                "sessions covered",
                "hits mapped to a session (of 10)",
            ],
            rows2,
        )
        L.append("")
    probe = ov.get("memory_probe")
    if probe:
        L += [
            f"OpenViking: one LoCoMo session fed and committed as a probe: commit task "
            f"status `{probe.get('status')}`, error `{probe.get('error')}`. Memory "
            "extraction in OpenViking needs its VLM/LLM (`vlm` section of ov.conf); the "
            "benchmark runs it without one (offline, vectors only), so it has no memory "
            "path to measure.",
            "",
        ]
    return L


def _latency_lines(res: dict[str, Any]) -> list[str]:
    """Section 2: latency of each operation through HTTP."""
    L: list[str] = []
    sk, ov = res.get("skald", {}), res.get("openviking", {})
    L += [
        "## 2. Latency through HTTP (openviking-sdk client, sequential)",
        "",
        "`find` = default find (Skald: hybrid) scoped to the corpus root, limit 10; "
        "`search keywords` = BM25; `grep` = case-insensitive regex over the whole corpus "
        "(SDK default node_limit 256); `glob` = one leaf's 100 file names (`**/f0123??.md`) "
        "matched over the whole corpus; `ls` = one leaf directory (100 files); `health` = "
        "`GET /health`, the floor every call pays (SDK + HTTP + server framework).",
        "",
        f"![latency]({res.get('plot_file', 'latency.png')})",
        "",
    ]
    rows3 = []
    for name, system in (("Skald", sk), ("OpenViking", ov)):
        for size, entry in (_get(system, "synthetic", "sizes") or {}).items():
            for op in OPS:
                s = entry["latency_ms"].get(op, {})
                if "error" in s:
                    rows3.append(
                        [
                            name,
                            f"{int(size):,}",
                            op,
                            "-",
                            "-",
                            "-",
                            f"not available: {s['error'][:90]}",
                        ]
                    )
                elif s:
                    rows3.append(
                        [
                            name,
                            f"{int(size):,}",
                            op,
                            _f(s["p50"], 1),
                            _f(s["p95"], 1),
                            _f(s["p99"], 1),
                            str(s["n"]),
                        ]
                    )
    L += _table(["system", "records", "operation", "p50 ms", "p95 ms", "p99 ms", "n"], rows3)
    L.append("")
    if _ran(ov) and ov.get("embed_hop_ms"):
        L += [
            f"OpenViking embeds each query through the benchmark's embedding server: one "
            f"such call costs p50 {_f(ov['embed_hop_ms']['p50'], 1)} ms over HTTP; Skald "
            f"embeds in-process (bare embedder, one query: p50 "
            f"{_f(res['embedder']['single_query_ms']['p50'], 1)} ms).",
            "",
        ]
    return L


def _ingest_lines(res: dict[str, Any]) -> list[str]:
    """Section 3: ingest rates and memory use."""
    L: list[str] = []
    sk, ov = res.get("skald", {}), res.get("openviking", {})
    top = max(res["sizes"])
    L += ["## 3. Ingest and memory", ""]
    e = res["embedder"]
    runs = res.get("embedder_runs") or []
    L += [
        f"Bare embedder (`OnnxMiniLMEmbedder()` with `skald serve`'s defaults, in the "
        f"benchmark process, {e['texts']:,} corpus texts, batches of 256): "
        + ", ".join(
            f"{r['when']} {r['texts_per_s']:.1f} texts/s (one query p50 "
            f"{r['single_query_ms']['p50']:.1f} ms)"
            for r in runs
        )
        + f"; mean **{e['texts_per_s']:.1f} texts/s**.",
        "",
    ]
    rows4 = []
    for name, system in (("Skald", sk), ("OpenViking", ov)):
        prev = 0
        for size, entry in (_get(system, "synthetic", "sizes") or {}).items():
            ing = entry["ingest"]
            rows4.append(
                [
                    name,
                    f"{prev:,} -> {int(size):,}",
                    f"{ing['files']:,}",
                    _f(ing["write_s"], 1),
                    _f(ing["total_s"], 1),
                    _f(ing["files_per_s"], 1),
                    _f(entry["rss_mb"], 0),
                ]
            )
            prev = int(size)
        li = system.get("locomo_ingest")
        if li:
            rows4.append(
                [
                    name,
                    "LoCoMo turns",
                    f"{li['files']:,}",
                    _f(li["write_s"], 1),
                    _f(li["total_s"], 1),
                    _f(li["files_per_s"], 1),
                    _f(system.get("rss_end_mb"), 0),
                ]
            )
    L += _table(
        [
            "system",
            "step",
            "files",
            "write calls s",
            "until processed s",
            "files/s",
            "server RSS MB after",
        ],
        rows4,
    )
    L.append("")
    fps, eps = ingest_rate(res)
    L += [
        f"Skald ingest / bare embedder = {_f(fps, 1)} / {_f(eps, 1)} = "
        f"**{_f(_ratio(fps, eps) * 100, 0)}%** (each file is one embedded text; Skald also "
        "embeds two sidecars per refreshed directory).",
        "",
    ]
    L += [
        f"`skald serve` RSS: idle {_f(sk.get('rss_idle_mb'), 0)} MB, at {top:,} records "
        f"**{_f(sk.get('rss_mb'), 0)} MB**"
        + (" (quick mode: measured at 10k records, not 100k)" if top < 100_000 else "")
        + f", after LoCoMo and the memory path {_f(sk.get('rss_end_mb'), 0)} MB.",
        "",
    ]
    if _ran(ov):
        L += [
            f"OpenViking server RSS: idle {_f(ov.get('rss_idle_mb'), 0)} MB, at its largest "
            f"size {_f(ov.get('rss_mb'), 0)} MB, plus the embedding server it needs "
            f"{_f(ov.get('embed_server_rss_mb'), 0)} MB.",
            "",
        ]
        steps = [
            (s, e["ingest"])
            for s, e in (_get(ov, "synthetic", "sizes") or {}).items()
            if "texts_embedded" in e["ingest"]
        ]
        if steps:
            L += [
                "Texts OpenViking sent to the embedding server while ingesting: "
                + ", ".join(
                    f"{i['texts_embedded']:,} for {i['files']:,} files (step to {int(s):,})"
                    for s, i in steps
                )
                + ".",
                "",
            ]
    return L


def _notes_lines(res: dict[str, Any]) -> list[str]:
    """How the peer ran, and where the raw results are."""
    L: list[str] = []
    ov = res.get("openviking", {})
    L += ["## Notes", ""]
    if _ran(ov):
        L += [
            "- OpenViking ran offline from `bench/peers/openviking-venv` with this ov.conf "
            "(no `vlm` section, so no summaries and no memory extraction):",
            "",
            "```json",
            _json(ov.get("config")),
            "```",
            "",
        ]
        L += [
            "- OpenViking's `search_type: keywords` answers 400 on its local vector "
            "backend (documented upstream); its `find` takes no `search_type` "
            "(extra=forbid), so it is compared with its default dense find.",
            "",
        ]
    elif ov:
        L += [f"- OpenViking: `{ov.get('error') or ov.get('skipped')}`", ""]
    L += [
        "- Raw results: `bench/out/results-latest.json` (git-ignored); plot: "
        f"`bench/out/latency.png`, copied to `bench/{res.get('plot_file', 'latency.png')}`.",
        "",
    ]
    return L


def _json(value: Any) -> str:
    import json

    return json.dumps(value, indent=2)


def write_plot(res: dict[str, Any], path: Path) -> Path | None:
    """p50/p95/p99 of each operation against the number of records, log-log, one panel per
    operation, both systems in each panel."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a server
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    systems = [
        ("Skald", res.get("skald", {}), "tab:blue"),
        ("OpenViking", res.get("openviking", {}), "tab:orange"),
    ]
    cols = 3
    rows = math.ceil(len(OPS) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.6 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    sizes_all = sorted(
        {int(s) for _, system, _ in systems for s in (_get(system, "synthetic", "sizes") or {})}
    )

    def label(n: float, _: object) -> str:
        return f"{n / 1000:g}k" if n >= 1000 else f"{n:g}"

    for ax, op in zip(flat, OPS, strict=False):
        for name, system, color in systems:
            sizes = _get(system, "synthetic", "sizes") or {}
            pts = [(int(s), e["latency_ms"].get(op, {})) for s, e in sizes.items()]
            pts = [(n, s) for n, s in pts if s and "error" not in s]
            if not pts:
                continue
            xs = [n for n, _ in pts]
            for q, style in (("p50", "-o"), ("p95", "--s"), ("p99", ":^")):
                ax.plot(
                    xs,
                    [s[q] for _, s in pts],
                    style,
                    color=color,
                    label=f"{name} {q}",
                    markersize=4,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes_all)
        ax.xaxis.set_major_formatter(FuncFormatter(label))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.set_title(op)
        ax.set_xlabel("records")
        ax.set_ylabel("ms through HTTP")
        ax.grid(True, which="both", alpha=0.3)
    for ax in flat[len(OPS) :]:
        ax.axis("off")
    handles, labels = flat[0].get_legend_handles_labels()
    if handles:
        # the spare panel holds the legend
        spare = flat[-1] if len(flat) > len(OPS) else flat[0]
        spare.legend(handles, labels, loc="center", fontsize=9)
    fig.suptitle(
        f"Skald benchmark ({res['mode']}, {res['started_at']}, load average "
        f"{res['load_average_start'][0]} at start)",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
