"""What the OpenAPI document says beyond the routes' signatures: the envelopes, the error
statuses every route can answer, and the `viking://` URI format.

Routes declare their success model (`response_model=Ok[...]`) and their own error statuses
(`responses=errors(404, 409)`); `install_openapi` adds what holds for every route (400, 413,
431, 500; 401 and 403 where an identity is needed, 429 where work is queued) and drops
FastAPI's 422, which this API answers as 400. The models document the wire; routes still
return the envelope they build themselves, unvalidated on the hot path. The schemathesis run
of the test suite checks that the server keeps to this document.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Generic, Literal, TypeVar

from fastapi import FastAPI, Query
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, WithJsonSchema

from skald.domain.wire import WireUri

T = TypeVar("T")

_SCOPES = "resources|user|agent|system"
# A URI as a client may send it: also `~` (the caller's space), the `session` alias and
# path variables like `{calendar:today}`. What the pattern lets through may still be refused
# (400 INVALID_URI: `..`, percent-encoded separators, control characters, unknown variables).
URI_IN_PATTERN = rf"^viking://(?:(?:{_SCOPES}|session|~)(?:/[^/]+)*/?)?$"
# `content/read` and `fs/stat` also take the 32-hex id of an index record.
URI_OR_ID_PATTERN = rf"^(?:viking://(?:(?:{_SCOPES}|session|~)(?:/[^/]+)*/?)?|[0-9a-f]{{32}})$"

VikingUri = WireUri
VikingUriIn = Annotated[
    str, WithJsonSchema({"type": "string", "format": "viking-uri", "pattern": URI_IN_PATTERN})
]
# Query parameters: documented, not validated by the pattern, so that a bad URI still gets
# the precise INVALID_URI of the URI parser.
UriQuery = Annotated[
    str, Query(json_schema_extra={"format": "viking-uri", "pattern": URI_IN_PATTERN})
]
UriOrIdQuery = Annotated[
    str, Query(json_schema_extra={"format": "viking-uri", "pattern": URI_OR_ID_PATTERN})
]


class Wire(BaseModel):
    """A documented JSON object; fields may be added over time, so others are allowed."""

    model_config = ConfigDict(extra="allow")


class Ok(Wire, Generic[T]):
    """The success envelope (docs/api.md, "Envelope and errors"); `error`, `telemetry` and
    `profile` are explicit nulls on some routes and absent on others."""

    status: Literal["ok"]
    result: T
    error: None = None
    telemetry: Any = None
    profile: Any = None


class ErrorInfo(Wire):
    code: str
    message: str
    details: dict[str, Any] | None = None


class ErrorEnvelope(Wire):
    status: Literal["error"]
    result: None = None
    error: ErrorInfo
    telemetry: Any = None
    profile: Any = None


DESCRIPTIONS = {
    400: "Invalid argument, URI or filter (INVALID_ARGUMENT, INVALID_URI, INVALID_FILTER)",
    401: "Missing or invalid API key (UNAUTHENTICATED)",
    403: "The key may not do this (PERMISSION_DENIED)",
    404: "Not found (NOT_FOUND)",
    409: "Exists already or changed concurrently (ALREADY_EXISTS, CONFLICT)",
    412: "A precondition does not hold (FAILED_PRECONDITION)",
    413: "Body or content above the configured limit (PAYLOAD_TOO_LARGE)",
    429: "Too much background work queued: retry after `Retry-After` seconds (RESOURCE_EXHAUSTED)",
    431: "Request head above the configured size or header count (REQUEST_HEADER_FIELDS_TOO_LARGE)",
    500: "Unexpected error (INTERNAL)",
    503: "A dependency is unavailable (UNAVAILABLE, MODEL_UNAVAILABLE)",
    504: "Waiting for the background work timed out (DEADLINE_EXCEEDED)",
}
_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` of a route: these error statuses, each with the error envelope."""
    return {s: {"model": ErrorEnvelope, "description": DESCRIPTIONS[s]} for s in statuses}


def _calls(route: APIRoute) -> set[str]:
    names: set[str] = set()
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        if dep.call is not None:
            names.add(getattr(dep.call, "__name__", ""))
        stack.extend(dep.dependencies)
    return names


def _common_statuses(route: APIRoute) -> list[int]:
    calls = _calls(route)
    statuses = [413, 431, 500]
    if calls & {"data_identity", "any_identity"}:
        statuses += [400, 401, 403]
    elif route.dependant.query_params or route.dependant.body_params:
        statuses.append(400)
    if "admit_work" in calls:
        statuses.append(429)
    return statuses


def _api_routes(routes: Any, prefix: str = "") -> Iterator[tuple[str, APIRoute]]:
    """(path, route) of every API route, also inside included routers (which newer FastAPI
    keeps as references to the router rather than copies of its routes)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield prefix + route.path_format, route
        elif hasattr(route, "original_router"):
            context = getattr(route, "include_context", None)
            yield from _api_routes(
                route.original_router.routes, prefix + str(getattr(context, "prefix", "") or "")
            )


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = get_openapi(
            title=app.title,
            version=app.version,
            routes=app.routes,
            description="OpenViking-compatible /api/v1 of Skald. Every error "
            "is the error envelope.",
        )
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for name, schema in (
            ErrorEnvelope.model_json_schema(ref_template="#/components/schemas/{model}")
            .get("$defs", {})
            .items()
        ):
            schemas.setdefault(name, schema)
        schemas.setdefault(
            "ErrorEnvelope",
            {
                k: v
                for k, v in ErrorEnvelope.model_json_schema(
                    ref_template="#/components/schemas/{model}"
                ).items()
                if k != "$defs"
            },
        )
        ref = {"$ref": "#/components/schemas/ErrorEnvelope"}
        for path, route in _api_routes(app.routes):
            for method in route.methods or ():
                op = doc["paths"].get(path, {}).get(method.lower())
                if op is None:
                    continue
                responses = op.setdefault("responses", {})
                responses.pop("422", None)
                for status in _common_statuses(route):
                    responses.setdefault(
                        str(status),
                        {
                            "description": DESCRIPTIONS[status],
                            "content": {"application/json": {"schema": ref}},
                        },
                    )
                if "429" in responses:
                    responses["429"]["headers"] = _RETRY_AFTER
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
