"""The cost model's arithmetic (bench/cost_model.py): Lambda GB-seconds, request counts, the
OpenSearch domain sizing and the totals add up as stated."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cm() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cost_model", ROOT / "bench/cost_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["cost_model"] = module
    spec.loader.exec_module(module)
    return module


def _line(lines: list[Any], component: str) -> float:
    return float(next(ln.monthly for ln in lines if ln.component == component))


def test_lambda_and_gateway_lines_are_operations_times_unit_prices(cm: ModuleType) -> None:
    scenario = cm.Scenario(
        "one",
        users=2,
        active_share=0.5,
        records=1000,
        stored_gb=10.0,
        per_user_day={"search": 4},
        production=False,
    )
    seconds = {"search": {"search": 0.1}, "authorize": {"authorizer": 0.02}}
    memory = {"search": 1.0, "authorizer": 0.5}
    lines = cm.cost(scenario, seconds, memory_gb=memory)
    searches = 4 * 1 * cm.DAYS  # one active user
    gb_s = searches * 0.1 * 1.0 + searches * 0.02 * 0.5
    assert _line(lines, "Lambda compute") == pytest.approx(gb_s * cm.PRICES.lambda_gb_s)
    assert _line(lines, "Lambda requests") == pytest.approx(2 * searches * cm.PRICES.lambda_request)
    assert _line(lines, "API Gateway (REST)") == pytest.approx(searches * cm.PRICES.api_request)
    s3 = searches * 2 * cm.PRICES.s3_get + 10.0 * cm.PRICES.s3_gb_month
    assert _line(lines, "S3") == pytest.approx(s3)


def test_total_leaves_out_the_serverless_alternative(cm: ModuleType) -> None:
    lines = [cm.Line("a", 1.0, ""), cm.Line("b", 5.0, ""), cm.Line("(or) c", 100.0, "")]
    assert cm.total(lines) == 6.0
    assert cm.dominant(lines).component == "b"


def test_the_domain_holds_the_graphs_and_the_index(cm: ModuleType) -> None:
    prices = cm.Prices(
        instances=(("small", 16, 1.0, 100), ("big", 64, 3.0, 1000)),
        master_hour=0.5,
        ebs_gb_month=0.1,
    )
    records = 10_000_000
    d = cm.opensearch_domain(records, production=True, prices=prices)
    assert d.graph_gb == pytest.approx(records * cm.GRAPH_BYTES * 2 / 1e9)
    ram, hourly, max_ebs = {"small": (16, 1.0, 100), "big": (64, 3.0, 1000)}[d.instance]
    knn_gb = (ram - min(ram / 2, 32)) * 0.5
    assert d.nodes * knn_gb >= d.graph_gb and d.nodes * max_ebs >= d.storage_gb
    assert d.nodes >= 2
    assert d.monthly == pytest.approx(
        d.nodes * (hourly * cm.HOURS + d.ebs_gb_per_node * 0.1) + 3 * 0.5 * cm.HOURS
    )
    # and it is the cheaper of the two types
    other = "big" if d.instance == "small" else "small"
    o_ram, o_hourly, o_ebs = {"small": (16, 1.0, 100), "big": (64, 3.0, 1000)}[other]
    o_nodes = max(
        2,
        math.ceil(d.graph_gb / ((o_ram - min(o_ram / 2, 32)) * 0.5)),
        math.ceil(d.storage_gb / o_ebs),
    )
    o_monthly = (
        o_nodes * (o_hourly * cm.HOURS + max(10, math.ceil(d.storage_gb / o_nodes)) * 0.1)
        + 3 * 0.5 * cm.HOURS
    )
    assert d.monthly <= o_monthly


def test_serverless_ocus_grow_with_the_graphs(cm: ModuleType) -> None:
    small, _ = cm.opensearch_serverless(1000, production=True)
    assert small == 2.0  # the minimum with redundancy
    ocus, monthly = cm.opensearch_serverless(100_000_000, production=True)
    graph_gb = 100_000_000 * cm.GRAPH_BYTES / 1e9
    assert ocus == math.ceil(graph_gb / cm.OCU_GRAPH_GB * 2) / 2 * 2 + 1
    assert monthly > ocus * cm.PRICES.ocu_hour * cm.HOURS


def test_lambda_seconds_average_the_measured_calls(cm: ModuleType) -> None:
    def sample(fn: str, phase: str, label: str, ms: float) -> dict[str, object]:
        """One call, as the run's summary groups calls (bench/lambda_report.py `_groups`)."""
        return {"function": fn, "phase": phase, "label": label, "n": 1, "total_ms": ms}

    data = {
        "groups": [
            sample("search", "search/find", "POST /api/v1/search/find", 10),
            sample("search", "search/find", "POST /api/v1/search/search", 30),
            sample("semantic", "content/fs", "semantic.process", 1300),
            sample("memory", "sessions + memory", "session.extract_memories", 4000),
            sample("semantic", "semantic: one 2048 KB document", "semantic.process", 8000),
            sample("content", "semantic: one 2048 KB document", "POST /api/v1/resources", 600),
        ],
        "phases": [
            {"phase": "content/fs", "outcome": None},
            {"phase": "sessions + memory", "outcome": [["s1", "t1"], ["s2", "t2"]]},
            {"phase": "semantic: one 2048 KB document", "outcome": "done"},
        ],
        "scale": {"large_doc_kb": 2048},
    }
    secs = cm.lambda_seconds(data)
    assert secs["search"]["search"] == pytest.approx(0.02)
    assert secs["write"]["semantic"] == pytest.approx(1.3 / 13)
    assert secs["commit"]["memory"] == pytest.approx(4.0 / 2 + cm.LLM_SECONDS["commit"])
    assert secs["doc_mb"]["semantic"] == pytest.approx(8.0 / 2 + cm.LLM_SECONDS["doc_mb"])
    assert secs["doc_mb"]["content"] == pytest.approx(0.6 / 2)
