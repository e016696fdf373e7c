"""Cross-site protection of the JSON API (an ASGI middleware).

A page on any site the operator visits can make the browser send "simple"
requests to the API -- a form POST (``text/plain``, urlencoded, multipart) or
a ``fetch`` in ``no-cors`` mode -- with no preflight; in noauth mode nothing
else would stop them.  So, for the unsafe methods (POST, PUT, PATCH, DELETE):

* an ``Origin`` that is neither the API's own (``scheme://host[:port]`` of the
  request as the server sees it) nor one of ``[api] allowed_origins`` is
  refused (403); ``Origin: null`` (sandboxed frames, ``file:`` pages,
  redirects across sites) counts as foreign.  Without ``Origin`` a
  ``Referer`` of another origin is refused the same way.  Requests with
  neither header (the CLI, muranoclient, curl) pass.
* a body must be JSON (``application/json`` or ``application/*+json``), else
  415; the types an HTML form can send are refused even with an empty body,
  and a Content-Type that cannot be parsed is a 400.  Package uploads
  (``POST /packages``) take an archive instead (:data:`ARCHIVE_TYPES`: none of
  them is a type a form sends, so a browser preflights them too), and Murano's
  model edits (``PATCH .../model/``) a JSON patch of type
  ``application/env-model-json-patch`` (:data:`MODEL_PATCH_TYPES`: not a
  form's type either).

Every refusal is the API's JSON error body.  The dashboard (mounted under
``/dashboard``) posts HTML forms and has its own CSRF tokens: it is left to them.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Iterable, Optional
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse

from fornace.api.errors import ApiError, BadRequest, Forbidden, UnsupportedMediaType, error_body
from fornace.common.errors import FornaceError

LOG = logging.getLogger(__name__)

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FORM_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded",
                        "multipart/form-data"})
OPTION = "[api] allowed_origins"
EXEMPT_PREFIX = "/dashboard"   # HTML forms with their own CSRF tokens
_DEFAULT_PORTS = {"http": 80, "https": 443}
# the bodies of package uploads, besides JSON
ARCHIVE_TYPES = frozenset({"application/zip", "application/gzip", "application/x-gzip",
                           "application/x-tar", "application/octet-stream"})
ARCHIVE_PATHS = frozenset({"/packages", "/v1/packages"})
# the body of Murano's model edits (PATCH /environments/ID/model/), besides JSON
MODEL_PATCH_TYPES = frozenset({"application/env-model-json-patch"})
_MODEL_PATH = re.compile(r"(?:/v1)?/environments/[^/]+/model/?")
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_MEDIA_TYPE = re.compile(rf"\s*({_TOKEN})/({_TOKEN})\s*")
_PARAMETER = re.compile(rf"\s*{_TOKEN}=(?:{_TOKEN}|\"(?:[^\"\\]|\\.)*\")\s*")


class OriginError(FornaceError, ValueError):
    """A configured allowed origin that is not ``scheme://host[:port]``."""


# -- origins ---------------------------------------------------------------------------

def normalize_origin(url: str) -> Optional[str]:
    """``scheme://host[:port]`` of ``url`` in lower case, the default port left
    out; None when it has no such origin (``null``, ``about:blank``, garbage)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:   # an IPv6 address keeps its brackets
        host = f"[{host}]"
    return f"{scheme}://{host}" if port in (None, _DEFAULT_PORTS[scheme]) \
        else f"{scheme}://{host}:{port}"


def parse_allowed_origins(values: Iterable[str]) -> frozenset[str]:
    """The configured origins, normalized; :class:`OriginError` naming a malformed one."""
    origins = set()
    for value in values:
        origin = normalize_origin(value)
        if origin is None or urlsplit(value.strip()).path.strip("/"):
            raise OriginError(f"{OPTION}: {value!r} is not an origin "
                              f"(scheme://host[:port], e.g. https://ui.example.com)")
        origins.add(origin)
    return frozenset(origins)


def own_origin(scope: dict, headers: dict[bytes, bytes]) -> Optional[str]:
    """The API's origin as this request reached it: its scheme and Host header."""
    host = headers.get(b"host", b"").decode("latin-1").strip()
    return normalize_origin(f"{scope.get('scheme', 'http')}://{host}") if host else None


