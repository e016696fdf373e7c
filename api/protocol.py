"""uvicorn's HTTP protocol, answering unparseable requests with the API's JSON error.

A request uvicorn's parser refuses -- e.g. a header value with a control
character (``Content-Type: application/json\\x01``) -- never reaches the app:
uvicorn answers it itself with a plain-text ``Invalid HTTP request received.``
The protocol here answers the same 400 with the JSON error body every other
400 has (muranoclient and the CLI read ``error.message``), and a request id
as every answer has.  Pass
:func:`http_protocol` as uvicorn's ``http`` setting.
"""
from __future__ import annotations

import asyncio
import json
from typing import Optional

from oslo_context.context import generate_request_id
from uvicorn.protocols.http.h11_impl import H11Protocol

from fornace.api.errors import error_body
from fornace.api.requestids import RESPONSE_HEADER

HttpToolsProtocol: Optional[type]
try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:   # uvicorn without httptools: it runs h11
    HttpToolsProtocol = None

PARSE_ERROR = ("the request could not be parsed as HTTP (e.g. a header value holding "
               "a control character)")


class JsonParseErrors:
    """Mixin for a uvicorn HTTP protocol: the 400 of a parse error as JSON."""

    transport: asyncio.Transport
    server_state: object

    def send_400_response(self, msg: str) -> None:
        body = json.dumps(error_body(400, "Bad Request", PARSE_ERROR)).encode()
        lines = [b"HTTP/1.1 400 Bad Request"]
        lines += [name + b": " + value
                  for name, value in getattr(self.server_state, "default_headers", [])]
        # no request reached the app: the id of this answer alone, as every answer has
        lines += [RESPONSE_HEADER + b": " + generate_request_id().encode("latin-1")]
        lines += [b"content-type: application/json",
                  b"content-length: " + str(len(body)).encode(), b"connection: close"]
        self.transport.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        self.transport.close()


class JsonH11Protocol(JsonParseErrors, H11Protocol):
    """uvicorn's h11 protocol with JSON parse-error answers."""


if HttpToolsProtocol is not None:
    class JsonHttpToolsProtocol(JsonParseErrors, HttpToolsProtocol):
        """uvicorn's httptools protocol with JSON parse-error answers."""


def http_protocol() -> type[asyncio.Protocol]:
    """The protocol uvicorn's ``auto`` picks (httptools when installed, else h11),
    with :class:`JsonParseErrors`."""
    return JsonH11Protocol if HttpToolsProtocol is None else JsonHttpToolsProtocol
