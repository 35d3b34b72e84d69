"""The bodies of `/health` and `/ready`, the two routes outside the envelope, as the OpenAPI
document describes them. Every envelope route's `result` is a typed result (a dataclass next to
its use case, e.g. skald.services.retrieval.results), its own documentation, checked as it is
serialised (skald.api.envelope)."""

from __future__ import annotations

from skald.api.openapi import Wire


class Health(Wire):
    status: str
    healthy: bool
    version: str
    # absent behind the API gateway: the public probe says nothing about auth there
    auth_mode: str | None = None


class Ready(Wire):
    status: str
    checks: dict[str, str]