def check_origin(scope: dict, headers: dict[bytes, bytes], allowed: frozenset[str]) -> None:
    """Refuse (403) a request sent by a page of another origin."""
    if b"origin" in headers:
        header, sent = "Origin", headers[b"origin"].decode("latin-1").strip()
    elif b"referer" in headers:
        header, sent = "Referer", headers[b"referer"].decode("latin-1").strip()
    else:
        return   # not sent by a browser page: the CLI, muranoclient, curl
    origin = normalize_origin(sent)
    if origin is not None and (origin == own_origin(scope, headers) or origin in allowed):
        return
    shown = origin or (sent[:80] if header == "Origin" else "an opaque origin")
    raise Forbidden(f"cross-site request refused: the {header} {shown!r} is neither this "
                    f"API's own origin nor an allowed one; to let a web application on it "
                    f"use the API, add it to {OPTION}")


# -- bodies ----------------------------------------------------------------------------

def media_type(value: str) -> str:
    """The ``type/subtype`` of a Content-Type value, lower case; a 400 when malformed."""
    main, _, rest = value.partition(";")
    match = _MEDIA_TYPE.fullmatch(main)
    if match is None or not all(_PARAMETER.fullmatch(p) or not p.strip()
                                for p in _parameters(rest)):
        raise BadRequest(f"malformed Content-Type header {value[:80]!r}: expected "
                         f"type/subtype[; name=value], e.g. application/json")
    return f"{match.group(1)}/{match.group(2)}".lower()


def _parameters(text: str) -> list[str]:
    """``;``-separated parameters, a quoted value kept whole."""
    return re.findall(r'(?:[^;"]|"(?:[^"\\]|\\.)*"?)+', text) if text else []


def is_json(kind: str) -> bool:
    """``application/json`` or a ``+json`` type such as ``application/vnd.api+json``."""
    return kind == "application/json" or (kind.startswith("application/")
                                          and kind.endswith("+json"))


def check_body(headers: dict[bytes, bytes], raw_types: list[bytes],
               also: frozenset[str] = frozenset()) -> None:
    """Refuse a body that is not JSON nor of the types ``also`` names (415), or a
    Content-Type that is malformed (400)."""
    length = headers.get(b"content-length", b"").strip()
    empty = length == b"0" or (not length and b"transfer-encoding" not in headers)
    if not raw_types:
        if empty:
            return   # e.g. POST .../configure from the CLI
        raise UnsupportedMediaType("the request has a body but no Content-Type: send it "
                                   "as JSON (Content-Type: application/json)")
    if len(raw_types) > 1:
        raise BadRequest("more than one Content-Type header")
    value = raw_types[0].decode("latin-1")
    kind = media_type(value)
    if is_json(kind) or kind in also or (empty and kind not in FORM_TYPES):
        return
    raise UnsupportedMediaType(f"Content-Type {kind} is not accepted: the API takes JSON "
                               f"bodies (Content-Type: application/json)")


# -- the middleware ----------------------------------------------------------------------

def _exempt(scope: dict) -> bool:
    """Whether the request is the dashboard's (its path below the app's root)."""
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path == EXEMPT_PREFIX or path.startswith(EXEMPT_PREFIX + "/")


def _other_types(scope: dict) -> frozenset[str]:
    """The body types besides JSON the request's method and path take."""
    path = scope.get("path", "")
    if path in ARCHIVE_PATHS:
        return ARCHIVE_TYPES
    if scope.get("method") == "PATCH" and _MODEL_PATH.fullmatch(path):
        return MODEL_PATCH_TYPES
    return frozenset()


class CrossOrigin:
    """ASGI middleware: the checks above on the JSON API's unsafe requests."""

    def __init__(self, app: Any, allowed: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = parse_allowed_origins(allowed)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope.get("method") not in UNSAFE_METHODS
                or _exempt(scope)):
            await self.app(scope, receive, send)
            return
        raw = scope.get("headers") or []
        headers = dict(raw)
        try:
            check_origin(scope, headers, self.allowed)
            check_body(headers, [v for k, v in raw if k == b"content-type"],
                       _other_types(scope))
        except ApiError as refusal:
            LOG.log(logging.WARNING if refusal.status == 403 else logging.INFO,
                    "%s %s refused (%d): %s", scope.get("method"), scope.get("path"),
                    refusal.status, refusal.message)
            response = JSONResponse(error_body(refusal.status, refusal.title,
                                               refusal.message), status_code=refusal.status)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
