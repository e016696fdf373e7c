"""A small client of the Fornace REST API (JSON over HTTP, standard library only).

Used by ``fornace demo`` and the client commands (``fornace env``,
``deploy``...): each call returns the decoded JSON body, or raises
:class:`ClientError` with the API's own error message (``{"error": {"code",
"title", "message"}}``; the whole error object is kept, for the fields some
errors add, such as the running job of a busy environment) or the reason the
server could not be reached.  Messages name no method or path (the commands
print them to people as they are); the call is kept beside them.  The token
is sent, never put in a message.

A client given a :class:`Login` (the OpenStack login of
``fornace.cli.client.keystonelogin``) asks it for the X-Auth-Token of each request
and sends through it, so that a long ``--follow`` always has a valid token;
without one, requests go out with ``urllib`` and the token given, if any.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Mapping, Protocol


class ClientError(Exception):
    """An API call failed: ``status`` is the HTTP status (None: no answer),
    ``error`` the API's error object (``{}`` when it sent none), ``call`` the
    request (``"POST /environments"``, for logs and debugging)."""

    def __init__(self, message: str, status: int | None = None,
                 error: Mapping[str, Any] | None = None, call: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error: dict[str, Any] = dict(error or {})
        self.call = call
        self.hint = hint     # what to check, when it is not the API (e.g. Keystone)

    @property
    def unreachable(self) -> bool:
        """No HTTP answer at all: nothing listens there, or the network failed."""
        return self.status is None


class Login(Protocol):
    """Where a client gets its X-Auth-Token and sends its requests (a Keystone
    session): ``headers`` may log in again (ClientError when refused), ``send``
    raises OSError when nothing answers, ``renew`` forgets a refused token."""

    def headers(self) -> dict[str, str]: ...

    def send(self, method: str, url: str, data: bytes | None, headers: dict[str, str],
             timeout: float) -> tuple[int, str, bytes]: ...

    def renew(self) -> bool: ...


class ApiClient:
    def __init__(self, url: str, token: str | None = None, tenant: str | None = None,
                 timeout: float = 30.0, login: Login | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.tenant = tenant
        self.timeout = timeout
        self.login = login

    def request(self, method: str, path: str, body: Any = None,
                headers: Mapping[str, str] | None = None) -> Any:
        """Call ``method path`` with a JSON body; the decoded answer (None if empty).
        A token of the login that the API refuses (revoked) is renewed once."""
        sent = {"Accept": "application/json", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        raw = self.exchange(method, path, data, sent)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ClientError(f"the answer of {self.url} is not JSON: is it the Fornace API?",
                              call=f"{method} {path}") from None

    def exchange(self, method: str, path: str, data: bytes | None = None,
                 headers: Mapping[str, str] | None = None) -> bytes:
        """Call ``method path`` with ``data`` as the body as it is (a package's
        archive; ``headers`` give its Content-Type); the answer's body as it is
        (a download).  Errors as :meth:`request` raises them."""
        sent = dict(headers or {})
        if self.token:
            sent["X-Auth-Token"] = self.token
        if self.tenant:
            sent["X-Tenant-Id"] = self.tenant
        call = f"{method} {path}"
        status, reason, raw = self._send(method, path, data, sent)
        if status == 401 and self.login is not None and self.login.renew():
            status, reason, raw = self._send(method, path, data, sent)
        if status >= 300:   # redirects are followed: one left is an error too
            error = _error_object(raw)
            message = error.get("message") or error.get("title") or reason or f"HTTP {status}"
            raise ClientError(str(message), status, error, call)
        return raw

    def _send(self, method: str, path: str, data: bytes | None,
              headers: dict[str, str]) -> tuple[int, str, bytes]:
        """(status, reason, body) of one request, error statuses included."""
        try:
            if self.login is not None:
                headers = {**headers, **self.login.headers()}
                return self.login.send(method, self.url + path, data, headers, self.timeout)
            return _urlopen(urllib.request.Request(self.url + path, data=data, method=method,
                                                   headers=headers), self.timeout)
        except OSError as exc:
            reason = getattr(exc, "reason", exc)
            raise ClientError(f"cannot reach {self.url}: {reason}",
                              call=f"{method} {path}") from None

    def get(self, path: str, session: str | None = None) -> Any:
        return self.request("GET", path, None, _session(session))

    def post(self, path: str, body: Any = None, session: str | None = None) -> Any:
        return self.request("POST", path, body, _session(session))

    def delete(self, path: str, session: str | None = None) -> Any:
        return self.request("DELETE", path, None, _session(session))


def _session(session: str | None) -> dict[str, str]:
    return {"X-Configuration-Session": session} if session else {}


def _urlopen(request: urllib.request.Request, timeout: float) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.reason or "", answer.read()
    except urllib.error.HTTPError as exc:
        try:
            raw = exc.read()
        except OSError:
            raw = b""
        return exc.code, str(exc.reason or ""), raw


def _error_object(raw: bytes) -> dict[str, Any]:
    """The ``error`` object of an error answer; ``{}`` when it has none (a proxy's page)."""
    try:
        error = json.loads(raw)["error"]
    except (ValueError, KeyError, TypeError):
        return {}
    return error if isinstance(error, dict) else {}
