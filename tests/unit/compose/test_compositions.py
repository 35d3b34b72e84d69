"""Each entry point builds only the adapters it uses.

Every catalogue function's Lambda handler is made over a recording factory (the local
adapters on one shared data dir) and invoked the way its trigger would, in a deploy's order:
setup, an admin call, the authorizer, a write, the semantic worker, a find, a session commit,
the memory worker, an idle auto-commit. What each one asked its factory for is checked
against the catalogue, and the calls' outcomes prove the functions still work together.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from skald import catalog
from skald.adapters.local.factory import LocalAdapterFactory
from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
from skald.adapters.local.sqlite.sessionstore import SqliteSessionStore
from skald.compose.adapters import PortNotWired
from skald.compose.entrypoints import compose, lambda_handler
from skald.config import Settings
from skald.ports import Job
from tests.support.lambda_events import Ctx, authorizer_event, rest_event, sqs_event

ROOT_KEY = "compose-root-key"
ROOT = {"account_id": "_root", "user_id": "root", "role": "root"}
ALICE = {"account_id": "acme", "user_id": "alice", "role": "user"}


class RecordingFactory(LocalAdapterFactory):
    """The local factory, noting every port asked of it (its own setup's included)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.asked: list[str] = []

    def build(self, port: str) -> Any:
        self.asked.append(port)
        return super().build(port)


@dataclass
class Run:
    factories: dict[str, RecordingFactory]
    cold: dict[str, list[str]]
    out: dict[str, Any] = field(default_factory=dict)

    def ports(self, name: str) -> set[str]:
        return set(self.factories[name].asked)


def _body(response: dict[str, Any]) -> Any:
    assert response["statusCode"] == 200, response
    return json.loads(response["body"])["result"]


def _lease(settings: Settings, queue: str) -> Job:
    jobs = SqliteJobQueue(settings.data_dir / "queue.db")
    try:
        leases = jobs.lease(queue, max_jobs=10)
        assert len(leases) == 1, leases
        return leases[0].job
    finally:
        jobs.close()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    mp = pytest.MonkeyPatch()
    mp.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    mp.delenv("SKALD_IDEMPOTENCY_TABLE", raising=False)
    settings = Settings(
        backend="local", data_dir=tmp_path_factory.mktemp("compose") / "data", root_api_key=ROOT_KEY
    )
    factories = {fn.name: RecordingFactory(settings) for fn in catalog.FUNCTIONS}
    handlers = {name: lambda_handler(name, factory=f) for name, f in factories.items()}
    r = Run(factories, {name: list(f.asked) for name, f in factories.items()})
    ctx = Ctx()
    try:
        r.out["setup"] = handlers["setup"]({}, ctx)
        created = _body(
            handlers["content"](
                rest_event(
                    "POST",
                    "/api/v1/admin/accounts",
                    body={"account_id": "acme", "admin_user_id": "alice"},
                    authorizer=ROOT,
                ),
                ctx,
            )
        )
        r.out["authorizer"] = handlers["authorizer"](authorizer_event(created["user_key"]), ctx)
        _body(
            handlers["content"](
                rest_event(
                    "POST",
                    "/api/v1/content/write",
                    authorizer=ALICE,
                    body={
                        "uri": "viking://resources/notes/tea.md",
                        "wait": False,
                        "content": "# Tea\n\nGreen tea is brewed at eighty degrees.\n",
                    },
                ),
                ctx,
            )
        )
        r.out["semantic"] = handlers["semantic"](
            sqs_event(_lease(settings, catalog.QUEUE_SEMANTIC)), ctx
        )
        r.out["search"] = _body(
            handlers["search"](
                rest_event(
                    "POST",
                    "/api/v1/search/find",
                    body={"query": "brewing green tea"},
                    authorizer=ALICE,
                ),
                ctx,
            )
        )
        sessions = handlers["sessions"]
        _body(
            sessions(
                rest_event(
                    "POST", "/api/v1/sessions", body={"session_id": "chat"}, authorizer=ALICE
                ),
                ctx,
            )
        )
        for sid in ("chat", "idle"):
            _body(
                sessions(
                    rest_event(
                        "POST",
                        f"/api/v1/sessions/{sid}/messages",
                        authorizer=ALICE,
                        body={"role": "user", "content": "I prefer green tea in the morning."},
                    ),
                    ctx,
                )
            )
        r.out["commit"] = _body(
            sessions(
                rest_event("POST", "/api/v1/sessions/chat/commit", body={}, authorizer=ALICE), ctx
            )
        )
        r.out["memory"] = handlers["memory"](sqs_event(_lease(settings, catalog.QUEUE_MEMORY)), ctx)
        store = SqliteSessionStore(settings.data_dir / "state.db")
        store.update_session("acme", "alice", "idle", idle_deadline=time.time() - 5)
        store.close()
        r.out["autocommit"] = handlers["autocommit"](
            {"account": "acme", "user": "alice", "session_id": "idle"}, ctx
        )
        yield r
    finally:
        for f in factories.values():
            f.close()
        mp.undo()


def test_making_a_handler_builds_nothing(run: Run) -> None:
    assert run.cold == {fn.name: [] for fn in catalog.FUNCTIONS}


@pytest.mark.parametrize("name", [fn.name for fn in catalog.FUNCTIONS])
def test_each_function_builds_only_catalogued_ports(run: Run, name: str) -> None:
    assert run.ports(name) <= catalog.function(name).ports, run.factories[name].asked


def test_the_authorizer_builds_the_state_store_only(run: Run) -> None:
    context = run.out["authorizer"]["context"]
    assert {k: context[k] for k in ALICE} == {**ALICE, "role": "admin"}  # the first user
    assert len(context["key_id"]) == 16 and len(context["generation"]) == 32
    assert run.factories["authorizer"].asked == [catalog.STATE]


def test_the_search_function_reads_without_queue_scheduler_or_index_setup(run: Run) -> None:
    hits = [h["uri"] for h in run.out["search"]["resources"]]
    assert "viking://resources/notes/tea.md" in hits
    built = run.ports("search")
    assert catalog.INDEX in built and catalog.EMBEDDER in built
    assert not built & {catalog.QUEUE, catalog.SCHEDULER, catalog.STATE}


def test_the_sessions_function_needs_no_index_or_models(run: Run) -> None:
    assert run.out["commit"]["task_id"]
    built = run.ports("sessions")
    assert {catalog.SESSIONS, catalog.QUEUE, catalog.SCHEDULER} <= built
    assert not built & {catalog.INDEX, catalog.EMBEDDER, catalog.LLM, catalog.RECALL}


def test_workers_build_what_their_jobs_use(run: Run) -> None:
    for name in ("semantic", "memory"):
        assert run.out[name] == {"batchItemFailures": []}
    assert run.out["autocommit"] == {"status": "ok", "session_id": "idle"}
    assert not run.ports("semantic") & {catalog.SESSIONS, catalog.SCHEDULER, catalog.RECALL}
    assert catalog.INDEX in run.ports("memory")  # extracted memories are indexed inline
    assert not run.ports("autocommit") & {catalog.INDEX, catalog.EMBEDDER, catalog.LLM}


def test_local_setup_creates_the_stores(run: Run) -> None:
    assert run.out["setup"]["backend"] == "local"
    assert run.ports("setup") == {catalog.STATE, catalog.SESSIONS, catalog.QUEUE, catalog.INDEX}


def test_a_port_outside_the_catalogue_fails_loudly(tmp_path: Path) -> None:
    services = compose(
        "search", factory=LocalAdapterFactory(Settings(backend="local", data_dir=tmp_path))
    )
    try:
        with pytest.raises(PortNotWired, match="search entry point does not use the queue"):
            services.sessions.queue.stats("semantic")  # built lazily, refused at first use
        assert services.adapters.built == ()
    finally:
        services.close()


def test_adapters_services_and_jobs_never_import_the_compositions() -> None:
    """Dependencies point inward: the compositions import adapters, services and jobs, never
    the other way round (the import circle the old container had)."""
    import ast

    package = Path(__file__).resolve().parents[3] / "layers/common/python/skald"
    offenders = []
    for layer in ("adapters", "services", "jobs", "domain"):
        for path in (package / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                offenders += [
                    f"{path.relative_to(package)}: {n}"
                    for n in names
                    if n.startswith(("skald.compose", "skald.api"))
                ]
    assert offenders == []
