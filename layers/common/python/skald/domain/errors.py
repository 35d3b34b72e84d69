"""Product errors: a code from docs/api.md ("Envelope and errors"), a message, and details for
the client.

The HTTP edge maps `code` to a status; nothing inside knows about HTTP.
"""

from __future__ import annotations

from typing import Any


class SkaldError(Exception):
    code = "INTERNAL"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidArgument(SkaldError):
    code = "INVALID_ARGUMENT"


class InvalidURI(SkaldError):
    code = "INVALID_URI"

    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(f"Invalid URI '{uri}': {reason}", {"uri": uri, "reason": reason})


class InvalidFilter(SkaldError):
    code = "INVALID_FILTER"


class NotFound(SkaldError):
    code = "NOT_FOUND"

    def __init__(self, message: str, resource: str = "", kind: str = "file") -> None:
        super().__init__(message, {"resource": resource, "type": kind})


class AlreadyExists(SkaldError):
    code = "ALREADY_EXISTS"


class Conflict(SkaldError):
    code = "CONFLICT"


class Unauthenticated(SkaldError):
    code = "UNAUTHENTICATED"


class PermissionDenied(SkaldError):
    code = "PERMISSION_DENIED"


class FailedPrecondition(SkaldError):
    code = "FAILED_PRECONDITION"


class PayloadTooLarge(SkaldError):
    """Answered with HTTP 413; the configured limit is in `details`."""

    code = "PAYLOAD_TOO_LARGE"

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} is {size} bytes, above the limit of {limit} bytes",
            {"size": size, "limit": limit},
        )


class ResourceExhausted(SkaldError):
    """Answered with HTTP 429; `retry_after_s` becomes the Retry-After header."""

    code = "RESOURCE_EXHAUSTED"

    def __init__(
        self,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message, details)
        self.retry_after_s = retry_after_s


class QuotaExceeded(SkaldError):
    """A limit of the account's plan would be passed (HTTP 403): the details name the limit,
    its value and the current use, and the request wrote nothing."""

    code = "QUOTA_EXCEEDED"

    def __init__(
        self,
        limit: str,
        value: float | int,
        current: float | int,
        *,
        requested: float | int | None = None,
        message: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        details: dict[str, Any] = {"limit": limit, "value": value, "current": current}
        if requested is not None:
            details["requested"] = requested
        details.update(extra or {})
        super().__init__(
            message
            or f"The account's plan allows {limit} = {value}; current use is {current}"
            + (f" and this request needs {requested} more" if requested is not None else ""),
            details,
        )


class Unavailable(SkaldError):
    code = "UNAVAILABLE"


class Unimplemented(SkaldError):
    code = "UNIMPLEMENTED"


class DeadlineExceeded(SkaldError):
    code = "DEADLINE_EXCEEDED"


class ProcessingError(SkaldError):
    code = "PROCESSING_ERROR"
