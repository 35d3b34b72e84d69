"""The console: a static web page at /console that manages Skald through the public API, and
the console's data routes that only it has: the audit trail (`GET /api/v1/console/audit`) and
OpenViking's usage views (`/api/v1/console/dashboard/summary`, `/tokens`, `/context-commits`).

Everything served here is the same for every caller (HTML, JS, CSS; no data, no secrets), so
these routes need no identity: a browser cannot attach an API key header to a page load. The
page keeps the key in the tab's session storage and sends it on each /api/v1 call, which the
API authenticates as it would any client's.

The files are read once and kept in memory (a few hundred KB) with a content hash as ETag, so
a reload is answered with 304s.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from skald.api.deps import AnyIdentity, ContainerDep
from skald.api.envelope import Envelope, error_response, ok
from skald.api.openapi import Ok, errors
from skald.domain.access import call_context
from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidArgument
from skald.domain.ops.audit import split_multi
from skald.ports import IndexFilter
from skald.services.audit import AuditListing
from skald.services.metering.results import (
    ContextCommits,
    ContextCounts,
    DashboardSummary,
    TokenSeries,
)

router = APIRouter()

STATIC_ROOT = Path(__file__).resolve().parents[2] / "console"

# No inline script or style, nothing from another origin; images may be blob: URLs the page
# made from downloaded files. Trusted Types make any HTML sink refuse strings that did not go
# through the sanitiser's policy.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' blob: data:",
        "connect-src 'self'",
        "font-src 'self'",
        "manifest-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "object-src 'none'",
        "require-trusted-types-for 'script'",
        "trusted-types dompurify",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    # Revalidate every time (file names carry no version); the ETag makes that a 304.
    "Cache-Control": "no-cache",
}
TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
    ".json": "application/json",
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


@cache
def _asset(rel: str) -> Asset | None:
    """The file at `rel` below the console directory; None when absent or outside it."""
    path = (STATIC_ROOT / rel).resolve()
    if not path.is_relative_to(STATIC_ROOT) or not path.is_file():
        return None
    body = path.read_bytes()
    media = (
        TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    )
    return Asset(body, media, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def _serve(request: Request, rel: str) -> Response:
    asset = _asset(rel)
    if asset is None:
        return error_response("NOT_FOUND", "Not Found", None, 404)
    headers = {**SECURITY_HEADERS, "ETag": asset.etag}
    if asset.etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


# Relative redirects: behind a gateway that serves the API under a path prefix (a stage),
# the browser stays below that prefix.


@router.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    return RedirectResponse("console/", status_code=307)


@router.get("/console", include_in_schema=False)
def console_bare() -> RedirectResponse:
    # The page loads its assets by relative URL, so it lives at /console/.
    return RedirectResponse("console/", status_code=307)


@router.api_route("/console/", methods=["GET", "HEAD"], include_in_schema=False)
def console_index(request: Request) -> Response:
    return _serve(request, "index.html")


@router.api_route("/console/{path:path}", methods=["GET", "HEAD"], include_in_schema=False)
def console_file(path: str, request: Request) -> Response:
    if not path or path.startswith(".") or "/." in path:
        return error_response("NOT_FOUND", "Not Found", None, 404)
    return _serve(request, path)


# -- the audit trail ---------------------------------------------------------------------------

Multi = Annotated[list[str] | None, Query()]


@router.get("/api/v1/console/audit", response_model=Ok[AuditListing], responses=errors(400, 403))
def audit_logs(
    identity: AnyIdentity,
    c: ContainerDep,
    page: Annotated[int, Query(ge=1)] = 1,
    page_size: Annotated[int, Query(ge=1, le=100)] = 10,
    request_id: str | None = None,
    status: Multi = None,
    api_type: Multi = None,
    action: Multi = None,
    account_id: str | None = None,
    user_id: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> Envelope:
    """The audit trail, newest first (OpenViking's shape; `action`, `account_id`, `user_id`,
    `since` and `until` are Skald's filters). `status` and `api_type` and `action` may be
    repeated or comma-separated. Root sees every account, an account admin their own; a
    user is refused."""
    # Root reading one account's records reads that account's partitions, in its scope.
    scope = account_id if identity.role == "root" and account_id else call_context.current_tenant()
    with call_context.tenant_scope(scope):
        return ok(
            c.audit.listing(
                identity,
                page=page,
                page_size=page_size,
                request_id=request_id,
                statuses=split_multi(status),
                api_types=split_multi(api_type),
                actions=split_multi(action),
                account_id=account_id,
                user_id=user_id,
                since=since,
                until=until,
            )
        )


# -- usage (OpenViking's console views, from the meters) ----------------------------------------

_START = "first day (the viewer's), YYYY-MM-DD"
_END = "last day (the viewer's), YYYY-MM-DD"
_TZ = "IANA time zone of the viewer (Asia/Shanghai); default UTC"
_ACCOUNT = "root only: the account to read"


def _usage_scope(identity: Identity, account_id: str | None) -> tuple[str, str | None]:
    """(account, user filter): root reads the account it names, an admin their account, a
    user their own usage only."""
    if identity.role == "root" and (identity.dev_mode or identity.account_id.startswith("_")):
        if not account_id:
            if identity.dev_mode:
                return identity.account_id, None
            raise InvalidArgument("account_id is required with the root key")
        return account_id, None
    if identity.role == "admin":
        return identity.account_id, None
    return identity.account_id, identity.user_id


@router.get(
    "/api/v1/console/dashboard/summary",
    response_model=Ok[DashboardSummary],
    responses=errors(400, 403),
)
def dashboard_summary(
    identity: AnyIdentity,
    c: ContainerDep,
    timezone: Annotated[str | None, Query(description=_TZ)] = None,
    account_id: Annotated[str | None, Query(description=_ACCOUNT)] = None,
) -> Envelope:
    """The dashboard's cards: the account's context counts (index records by type), today's
    LLM tokens and retrievals (a user: their own)."""
    account, user = _usage_scope(identity, account_id)
    with call_context.tenant_scope(account):
        counts = {
            t: c.index.count(account, IndexFilter(context_types=[t]))
            for t in ("resource", "skill", "memory")
        }
        context = ContextCounts(
            counts["resource"], counts["skill"], counts["memory"], sum(counts.values())
        )
        return ok(c.metering.dashboard(account, user, timezone, context))


@router.get("/api/v1/console/tokens", response_model=Ok[TokenSeries], responses=errors(400, 403))
def token_series(
    identity: AnyIdentity,
    c: ContainerDep,
    start_date: Annotated[str, Query(description=_START)],
    end_date: Annotated[str, Query(description=_END)],
    bucket: Annotated[str, Query(pattern="^(day)$")] = "day",
    timezone: Annotated[str | None, Query(description=_TZ)] = None,
    account_id: Annotated[str | None, Query(description=_ACCOUNT)] = None,
) -> Envelope:
    """LLM tokens in and out, and texts embedded, per day of the range."""
    account, user = _usage_scope(identity, account_id)
    with call_context.tenant_scope(account):
        return ok(c.metering.token_series(account, user, start_date, end_date, timezone))


@router.get(
    "/api/v1/console/context-commits",
    response_model=Ok[ContextCommits],
    responses=errors(400, 403),
)
def context_commits(
    identity: AnyIdentity,
    c: ContainerDep,
    start_date: Annotated[str, Query(description=_START)],
    end_date: Annotated[str, Query(description=_END)],
    bucket: Annotated[str, Query(pattern="^(hour|4h)$")] = "hour",
    timezone: Annotated[str | None, Query(description=_TZ)] = None,
    account_id: Annotated[str | None, Query(description=_ACCOUNT)] = None,
) -> Envelope:
    """Context writes (resources and skills added, messages added, commits) per hour or
    4-hour bucket of each day of the range."""
    account, user = _usage_scope(identity, account_id)
    with call_context.tenant_scope(account):
        return ok(c.metering.context_commits(account, user, start_date, end_date, bucket, timezone))
