"""Request-scoped dependencies: the container and the caller's identity.

The dependencies are coroutines: FastAPI runs a plain-function dependency in the thread pool,
one hop per dependency per request, which cost more than the work they do (attribute reads,
header parsing). What may do I/O (an API key lookup, the first request's preset directories)
still goes to the thread pool, only when it is needed.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from skald.compose.composition import Composition
from skald.domain.access import call_context
from skald.domain.access.identity import Identity
from skald.domain.errors import PermissionDenied, Unauthenticated
from skald.domain.metering.subject import set_subject
from skald.domain.paths.uri import VikingURI, parse_uri
from skald.services.plans.book import begin_request
from skald.services.tenancy.accounts import Credentials


def get_container(request: Request) -> Composition:
    container: Composition = request.app.state.container
    return container


async def _container(request: Request) -> Composition:
    return get_container(request)


def credentials_of(request: Request) -> Credentials:
    headers = request.headers
    key = headers.get("x-api-key")
    if not key:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            key = auth[7:].strip()
    return Credentials(
        api_key=key or None,
        account_header=headers.get("x-openviking-account") or None,
        user_header=headers.get("x-openviking-user") or None,
        actor_peer_header=headers.get("x-openviking-actor-peer"),
    )


async def _resolve(request: Request) -> Identity:
    # An authorizer in front (API Gateway) may have resolved the identity already.
    pre: Identity | None = getattr(request.state, "identity", None)
    c = get_container(request)
    if pre is not None:
        identity = pre
    elif c.authorizer_only:  # fail closed: behind a gateway, no authorizer means no identity
        raise Unauthenticated("Missing or invalid API key")
    else:
        accounts = c.accounts
        creds = credentials_of(request)
        found = accounts.resolve_in_memory(creds)
        identity = found if found is not None else await run_in_threadpool(accounts.resolve, creds)
        request.state.identity = identity
    if not getattr(request.state, "rate_counted", False):
        request.state.rate_counted = True
        begin_request()  # the plan and quota caches: one store call at most in this request
        await _rate_limit(c, identity)
    return identity


async def _rate_limit(c: Composition, identity: Identity) -> None:
    """One token of the account's request rate per request (429 when none is left); the
    plan is read off the event loop only when its cached copy is stale."""
    limits = c.rate_limits
    if limits is None:
        return
    if limits.fresh(identity):
        limits.admit(identity)
    else:
        await run_in_threadpool(limits.admit, identity)


def _scope_to(identity: Identity) -> Identity:
    """The rest of the request may touch the caller's account only (the root key of
    api_key mode has none: its admin routes name the account they manage)."""
    if not (identity.role == "root" and not identity.dev_mode):
        call_context.tenant.set(identity.account_id)
        set_subject(identity.account_id, identity.user_id)
    return identity


async def any_identity(request: Request) -> Identity:
    """Admin, system and task routes: the root key is welcome."""
    return _scope_to(await _resolve(request))


async def data_identity(request: Request) -> Identity:
    """Tenant-scoped data routes: the root key of api_key mode is refused."""
    identity = _scope_to(await _resolve(request))
    await admit_data(get_container(request), identity)
    return identity


async def admit_data(container: Composition, identity: Identity) -> None:
    """What every tenant-scoped data call checks first (HTTP routes and MCP tools alike)."""
    if identity.role == "root" and not identity.dev_mode:
        raise PermissionDenied(
            "ROOT API keys cannot access tenant-scoped data APIs in api_key mode; "
            "use a user key minted with /api/v1/admin/accounts"
        )
    # Entry points that only read (the search function) leave presets to the writers.
    if container.ensure_presets and not container.fs.preset_ensured(identity):
        await run_in_threadpool(container.fs.ensure_preset, identity)


DataIdentity = Annotated[Identity, Depends(data_identity)]
AnyIdentity = Annotated[Identity, Depends(any_identity)]
ContainerDep = Annotated[Composition, Depends(_container)]


async def admit_work(request: Request, identity: DataIdentity) -> None:
    """Back-pressure on routes that queue background work: 429 before anything is done while
    the caller's account has its limit of jobs queued or running (its count is cached;
    reading it may do I/O)."""
    admission = get_container(request).admission
    account = identity.account_id
    if admission.fresh(account):
        admission.admit(account)
    else:
        await run_in_threadpool(admission.admit, account)
    await admit_storage(request)


async def admit_storage(request: Request) -> None:
    """QUOTA_EXCEEDED before anything is written when the request's body (what it may add)
    would take the caller's account past its plan's storage_bytes. Free when the plan has no
    such limit; else one cached read of the account's totals."""
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    try:
        adding = int(request.headers.get("content-length") or 0)
    except ValueError:
        adding = 0
    if adding <= 0:
        return
    # In the caller's scope: the route's own identity dependency may not have run yet.
    identity = _scope_to(await _resolve(request))
    if identity.role == "root" and not identity.dev_mode:
        return
    limits = get_container(request).usage_limits
    await run_in_threadpool(limits.check_storage, identity.account_id, adding)


Admitted = Depends(admit_work)
StorageAdmitted = Depends(admit_storage)


def uri_of(identity: Identity, raw: str) -> VikingURI:
    return parse_uri(raw, user_id=identity.user_id, privileged=identity.privileged)
