"""Errors of the API, each with its HTTP status.

They become JSON bodies ``{"error": {"code": N, "title": …, "message": …}}``
(the real muranoclient crashes on text/plain errors and non-dict bodies).
"""
from __future__ import annotations


class ApiError(Exception):
    status = 500
    title = "Internal Server Error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(ApiError):
    status, title = 400, "Bad Request"


class Unauthorized(ApiError):
    status, title = 401, "Unauthorized"


class Forbidden(ApiError):
    status, title = 403, "Forbidden"


class NotFound(ApiError):
    status, title = 404, "Not Found"


class Conflict(ApiError):
    """The environment's state does not allow it now (busy, never deployed, idle)."""

    status, title = 409, "Conflict"


class TooLarge(ApiError):
    status, title = 413, "Request Entity Too Large"


class UnsupportedMediaType(ApiError):
    """A request body of a type the API does not take (it takes JSON)."""

    status, title = 415, "Unsupported Media Type"


class Unavailable(ApiError):
    status, title = 503, "Service Unavailable"


def error_body(status: int, title: str, message: str) -> dict:
    # every top-level value must be an object: muranoclient reads .get("message") of each
    return {"error": {"code": status, "title": title, "message": message}}


_ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "title", "message"],
    "properties": {"code": {"type": "integer"}, "title": {"type": "string"},
                   "message": {"type": "string"}}}}}

# the errors every JSON route may answer, for the OpenAPI schema
ERROR_RESPONSES: dict[int | str, dict] = {
    error.status: {"description": error.title,
                   "content": {"application/json": {"schema": _ERROR_SCHEMA}}}
    for error in (BadRequest, Unauthorized, Forbidden, NotFound, Conflict, TooLarge)}
