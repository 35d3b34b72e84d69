"""Health, readiness, system status, wait-for-queues, the observer, debug views of the index,
statistics and the storage/index consistency check."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from skald import __version__
from skald.api import results as r
from skald.api.deps import (
    AnyIdentity,
    ContainerDep,
    DataIdentity,
    credentials_of,
    get_container,
    uri_of,
)
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok, UriQuery, VikingUriIn, errors
from skald.domain.errors import SkaldError
from skald.domain.ops.consistency import Consistency
from skald.services.ingest.processing import QueueStatus, check_wait_timeout, drained
from skald.services.operations.results import (
    Component,
    DebugHealth,
    MemoryStats,
    ObserverReport,
    SessionStats,
    SystemStatus,
    VectorCount,
    VectorScroll,
)

router = APIRouter()


@router.get("/health", response_model=r.Health, response_model_exclude_none=True)
def health(request: Request) -> dict[str, Any]:
    c = get_container(request)
    body: dict[str, Any] = {"status": "ok", "healthy": True, "version": __version__}
    if c.authorizer_only:
        return body  # public behind the gateway: nothing about auth
    body["auth_mode"] = c.accounts.auth_mode
    creds = credentials_of(request)
    if creds.api_key or c.accounts.auth_mode == "dev":
        try:
            identity = c.accounts.resolve(creds)
        except SkaldError:
            return body
        body.update(account_id=identity.account_id, user_id=identity.user_id, role=identity.role)
    return body


@router.get(
    "/ready",
    response_model=r.Ready,
    responses={503: {"model": r.Ready, "description": "A check failed"}},
)
def ready(request: Request) -> JSONResponse:
    c = get_container(request)
    checks = c.readiness()
    healthy = all(v == "ok" for v in checks.values())
    if c.authorizer_only:  # public behind the gateway: no error text (endpoints, ARNs)
        checks = {name: "ok" if v == "ok" else "error" for name, v in checks.items()}
    return JSONResponse(
        {"status": "ready" if healthy else "not_ready", "checks": checks},
        status_code=200 if healthy else 503,
    )


@router.get("/api/v1/system/status", response_model=Ok[SystemStatus])
def system_status(identity: AnyIdentity) -> Envelope:
    return ok(SystemStatus(initialized=True, user=identity.user_id), full=True)


@router.post("/api/v1/system/wait", response_model=Ok[QueueStatus], responses=errors(504))
def system_wait(identity: AnyIdentity, c: ContainerDep, timeout: float | None = None) -> Envelope:
    limit = check_wait_timeout(c.settings.wait_timeout_s if timeout is None else timeout)
    return ok(drained(*c.wait_for_queues(limit, identity), limit), kind=QueueStatus)


Format = Literal["table", "json"]


@router.get("/api/v1/observer/system", response_model=Ok[ObserverReport])
def observer_system(identity: AnyIdentity, c: ContainerDep, format: Format = "table") -> Envelope:
    status = c.observer.system(identity, format)
    return ok(
        ObserverReport(
            is_healthy=status.is_healthy,
            errors=status.errors,
            components=status.components,
            initialized=True,
            healthy=status.is_healthy,
            version=__version__,
            auth_mode=c.auth_mode,
            backend=c.settings.backend,
            queues=c.scheduler.queue_status(identity),
            checks=c.readiness(),
            features={"remote_sources": True},
        )
    )


@router.get("/api/v1/observer/queue", response_model=Ok[Component])
def observer_queue(identity: AnyIdentity, c: ContainerDep, format: Format = "table") -> Envelope:
    return ok(c.observer.queue(identity, format))


@router.get("/api/v1/observer/vikingdb", response_model=Ok[Component])
def observer_vikingdb(identity: AnyIdentity, c: ContainerDep, format: Format = "table") -> Envelope:
    return ok(c.observer.vikingdb(identity, format))


@router.get("/api/v1/observer/models", response_model=Ok[Component])
def observer_models(identity: AnyIdentity, c: ContainerDep, format: Format = "table") -> Envelope:
    return ok(c.observer.models(format))


@router.get("/api/v1/observer/lock", response_model=Ok[Component])
def observer_lock(identity: AnyIdentity, c: ContainerDep, format: Format = "table") -> Envelope:
    return ok(c.observer.lock(format))


@router.get("/api/v1/observer/retrieval", response_model=Ok[Component])
def observer_retrieval(
    identity: AnyIdentity, c: ContainerDep, format: Format = "table"
) -> Envelope:
    return ok(c.observer.retrieval(format))


@router.get("/api/v1/observer/filesystem", response_model=Ok[Component])
def observer_filesystem(
    identity: AnyIdentity, c: ContainerDep, format: Format = "table"
) -> Envelope:
    return ok(c.observer.filesystem(format))


# -------------------------------------------------------------------- debug and statistics


@router.get("/api/v1/debug/health", response_model=Ok[DebugHealth])
def debug_health(identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(DebugHealth(c.observer.healthy()))


@router.get(
    "/api/v1/debug/vector/count", response_model=Ok[VectorCount], responses=errors(400, 403)
)
def debug_vector_count(
    identity: DataIdentity, c: ContainerDep, filter: str | None = None, uri: UriQuery | None = None
) -> Envelope:
    target = uri_of(identity, uri) if uri else None
    return ok(VectorCount(c.inspector.count(identity, target, filter)))


@router.get(
    "/api/v1/debug/vector/scroll", response_model=Ok[VectorScroll], responses=errors(400, 403)
)
def debug_vector_scroll(
    identity: DataIdentity,
    c: ContainerDep,
    limit: int = Query(100, ge=1, le=1000),
    cursor: str | None = None,
    uri: UriQuery | None = None,
) -> Envelope:
    target = uri_of(identity, uri) if uri else None
    return ok(c.inspector.scroll(identity, target, limit, cursor))


@router.get("/api/v1/stats/memories", response_model=Ok[MemoryStats], responses=errors(400))
def stats_memories(
    identity: DataIdentity, c: ContainerDep, category: str | None = None
) -> Envelope:
    return ok(c.stats.memories(identity, category))


@router.get(
    "/api/v1/stats/sessions/{session_id}", response_model=Ok[SessionStats], responses=errors(404)
)
def stats_session(session_id: str, identity: DataIdentity, c: ContainerDep) -> Envelope:
    return ok(c.stats.session(identity, session_id))


class ConsistencyBody(BaseModel):
    uri: VikingUriIn


@router.post(
    "/api/v1/system/consistency", response_model=Ok[Consistency], responses=errors(400, 403, 404)
)
async def system_consistency(
    body: ConsistencyBody, identity: DataIdentity, c: ContainerDep
) -> Envelope:
    uri = uri_of(identity, body.uri)
    return ok(await run_in_threadpool(c.consistency.check, identity, uri))
