"""The ``Host`` check of the whole API, REST and dashboard (an ASGI middleware).

A page of another site can point a DNS name of its own at this machine
(DNS rebinding): the browser then sends the API requests that are
"same-origin" for that page, whose ``Host`` header is the attacker's name.
So a request is served only when its ``Host`` names this API: one of
:data:`LOOPBACK` (always: a page can only send them from this machine's own
origins), the address it listens on when that is one address (not
``0.0.0.0``/``::``: then the operator lists the names clients use), and
``[api] allowed_hosts``.  Names are compared without case, without a port
and without a final dot; IP addresses as addresses (``[0::1]`` is ``::1``).
A pattern ``.example.com`` matches ``example.com`` and every name below it,
``*.example.com`` only the names below it, and ``*`` any host (no check).
Any other Host, a malformed one, several, or none is refused with the API's
JSON 400.  The paths a :class:`HostCheck` exempts (``/healthcheck``, which
load balancers ask by the API's address) are served whatever the Host.

Starlette's TrustedHostMiddleware is not used: its refusal is a plain-text
body, it compares the Host with its port cut at the first colon (an IPv6
literal ``[::1]:8082`` never matches) and has no place for these defaults.
"""
from __future__ import annotations

import ipaddress
import logging
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from fastapi.responses import JSONResponse

from fornace.api.errors import error_body
from fornace.common.errors import FornaceError

LOG = logging.getLogger(__name__)

OPTION = "[api] allowed_hosts"
LOOPBACK: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")
EVERY_ADDRESS = frozenset({"", "0.0.0.0", "::", "[::]", "*"})
_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_.-]{0,251}[a-z0-9_])?")
_PORT = re.compile(r"[0-9]{1,5}")


class HostsError(FornaceError, ValueError):
    """A configured host that is not a host name, an IP address or a pattern."""


def normalize_host(text: str) -> Optional[str]:
    """A host name (lower case, no final dot) or an IP address (its usual
    form, IPv6 without brackets); None when ``text`` is neither."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
        try:
            return str(ipaddress.IPv6Address(text))
        except ValueError:
            return None
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    name = text.lower()
    name = name[:-1] if name.endswith(".") else name
    return name if _NAME.fullmatch(name) and ".." not in name else None


def host_of(header: str) -> Optional[str]:
    """The host of a ``Host`` header value (``name``, ``name:port``, ``[v6]``,
    ``[v6]:port``), normalized; None when malformed."""
    header = header.strip()
    if header.startswith("["):
        end = header.find("]")
        if end < 0:
            return None
        host, rest = header[:end + 1], header[end + 1:]
    else:
        host, colon, port = header.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and _PORT.fullmatch(rest[1:])):
        return None
    return normalize_host(host) if host else None


@dataclass(frozen=True)
class AllowedHosts:
    """What a ``Host`` may name: exact hosts, domains (with or without the
    domain itself), or anything."""

    exact: frozenset[str]
    domains: tuple[tuple[str, bool], ...] = ()   # (domain, the domain itself too)
    anything: bool = False

    def allows(self, host: str) -> bool:
        if self.anything or host in self.exact:
            return True
        return any(host.endswith("." + domain) or (itself and host == domain)
                   for domain, itself in self.domains)


def allowed_hosts(configured: Iterable[str] = (), bind_host: Optional[str] = None
                  ) -> AllowedHosts:
    """The hosts a request may name: :data:`LOOPBACK`, ``bind_host`` unless it
    is every address, and ``configured`` (:class:`HostsError` naming a
    malformed entry)."""
    exact = {normalize_host(name) for name in LOOPBACK}
    if bind_host is not None and bind_host.strip() not in EVERY_ADDRESS:
        bound = normalize_host(bind_host)
        if bound is not None:
            exact.add(bound)
    domains: list[tuple[str, bool]] = []
    anything = False
    for value in configured:
        entry = value.strip()
        if entry == "*":
            anything = True
            continue
        if entry.startswith("*.") or entry.startswith("."):
            itself = entry.startswith(".")
            domain = normalize_host(entry[1:] if itself else entry[2:])
            if domain is not None and not _is_address(domain):
                domains.append((domain, itself))
                continue
        else:
            host = normalize_host(entry)
            if host is not None:
                exact.add(host)
                continue
        raise HostsError(f"{OPTION}: {value!r} is not a host name, an IP address or a "
                         f"pattern (.example.com, *.example.com, *); give names without "
                         f"a scheme or a port")
    return AllowedHosts(frozenset(h for h in exact if h), tuple(domains), anything)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def refusal(headers: list[tuple[bytes, bytes]], allowed: AllowedHosts) -> Optional[str]:
    """Why a request with these headers is refused; None when its Host is allowed."""
    sent = [value for name, value in headers if name.lower() == b"host"]
    if len(sent) != 1:
        return ("the request has no Host header" if not sent
                else "the request has more than one Host header")
    text = sent[0].decode("latin-1")
    host = host_of(text)
    if host is None:
        return f"malformed Host header {text[:80]!r}"
    if allowed.allows(host):
        return None
    return (f"the Host {host[:80]!r} is not a name of this API: add it to {OPTION} "
            f"if clients reach the API by it")


class HostCheck:
    """ASGI middleware: the Host check above, for every HTTP request but those
    for the ``exempt`` paths."""

    def __init__(self, app: Any, allowed: AllowedHosts, exempt: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = allowed
        self.exempt = frozenset(exempt)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (scope["type"] not in ("http", "websocket") or self.allowed.anything
                or scope.get("path") in self.exempt):
            await self.app(scope, receive, send)
            return
        why = refusal(scope.get("headers") or [], self.allowed)
        if why is None:
            await self.app(scope, receive, send)
            return
        LOG.info("%s %s refused (400): %s", scope.get("method", "WEBSOCKET"),
                 scope.get("path"), why)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        response = JSONResponse(error_body(400, "Bad Request", why), status_code=400)
        await response(scope, receive, send)
