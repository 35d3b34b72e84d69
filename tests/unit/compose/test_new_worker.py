"""A new worker is one catalogue entry, one job module and a three-line entry file
(tests/support/toy_worker.py): with those alone its composition, its Lambda entry, the job
registry, the settings, `skald serve`'s worker pool and aws-local's drain all take it up. The
CDK stack's part is tests/infra/test_infra_new_worker.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from skald import catalog
from skald.compose.entrypoints import compose
from skald.compose.serve import ServeRuntime
from skald.config import Settings
from skald.jobs.registry import HANDLERS, run_job
from skald.ports import Job
from tests.support.lambda_events import Ctx, sqs_event
from tests.support.toy_worker import ENTRY_FILE, KIND, NAME, poked, toy_worker

ACCOUNT = "acme"


def _eventually(check: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_the_entry_file_is_three_lines() -> None:
    assert len(ENTRY_FILE.strip().splitlines()) == 3


def test_the_catalogue_derives_its_queue_function_and_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with toy_worker(tmp_path, monkeypatch):
        fn = catalog.function(NAME)
        assert (fn.kind, fn.queue, fn.handler, fn.construct_id) == (
            "worker",
            NAME,
            "toy.handler",
            "Toy",
        )
        assert catalog.queue(NAME).url_env == "SKALD_TOY_QUEUE_URL"
        assert catalog.job(KIND) in catalog.jobs_on(NAME)
        # every queue's observers and the purge's sweep take it up
        assert NAME in catalog.function("content").observes
        assert NAME in catalog.function("purge").sweeps
        assert "SKALD_TOY_QUEUE_URL" in catalog.environment(catalog.function("sessions"))
        monkeypatch.setenv("SKALD_TOY_QUEUE_URL", "https://sqs.test/toy")
        monkeypatch.setenv("SKALD_TOY_DLQ_URL", "https://sqs.test/toy-dlq")
        settings = Settings()
        assert settings.queue_urls[NAME] == "https://sqs.test/toy"
        assert settings.env_value("SKALD_TOY_DLQ_URL") == "https://sqs.test/toy-dlq"
        assert callable(HANDLERS[KIND])


def test_its_composition_and_lambda_entry_run_its_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with toy_worker(tmp_path, monkeypatch) as toy:
        settings = Settings(backend="local", data_dir=tmp_path / "data")
        services = compose(NAME, settings)
        assert services.adapters._ports == catalog.function(NAME).ports
        run_job(services, KIND, {"account": ACCOUNT, "mark": "direct"})
        assert poked(services, ACCOUNT, "direct")
        # the entry file, as Lambda imports it, with the function's settings
        monkeypatch.setenv("SKALD_DATA_DIR", str(tmp_path / "data"))
        monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
        handler = toy.entry().handler
        job = Job("j-1", NAME, KIND, {"account": ACCOUNT, "mark": "lambda"}, 1)
        assert handler(sqs_event(job), Ctx()) == {"batchItemFailures": []}
        assert poked(services, ACCOUNT, "lambda")
        services.close()


def test_skald_serve_drains_its_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with toy_worker(tmp_path, monkeypatch):
        runtime = ServeRuntime(Settings(backend="local", data_dir=tmp_path / "data"))
        try:
            runtime.start_workers()
            runtime.services.queue.enqueue(NAME, KIND, {"account": ACCOUNT, "mark": "pool"})
            assert _eventually(lambda: poked(runtime.services, ACCOUNT, "pool"))
        finally:
            runtime.stop()


def test_aws_local_creates_and_drains_its_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("moto")
    pytest.importorskip("osmem_server")
    with toy_worker(tmp_path, monkeypatch):
        runtime = ServeRuntime(
            Settings(backend="aws-local", data_dir=tmp_path / "data", embedding_provider="onnx")
        )
        try:
            assert NAME in runtime.settings.queue_urls
            runtime.start_workers()  # each queue drained by its worker's Lambda handler
            runtime.services.queue.enqueue(NAME, KIND, {"account": ACCOUNT, "mark": "sqs"})
            assert _eventually(lambda: poked(runtime.services, ACCOUNT, "sqs"))
        finally:
            runtime.stop()
