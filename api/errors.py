"""Errors of the API, each with its HTTP status.

They become JSON bodies ``{"error": {"code": N, "title": …, "message": …}}``
(the real muranoclient crashes on text/plain errors and non-dict bodies).  An
error may add fields of its own to that object for programs to read, such as
the running job of a busy environment's 409: ``"job": {"id": …, "kind": …}``.
"""
from __future__ import annotations

from typing import Any, Mapping


class ApiError(Exception):
    status = 500
    title = "Internal Server Error"

    def __init__(self, message: str, headers: Mapping[str, str] | None = None,
                 **details: Any) -> None:
        super().__init__(message)
        self.message = message
        # more fields of the error object (JSON values), e.g. job={"id": …, "kind": …}
        self.details: dict[str, Any] = details
        self.headers: dict[str, str] = dict(headers or {})   # of the HTTP answer


class BadRequest(ApiError):
    status, title = 400, "Bad Request"


class Unauthorized(ApiError):
    status, title = 401, "Unauthorized"


class Forbidden(ApiError):
    status, title = 403, "Forbidden"


class NotFound(ApiError):
    status, title = 404, "Not Found"


class Conflict(ApiError):
    """The environment's state does not allow it now (busy, never deployed, idle),
    or a name is taken."""

    status, title = 409, "Conflict"


class TooLarge(ApiError):
    status, title = 413, "Request Entity Too Large"


class UnsupportedMediaType(ApiError):
    """A request body of a type the API does not take (it takes JSON)."""

    status, title = 415, "Unsupported Media Type"


class Unavailable(ApiError):
    status, title = 503, "Service Unavailable"


def error_body(status: int, title: str, message: str,
               details: Mapping[str, Any] | None = None) -> dict:
    """The JSON body of an error; ``details`` are more fields of the error object
    (they never replace ``code``, ``title`` or ``message``)."""
    # every top-level value must be an object: muranoclient reads .get("message") of each
    return {"error": {**(details or {}), "code": status, "title": title, "message": message}}


_REFERENCE = {"type": "object", "required": ["id"],
              "properties": {"id": {"type": "string"}, "name": {"type": "string"}}}
_ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "title", "message"],
    "properties": {
        "code": {"type": "integer"}, "title": {"type": "string"},
        "message": {"type": "string"},
        # a 409 of a busy environment: the job that runs and the environment
        "job": {"type": "object", "required": ["id", "kind"],
                "properties": {"id": {"type": "string"}, "kind": {"type": "string"},
                               "started": {"type": "string"}}},
        "environment": _REFERENCE,
        # a 400 about one field of the body: its path (services[0].units[1].id)
        "field": {"type": "string"},
        # a 409 of a name that is taken: what has it
        "existing": _REFERENCE}}}}

# the errors every JSON route may answer, for the OpenAPI schema
ERROR_RESPONSES: dict[int | str, dict] = {
    error.status: {"description": error.title,
                   "content": {"application/json": {"schema": _ERROR_SCHEMA}}}
    for error in (BadRequest, Unauthorized, Forbidden, NotFound, Conflict, TooLarge)}
