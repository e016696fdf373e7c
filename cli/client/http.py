"""A small client of the Fornace REST API (JSON over HTTP, standard library only).

Used by ``fornace demo`` and the client commands (``fornace env``,
``deploy``...): each call returns the decoded JSON body, or raises
:class:`ClientError` with the API's own error message (``{"error": {"code",
"title", "message"}}``; the whole error object is kept, for the fields some
errors add, such as the running job of a busy environment) or the reason the
server could not be reached.  Messages name no method or path (the commands
print them to people as they are); the call is kept beside them.  The token
is sent, never put in a message.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Mapping


class ClientError(Exception):
    """An API call failed: ``status`` is the HTTP status (None: no answer),
    ``error`` the API's error object (``{}`` when it sent none), ``call`` the
    request (``"POST /environments"``, for logs and debugging)."""

    def __init__(self, message: str, status: int | None = None,
                 error: Mapping[str, Any] | None = None, call: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error: dict[str, Any] = dict(error or {})
        self.call = call

    @property
    def unreachable(self) -> bool:
        """No HTTP answer at all: nothing listens there, or the network failed."""
        return self.status is None


class ApiClient:
    def __init__(self, url: str, token: str | None = None, tenant: str | None = None,
                 timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.tenant = tenant
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None,
                headers: Mapping[str, str] | None = None) -> Any:
        """Call ``method path`` with a JSON body; the decoded answer (None if empty)."""
        sent = {"Accept": "application/json", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        if self.token:
            sent["X-Auth-Token"] = self.token
        if self.tenant:
            sent["X-Tenant-Id"] = self.tenant
        call = urllib.request.Request(self.url + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(call, timeout=self.timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            error = _error_object(exc)
            message = (error.get("message") or error.get("title") or exc.reason
                       or f"HTTP {exc.code}")
            raise ClientError(str(message), exc.code, error, f"{method} {path}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ClientError(f"cannot reach {self.url}: {reason}",
                              call=f"{method} {path}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ClientError(f"the answer of {self.url} is not JSON: is it the Fornace API?",
                              call=f"{method} {path}") from None

    def get(self, path: str, session: str | None = None) -> Any:
        return self.request("GET", path, None, _session(session))

    def post(self, path: str, body: Any = None, session: str | None = None) -> Any:
        return self.request("POST", path, body, _session(session))

    def delete(self, path: str, session: str | None = None) -> Any:
        return self.request("DELETE", path, None, _session(session))


def _session(session: str | None) -> dict[str, str]:
    return {"X-Configuration-Session": session} if session else {}


def _error_object(exc: urllib.error.HTTPError) -> dict[str, Any]:
    """The ``error`` object of an error answer; ``{}`` when it has none (a proxy's page)."""
    try:
        error = json.loads(exc.read())["error"]
    except (ValueError, KeyError, TypeError, OSError):
        return {}
    return error if isinstance(error, dict) else {}
