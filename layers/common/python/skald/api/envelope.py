"""The wire envelope (docs/api.md, "Envelope and errors") and the mapping of error codes to
HTTP statuses."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Generic, TypeVar

import pydantic_core
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from skald.domain.errors import SkaldError

log = logging.getLogger("skald.api")

STATUS_BY_CODE = {
    "OK": 200,
    "INVALID_ARGUMENT": 400,
    "INVALID_URI": 400,
    "UNSUPPORTED_URI": 400,
    "UNSUPPORTED_MODE": 400,
    "INVALID_FILTER": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "QUOTA_EXCEEDED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "CONFLICT": 409,
    "ABORTED": 409,
    "WRITE_CONFLICT": 409,
    "SESSION_EXPIRED": 410,
    "FAILED_PRECONDITION": 412,
    "PAYLOAD_TOO_LARGE": 413,
    "REQUEST_HEADER_FIELDS_TOO_LARGE": 431,
    "RESOURCE_EXHAUSTED": 429,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "MODEL_UNAVAILABLE": 503,
    "NO_VECTOR_DB": 503,
    "DEADLINE_EXCEEDED": 504,
}


T = TypeVar("T")


class Envelope(JSONResponse):
    """A success envelope, serialised where the route ran (the worker thread of a plain `def`
    route) by pydantic's serialiser, as FastAPI would (non-finite floats as null); FastAPI
    passes a returned Response through instead of validating and encoding the dict again on
    the event loop. Typed results arrive already rendered (bytes)."""

    def render(self, content: Any) -> bytes:
        if isinstance(content, bytes):
            return content
        return pydantic_core.to_json(content, inf_nan_mode="null")


class _Typed(BaseModel, Generic[T]):
    """Serialises a typed result by its declared type: a value of another type (a str where
    an int is declared, a dict where a dataclass is, a plain string for an enum) is an error,
    not a silent pass-through."""

    model_config = ConfigDict(ser_json_inf_nan="null")
    result: T


_MODELS: dict[Any, Any] = {}


def _typed(kind: Any) -> Any:
    model = _MODELS.get(kind)
    if model is None:
        model = _MODELS[kind] = _Typed[kind]
    return model


def typed_json(result: Any, kind: Any = None) -> bytes:
    """`{"result": ...}` of a typed result (a dataclass, or `kind` such as `list[Entry]`),
    checked against its type as it is serialised; ResultTypeError when it does not fit."""
    model = _typed(kind if kind is not None else type(result))
    try:
        data: bytes = model.__pydantic_serializer__.to_json(
            model.model_construct(result=result), warnings="error"
        )
    except pydantic_core.PydanticSerializationError as exc:
        raise ResultTypeError(f"{kind or type(result).__name__}: {exc}") from exc
    return data


def to_wire(result: Any) -> Any:
    """A typed result as the JSON values its route answers (dicts and lists); anything else
    as it is. For the MCP tools' structured content."""
    if not _is_typed(result):
        return result
    model = _typed(type(result))
    try:
        return model.__pydantic_serializer__.to_python(
            model.model_construct(result=result), mode="json", warnings="error"
        )["result"]
    except pydantic_core.PydanticSerializationError as exc:
        raise ResultTypeError(f"{type(result).__name__}: {exc}") from exc


class ResultTypeError(TypeError):
    """A service returned a result that does not fit the type its route declares."""


def _is_typed(result: Any) -> bool:
    return dataclasses.is_dataclass(result) and not isinstance(result, type)


def _render(result: Any, kind: Any, head: dict[str, Any]) -> bytes | dict[str, Any]:
    rest = {k: v for k, v in head.items() if k != "status"}
    if kind is None and not _is_typed(result):
        return {"status": "ok", "result": result, **rest}
    # {"status": "ok", "result": ..., <the other keys>}, in the order a dict renders them
    tail = pydantic_core.to_json(rest, inf_nan_mode="null")[1:-1] if rest else b""
    return (
        b'{"status":"ok",' + typed_json(result, kind)[1:-1] + (b"," + tail if tail else b"") + b"}"
    )


def ok(result: Any, *, full: bool = False, kind: Any = None, **extra: Any) -> Envelope:
    """`full` gives the Response-model shape with explicit nulls (ls, tree, stat, ...). A
    dataclass result (or one whose type `kind` names) is checked against its type."""
    head: dict[str, Any] = {"status": "ok"}
    if full:
        head.update({"error": None, "telemetry": None, "profile": None})
    head.update(extra)
    return Envelope(_render(result, kind, head))


def accepted(result: Any, *, kind: Any = None) -> Envelope:
    """202: the request is taken and its work goes on (a purge: `result` names its task)."""
    return Envelope(_render(result, kind, {"status": "ok"}), status_code=202)


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        err["details"] = details
    return {"status": "error", "result": None, "error": err, "telemetry": None, "profile": None}


def error_response(
    code: str, message: str, details: dict[str, Any] | None = None, status: int | None = None
) -> JSONResponse:
    return JSONResponse(
        error_body(code, message, details), status_code=status or STATUS_BY_CODE.get(code, 500)
    )


def _validation_details(exc: RequestValidationError) -> tuple[str, dict[str, Any]]:
    errors = []
    first = ""
    for e in exc.errors():
        loc = [str(p) for p in e.get("loc", ())]
        msg = str(e.get("msg", "invalid"))
        errors.append({"loc": loc, "message": msg, "type": e.get("type", "")})
        if not first:
            first = f"{'.'.join(loc)}: {msg}"
    return first or "Invalid request", {"validation_errors": errors}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(SkaldError)
    async def skald_error(_: Request, exc: SkaldError) -> JSONResponse:
        response = error_response(exc.code, exc.message, exc.details)
        retry_after = getattr(exc, "retry_after_s", None)
        if retry_after is not None:
            response.headers["Retry-After"] = str(retry_after)
        return response

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, details = _validation_details(exc)
        return error_response("INVALID_ARGUMENT", message, details)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            path = request.url.path
            if path.startswith("/api/"):
                # Only unmatched routes get here: say which one, so a client (the `ov` CLI
                # prints the message) shows what this server does not implement.
                return error_response(
                    "NOT_FOUND",
                    f"Not Found: {request.method} {path} is not implemented by this server",
                    {"method": request.method, "path": path},
                    404,
                )
            return error_response("NOT_FOUND", "Not Found", None, 404)
        if exc.status_code == 405:
            return error_response("UNKNOWN", "Method Not Allowed", None, 405)
        if exc.status_code == 413:
            return error_response("PAYLOAD_TOO_LARGE", str(exc.detail), None, 413)
        code = "INVALID_ARGUMENT" if exc.status_code == 400 else "UNKNOWN"
        return error_response(code, str(exc.detail), None, exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return error_response("INTERNAL", "Internal error", None, 500)
