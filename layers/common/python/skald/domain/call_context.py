"""What the current call is about, for the code far below the edge that needs it.

Two context variables, set at the edges and read inside:

- `tenant`: the one account whose data this call may touch. The HTTP edge sets it to the
  caller's account once the identity is known (an admin route: the account it manages), a
  worker to its job's account. Tenant-scoped credentials and the isolation checks read it;
  None means control plane (setup, sweeps over every account).
- `request_meta`: the request id and the client's address, for the audit trail. The HTTP
  edge sets it per request; a job runs without one.

Context variables follow the call into worker threads that copy the context (Starlette's
thread pool does), and never leak between requests: each request runs in its own context.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestMeta:
    request_id: str
    source_ip: str | None = None


tenant: ContextVar[str | None] = ContextVar("skald_tenant", default=None)
request_meta: ContextVar[RequestMeta | None] = ContextVar("skald_request_meta", default=None)


def current_tenant() -> str | None:
    return tenant.get()


def current_request() -> RequestMeta | None:
    return request_meta.get()


@contextmanager
def tenant_scope(account_id: str | None) -> Iterator[None]:
    """Runs the block as a call about `account_id` (None: control plane)."""
    token = tenant.set(account_id)
    try:
        yield
    finally:
        tenant.reset(token)
