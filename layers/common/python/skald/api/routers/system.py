"""Health, readiness, system status, wait-for-queues and the observer summary."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from skald import __version__
from skald.api import results as r
from skald.api.deps import AnyIdentity, ContainerDep, credentials_of, get_container
from skald.api.envelope import Envelope, ok
from skald.api.openapi import Ok
from skald.domain.errors import SkaldError

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
        body.update(account_id=identity.account_id, user_id=identity.user_id,
                    role=identity.role)
    return body


@router.get("/ready", response_model=r.Ready, responses={
    503: {"model": r.Ready, "description": "A check failed"}})
def ready(request: Request) -> JSONResponse:
    c = get_container(request)
    checks = c.readiness()
    healthy = all(v == "ok" for v in checks.values())
    if c.authorizer_only:  # public behind the gateway: no error text (endpoints, ARNs)
        checks = {name: "ok" if v == "ok" else "error" for name, v in checks.items()}
    return JSONResponse({"status": "ready" if healthy else "not_ready", "checks": checks},
                        status_code=200 if healthy else 503)


@router.get("/api/v1/system/status", response_model=Ok[r.SystemStatus])
def system_status(identity: AnyIdentity) -> Envelope:
    return ok({"initialized": True, "user": identity.user_id}, full=True)


@router.post("/api/v1/system/wait",
             response_model=Ok[dict[str, r.QueueCounters | bool]])
def system_wait(identity: AnyIdentity, c: ContainerDep, timeout: float | None = None
                ) -> Envelope:
    return ok(c.wait_for_queues(timeout if timeout is not None else c.settings.wait_timeout_s,
                                identity))


@router.get("/api/v1/observer/system", response_model=Ok[r.Observer])
def observer_system(identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok({"initialized": True, "healthy": True, "version": __version__,
               "auth_mode": c.auth_mode, "backend": c.settings.backend,
               "queues": c.scheduler.queue_status(identity), "checks": c.readiness(),
               "features": {"remote_sources": True}})


@router.get("/api/v1/observer/queue", response_model=Ok[dict[str, r.QueueCounters]])
def observer_queue(identity: AnyIdentity, c: ContainerDep) -> Envelope:
    return ok(c.scheduler.queue_status(identity))
