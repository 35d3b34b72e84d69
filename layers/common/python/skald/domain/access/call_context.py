"""What the current call is about, for the code far below the edge that needs it.

Two context variables, set at the edges and read inside:

- `tenant`: the one account whose data this call may touch. The HTTP edge sets it to the
  caller's account once the identity is known (an admin route: the account it manages), a
  worker to its job's account. Tenant-scoped credentials and the isolation checks read it;
  None means control plane (setup, sweeps over every account).
- `request_meta`: the request id, the client's address, the method and route and when the
  request arrived, for the audit trail. The HTTP edge sets it per request; a job runs without
  one.

Context variables follow the call into worker threads that copy the context (Starlette's
thread pool does), and never leak between requests: each request runs in its own context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RequestMeta:
    request_id: str
    source_ip: str | None = None
    method: str | None = None
    path: str | None = None
    started: float | None = None  # time.monotonic() when the request arrived
    # The route template (`/api/v1/fs`), known only once the router has matched the request:
    # read when needed. None: the path is all there is.
    route_of: Callable[[], str | None] | None = field(default=None, compare=False, repr=False)

    @property
    def route(self) -> str | None:
        matched = self.route_of() if self.route_of is not None else None
        return matched or self.path


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
