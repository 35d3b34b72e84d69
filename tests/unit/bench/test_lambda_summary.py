"""The Lambda sizing runs' summaries (bench/lambda_report.py): a raw run reduced to what the
sizing rule reads gives the rule the same worst cases its invocations did, several runs merge
into each function's worst, a superseded function stops counting, and kept runs replace their
namesake."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def lr() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lambda_report", ROOT / "bench/lambda_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lambda_report"] = module
    spec.loader.exec_module(module)
    return module


def call(
    fn: str,
    phase: str,
    label: str,
    ms: float,
    cpu_ms: float,
    hwm_kb: int,
    status: int | None = 200,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        "function": fn,
        "phase": phase,
        "label": label,
        "ms": ms,
        "cpu_ms": cpu_ms,
        "hwm_kb": hwm_kb,
        "status": status,
        "error": error,
    }


def cold(fn: str, ms: float, cpu_ms: float, hwm_kb: int) -> dict[str, Any]:
    return {"function": fn, "phase": "setup", "ms": ms, "cpu_ms": cpu_ms, "hwm_kb": hwm_kb}


def raw_run(
    date: str, samples: list[dict[str, Any]], inits: list[dict[str, Any]], doc_kb: int = 2048
) -> dict[str, Any]:
    phases = [
        {
            "phase": p,
            "s": 1.0,
            "load_start": 0.5,
            "load_end": 1.5,
            "outcome": None,
            "embedding": {"texts": 10, "seconds": 2.0},
        }
        for p in dict.fromkeys(s["phase"] for s in samples)
    ]
    return {
        "date": date,
        "machine": "test",
        "command": "bench/lambda_sizing.py",
        "dimension": 384,
        "scale": {"large_doc_kb": doc_kb, "folder_files": 2, "folder_file_kb": 40},
        "load_start": [0.5, 0.5, 0.5],
        "load_end": [1.5, 1.5, 1.5],
        "phases": phases,
        "over_api_gateway_limit": [],
        "notes": {},
        "samples": samples,
        "inits": inits,
    }


SEARCH = [
    call("search", "search/find", "POST /api/v1/search/grep", 120.0, 80.0, 90_000),
    call("search", "search/find", "POST /api/v1/search/find", 900.0, 300.0, 95_000, status=400),
    call(
        "search",
        "search/find",
        "POST /api/v1/search/grep",
        40.0,
        350.0,
        91_000,
        status=500,
        error="boom",
    ),
]
SEMANTIC = [
    call("semantic", "content/fs", "semantic.process", 2_000.0, 500.0, 100 * 1024),
    call(
        "semantic",
        "semantic: one 2048 KB document",
        "semantic.process",
        9_000.0,
        3_000.0,
        140 * 1024,
    ),
]


def test_a_summary_gives_the_rule_the_worst_its_invocations_gave(lr: ModuleType) -> None:
    run = lr.summarise(
        raw_run(
            "2026-01-01T00:00:00+00:00", SEARCH + SEMANTIC, [cold("search", 700.0, 650.0, 99_000)]
        ),
        "lambda_sizing.json",
    )
    st = lr.stats(run["functions"], {"search": "http", "semantic": "worker"})
    search = st["search"]
    assert search.peak_mb == 99_000 / 1024  # the cold start's peak
    assert (search.invocations, search.errors, search.rejected) == (3, 1, 1)
    assert (search.max_ms, search.slowest) == (900.0, "POST /api/v1/search/find")
    assert search.io_at_max_ms == 600.0  # its wall time minus its CPU
    assert search.cpu_max_ms == 350.0  # another call's CPU
    assert (search.init_cpu_ms, search.init_ms) == (650.0, 700.0)
    # The semantic worker's growth per MB of document: (140 - 100) MB over 2 MB.
    memory, why = lr.input_floor(st["semantic"], run)
    need = 100 + 20 * lr.MAX_DOCUMENT_MB
    assert memory == lr._ceil_step(need * lr.HEADROOM) and why.startswith("+20 MB per MB")


def test_several_runs_merge_into_each_functions_worst(lr: ModuleType) -> None:
    a = lr.summarise(raw_run("2026-01-01T00:00:00+00:00", SEARCH, []), "lambda_sizing-a.json")
    slow = call("search", "search/find", "POST /api/v1/search/ls", 5_000.0, 1_000.0, 50_000)
    b = lr.summarise(raw_run("2026-01-02T00:00:00+00:00", [slow], []), "lambda_sizing-b.json")
    st = lr.stats([*a["functions"], *b["functions"]], {"search": "http"})["search"]
    assert st.peak_mb == 95_000 / 1024 and st.invocations == 4
    assert (st.max_ms, st.io_at_max_ms, st.slowest) == (5_000.0, 4_000.0, "POST /api/v1/search/ls")
    assert st.cpu_max_ms == 1_000.0


def test_a_superseded_function_no_longer_counts(lr: ModuleType) -> None:
    run = lr.summarise(
        raw_run("2026-01-01T00:00:00+00:00", SEARCH + SEMANTIC, []), "lambda_sizing.json"
    )
    run["superseded"] = {"semantic": "changed since"}
    current = lr._current(run)
    st = lr.stats(current["functions"], {"search": "http", "semantic": "worker"})
    assert set(st) == {"search"}
    assert all(g["function"] == "search" for g in current["groups"])
    assert current["semantic_peak_kb"] == {"notes": None, "document": None}


def test_a_kept_run_replaces_its_namesake_and_only_the_main_run_keeps_its_phases(
    lr: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lr, "SUMMARY", tmp_path / "summary.json")
    lr.write_runs([])
    first = lr.summarise(raw_run("2026-01-01T00:00:00+00:00", SEARCH, []), "lambda_sizing.json")
    variant = lr.summarise(
        raw_run("2026-01-02T00:00:00+00:00", SEMANTIC, []), "lambda_sizing-dim1024.json"
    )
    again = lr.summarise(raw_run("2026-01-03T00:00:00+00:00", SEARCH[:1], []), "lambda_sizing.json")
    for run in (first, variant, again):
        lr.keep(run)
    runs = lr.load_runs()
    assert [(r["run"], r["date"][:10]) for r in runs] == [
        ("lambda_sizing-dim1024.json", "2026-01-02"),
        ("lambda_sizing.json", "2026-01-03"),
    ]
    assert "phases" not in runs[0] and "groups" not in runs[0]
    assert runs[1]["groups"] == again["groups"] and runs[1]["functions"] == again["functions"]
