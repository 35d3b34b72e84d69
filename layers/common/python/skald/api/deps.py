"""Request-scoped dependencies: the container and the caller's identity."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from skald.container import Container
from skald.domain.errors import PermissionDenied
from skald.domain.identity import Identity
from skald.domain.uri import VikingURI, parse_uri
from skald.services.accounts import Credentials


def get_container(request: Request) -> Container:
    container: Container = request.app.state.container
    return container


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


def _resolve(request: Request) -> Identity:
    # An authorizer in front (API Gateway) may have resolved the identity already.
    pre: Identity | None = getattr(request.state, "identity", None)
    if pre is not None:
        return pre
    identity = get_container(request).accounts.resolve(credentials_of(request))
    request.state.identity = identity
    return identity


def any_identity(request: Request) -> Identity:
    """Admin, system and task routes: the root key is welcome."""
    return _resolve(request)


def data_identity(request: Request) -> Identity:
    """Tenant-scoped data routes: the root key of api_key mode is refused."""
    identity = _resolve(request)
    if identity.role == "root" and not identity.dev_mode:
        raise PermissionDenied(
            "ROOT API keys cannot access tenant-scoped data APIs in api_key mode; "
            "use a user key minted with /api/v1/admin/accounts")
    container = get_container(request)
    container.fs.ensure_preset(identity)
    return identity


DataIdentity = Annotated[Identity, Depends(data_identity)]
AnyIdentity = Annotated[Identity, Depends(any_identity)]
ContainerDep = Annotated[Container, Depends(get_container)]


def uri_of(identity: Identity, raw: str) -> VikingURI:
    return parse_uri(raw, user_id=identity.user_id, privileged=identity.privileged)
