"""A toy worker made of the three pieces a new worker takes (contributing.md, "add a worker"):
one catalogue entry, one job module and a three-line entry file. `toy_worker` adds them to a
temporary view of the catalogue (the module's WORKERS and what derives from them) and to the
job package's path, for the tests that check everything picks a new worker up."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from skald import catalog, jobs

NAME, KIND = "toy", "toy.poke"

# The catalogue entry.
ENTRY = catalog.Worker(
    NAME,
    "Toy",
    "Skald worker: toy queue (a test's)",
    uses={
        catalog.BLOBS: catalog.PUT,
        catalog.STATE: catalog.PROGRESS,
        catalog.QUEUE: catalog.USE,
        catalog.IDEMPOTENCY: catalog.USE,
    },
    jobs=(catalog.JobKind(KIND),),
)

# The job module, skald/jobs/toy.py: writes a marker blob named by the payload.
JOB_MODULE = '''"""Toy worker jobs."""

from typing import Any

from skald.jobs.registry import JobHandlers


def handle(services: Any, payload: dict[str, Any]) -> None:
    services.blobs.put(f"{payload['account']}/toy/{payload['mark']}", b"poked")


JOBS = {"toy.poke": JobHandlers(handle)}
'''

# The entry file, functions/workers/toy.py.
ENTRY_FILE = '''"""Toy worker: SQS toy queue -> poke."""
from skald.compose.entrypoints import lambda_handler
handler = lambda_handler("toy")
'''


@dataclass
class ToyWorker:
    functions_dir: Path  # a copy of functions/workers holding the toy's entry file

    def entry(self) -> ModuleType:
        """Imports the entry file as Lambda does (its folder the code root)."""
        spec = importlib.util.spec_from_file_location(
            "toy_entry", self.functions_dir / f"{NAME}.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def poked(services: Any, account: str, mark: str) -> bool:
    """Whether the toy job of `mark` ran (its marker blob exists)."""
    return services.blobs.head(f"{account}/toy/{mark}") is not None


@contextmanager
def toy_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ToyWorker]:
    workers = (*catalog.WORKERS, ENTRY)
    queues, kinds, functions = catalog.derive(workers)
    for name, value in (
        ("WORKERS", workers),
        ("QUEUES", queues),
        ("JOBS", kinds),
        ("FUNCTIONS", functions),
    ):
        monkeypatch.setattr(catalog, name, value)
    package = tmp_path / "toy_jobs"
    package.mkdir()
    (package / f"{NAME}.py").write_text(JOB_MODULE)
    monkeypatch.setattr(jobs, "__path__", [*jobs.__path__, str(package)])
    functions_dir = tmp_path / "functions" / "workers"
    functions_dir.mkdir(parents=True)
    (functions_dir / f"{NAME}.py").write_text(ENTRY_FILE)
    importlib.invalidate_caches()
    try:
        yield ToyWorker(functions_dir)
    finally:
        sys.modules.pop(f"skald.jobs.{NAME}", None)
