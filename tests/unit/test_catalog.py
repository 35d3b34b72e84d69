"""The catalogue is one consistent table: what it names exists (handlers, routers, settings,
entry modules), every route of an HTTP function reaches that function, and it stays
importable without the product (infra reads it)."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest
from starlette.routing import Route

from skald import catalog
from skald.api.app import ALL_ROUTERS, create_app
from skald.compose.entrypoints import compose
from skald.config import Settings
from skald.jobs.registry import BATCH_HANDLERS, DEAD_HANDLERS, HANDLERS, worker_jobs
from skald.services.ingest import processing
from skald.services.sessions import service as sessions
from skald.sizes import SIZES

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "layers/common/python/skald/catalog.py"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    return imported | {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }


def test_the_catalogue_imports_nothing_but_the_standard_library() -> None:
    # and its own parts: the sizes, the resources with their access levels, the workers
    stdlib = {"__future__", "collections.abc", "dataclasses", "typing"}
    parts = {"skald.sizes", "skald.resource_access", "skald.workers"}
    assert _imports(CATALOG) <= stdlib | parts
    assert _imports(CATALOG.parent / "workers.py") <= stdlib | {"skald.resource_access"}
    assert _imports(CATALOG.parent / "resource_access.py") <= stdlib
    assert _imports(CATALOG.parent / "sizes.py") <= stdlib


def test_every_job_kind_has_a_queue_a_worker_and_handlers() -> None:
    for job in catalog.JOBS:
        queue = catalog.queue(job.queue)
        assert catalog.worker_of(queue.name).queue == queue.name
        assert callable(HANDLERS[job.kind])
    for queue in catalog.QUEUES:
        assert catalog.jobs_on(queue.name), f"nothing runs on the {queue.name} queue"
        if queue.default_kind:
            assert catalog.job(queue.default_kind) in catalog.jobs_on(queue.name)
    assert set(BATCH_HANDLERS) == {catalog.JOB_SEMANTIC}
    assert set(DEAD_HANDLERS) == {
        catalog.JOB_SEMANTIC,
        catalog.JOB_MEMORY,
        catalog.JOB_FETCH,
        catalog.JOB_IMPORT,
        catalog.JOB_PURGE,
    }


def test_a_worker_has_one_name() -> None:
    """Its queue, function, entry file, job module, construct and job kinds all say it."""
    for worker in catalog.WORKERS:
        name = worker.name
        fn = catalog.function(name)
        assert (fn.kind, fn.queue, fn.code, fn.handler, fn.construct_id) == (
            "worker",
            name,
            "workers",
            f"{name}.handler",
            name.capitalize(),
        )
        assert catalog.queue(name) is worker and worker.worker == name
        assert (ROOT / "functions/workers" / f"{name}.py").is_file()
        jobs = worker_jobs(name)
        assert importlib.import_module(f"skald.jobs.{name}").JOBS is jobs
        assert set(jobs) == {j.kind for j in worker.jobs} and worker.jobs
        for job in worker.jobs:
            assert job.kind.startswith(f"{name}.") and job.queue == name
        assert worker.url_env == f"SKALD_{name.upper()}_QUEUE_URL"


def test_the_kinds_of_an_earlier_release_name_current_kinds() -> None:
    kinds = {j.kind for j in catalog.JOBS}
    for old, new in catalog.KIND_ALIASES.items():
        assert old not in kinds and new in kinds
        assert catalog.job(old) == catalog.job(new)
        assert HANDLERS[old] is HANDLERS[new]


def test_the_services_use_the_catalogue_names() -> None:
    assert tuple(q.name for q in catalog.QUEUES) == processing.QUEUES
    assert processing.JOB_SEMANTIC == catalog.JOB_SEMANTIC
    assert (sessions.JOB_MEMORY, sessions.JOB_AUTO_COMMIT) == (
        catalog.JOB_MEMORY,
        catalog.JOB_AUTO_COMMIT,
    )


def test_queues_redrive_after_the_attempts_the_workers_count() -> None:
    assert {q.max_receive_count for q in catalog.QUEUES} == {Settings().job_max_attempts}


def test_every_variable_is_a_setting() -> None:
    fields = set(Settings.model_fields)
    queue_vars = {v for q in catalog.QUEUES for v in (q.url_env, q.dlq_url_env, q.arn_env) if v}
    for fn in catalog.FUNCTIONS:
        for name in catalog.environment(fn):
            if name in queue_vars:  # Settings.queue_urls, dlq_urls, queue_arns
                continue
            if name.startswith("SKALD_"):
                assert name.removeprefix("SKALD_").lower() in fields, (fn.name, name)
            else:
                assert name.startswith("POWERTOOLS_"), name


def test_settings_read_each_queues_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for q in catalog.QUEUES:
        monkeypatch.setenv(q.url_env, f"https://sqs.test/{q.name}")
        monkeypatch.setenv(q.dlq_url_env, f"https://sqs.test/{q.name}-dlq")
    monkeypatch.setenv("SKALD_AUTOCOMMIT_QUEUE_ARN", "arn:aws:sqs:::autocommit")
    s = Settings(queue_urls={"memory": "https://given"})
    assert s.queue_urls == {
        **{q.name: f"https://sqs.test/{q.name}" for q in catalog.QUEUES},
        "memory": "https://given",
    }
    assert s.dlq_urls == {q.name: f"https://sqs.test/{q.name}-dlq" for q in catalog.QUEUES}
    assert s.queue_arns == {"autocommit": "arn:aws:sqs:::autocommit"}
    assert s.env_value("SKALD_FETCH_DLQ_URL") == "https://sqs.test/fetch-dlq"
    assert s.queue_variables()["SKALD_MEMORY_QUEUE_URL"] == "https://given"


def test_functions_name_real_entry_modules() -> None:
    for fn in catalog.FUNCTIONS:
        module, _, attribute = fn.handler.partition(".")
        source = (ROOT / "functions" / fn.code / f"{module}.py").read_text()
        assert re.search(rf"^{attribute} = lambda_handler\(\"{fn.name}\"\)$", source, re.M), fn.name
        assert len(source.splitlines()) < 60
        assert fn.ports <= set(catalog.PORTS)
        assert set(fn.uses) <= set(catalog.LEVELS), fn.name


def test_every_resource_is_used_at_a_level_it_knows() -> None:
    assert set(catalog.LEVELS) == set(catalog.RESOURCE_ENV)
    for fn in catalog.FUNCTIONS:
        for resource, level in fn.uses.items():
            assert level in catalog.LEVELS[resource], (fn.name, resource, level)
        for name in (*fn.sends, *fn.observes, *([fn.queue] if fn.queue else [])):
            catalog.queue(name)  # raises for an unknown queue


def test_http_functions_mount_existing_routers_once() -> None:
    routers = [r for fn in catalog.functions("http") for r in fn.routers]
    assert sorted(routers) == sorted(ALL_ROUTERS) and len(set(routers)) == len(routers)
    for name in routers:
        if name == "mcp":  # an endpoint, not a router: skald.api.mcp
            assert importlib.import_module("skald.api.mcp.endpoint").McpEndpoint is not None
            continue
        assert importlib.import_module(f"skald.api.routers.{name}").router is not None


@pytest.mark.parametrize("fn", catalog.functions("http"), ids=lambda fn: fn.name)
def test_every_route_of_a_function_reaches_it(fn: catalog.Function, tmp_path: Path) -> None:
    app = create_app(compose(fn.name, Settings(backend="local", data_dir=tmp_path)), fn.routers)
    docs = {app.docs_url, app.openapi_url, app.swagger_ui_oauth2_redirect_url}
    # API routes, and plain endpoints such as /mcp that are not in the OpenAPI document
    paths = set(app.openapi()["paths"]) | {
        r.path for r in app.routes if isinstance(r, Route) and r.path not in docs
    }
    assert paths
    for path in paths:
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        owner = catalog.route_owner(concrete)
        assert owner is fn, f"{path} of {fn.name} goes to {owner and owner.name}"


def test_route_owner_matches_like_api_gateway() -> None:
    def owner(path: str) -> str | None:
        fn = catalog.route_owner(path)
        return fn.name if fn else None

    owners = {
        p: owner(p)
        for p in (
            "/health",
            "/api/v1/search/find",
            "/api/v1/search",
            "/api/v1/sessions",
            "/api/v1/sessions/s1/commit",
            "/api/v1/fs/ls",
            "/api/v1",
            "/elsewhere",
        )
    }
    assert owners == {
        "/health": "content",
        "/api/v1/search/find": "search",
        "/api/v1/search": "content",
        "/api/v1/sessions": "sessions",
        "/api/v1/sessions/s1/commit": "sessions",
        "/api/v1/fs/ls": "content",
        "/api/v1": None,
        "/elsewhere": None,
    }


def test_a_workers_visibility_timeout_is_six_times_its_timeout() -> None:
    for queue in catalog.QUEUES:
        assert catalog.visibility_timeout_s(queue) == 6 * catalog.worker_of(queue.name).timeout_s


# bench/lambda_sizing.py's measurements: the main run and its variants (corpora, vector widths),
# one summary each (the raw runs stay out of the repository).
SIZING_RUNS = ROOT / "bench/lambda_sizing-summary.json"


def _measured_peaks_mb() -> dict[str, float]:
    """Each invoked function's peak RSS over every kept run, but for the functions a run
    marks superseded (changed since it ran; each says why)."""
    peaks: dict[str, float] = {}
    invoked: set[str] = set()
    for run in json.loads(SIZING_RUNS.read_text())["runs"]:
        gone = run.get("superseded") or {}
        assert all(isinstance(why, str) and why for why in gone.values()), run["run"]
        for row in run["functions"]:
            name = row["function"]
            if name in gone:
                continue
            peaks[name] = max(peaks.get(name, 0.0), row["peak_kb"] / 1024)
            if row["invocations"]:
                invoked.add(name)
    return {name: mb for name, mb in peaks.items() if name in invoked}


def test_every_function_is_sized_from_a_measurement() -> None:
    peaks = _measured_peaks_mb()
    assert set(SIZES) == {fn.name for fn in catalog.FUNCTIONS}
    for fn in catalog.FUNCTIONS:
        assert fn.name in peaks, f"{fn.name} has no measurement in {SIZING_RUNS.name}"
        assert fn.memory_mb >= peaks[fn.name] * 1.3, (fn.name, fn.memory_mb, peaks[fn.name])
        assert fn.memory_mb % 64 == 0 and 128 <= fn.memory_mb <= 10240, fn.name
        assert f"peak {peaks[fn.name]:.0f} MB" in fn.sizing, fn.sizing


def test_http_functions_end_before_api_gateway_does() -> None:
    for fn in (*catalog.functions("http"), *catalog.functions("authorizer")):
        assert 1 <= fn.timeout_s <= 29, (fn.name, fn.timeout_s)
    for fn in catalog.FUNCTIONS:
        assert 1 <= fn.timeout_s <= 900, (fn.name, fn.timeout_s)  # Lambda's own limit
