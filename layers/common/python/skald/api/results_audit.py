"""The `result` of the console's audit listing (OpenViking's `GET /api/v1/console/audit`),
as the OpenAPI document describes it; results.py style, kept apart for length."""

from __future__ import annotations

from typing import Any

from skald.api.openapi import Wire


class AuditItem(Wire):
    """One record: OpenViking's request-audit fields, then Skald's. `status_code` is the
    HTTP status the action ended with (0 while `outcome` is pending)."""

    request_id: str | None
    account_id: str
    user_id: str
    method: str | None
    route: str | None
    api_type: str
    status_code: int
    duration_ms: float
    error_code: str | None
    error_message: str | None
    error_details: dict[str, Any] | None
    created_at: str  # ISO-8601 UTC
    id: str
    role: str
    key_id: str | None
    source_ip: str | None
    action: str
    target: str
    outcome: str  # pending | ok | error
    actor_account_id: str
    detail: dict[str, Any]


class AuditListing(Wire):
    total: int
    success_rate: float
    page: int
    page_size: int
    items: list[AuditItem]
