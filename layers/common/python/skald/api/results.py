"""The `result` of the routes whose services still answer dicts, as the OpenAPI document
describes it (docs/api.md, "What Skald serves"). Typed results (dataclasses next to their
use case, e.g. skald.services.retrieval.results) are their own documentation and are checked
as they are serialised (skald.api.envelope); a route moves off this module when its service
returns one."""

from __future__ import annotations

from skald.api.openapi import Wire

# ------------------------------------------------------------------------ resources, tasks


# ------------------------------------------------------------------------ system, admin


class Health(Wire):
    status: str
    healthy: bool
    version: str
    # absent behind the API gateway: the public probe says nothing about auth there
    auth_mode: str | None = None


class Ready(Wire):
    status: str
    checks: dict[str, str]


class Deleted(Wire):
    account_id: str
    deleted: bool
