"""Request ids: ``x-openstack-request-id`` on every answer, and on every log
line of the request (an ASGI middleware around the whole app).

Each request gets an id of its own, ``req-`` and a UUID (oslo.context's
form), made current for the request's work
(:mod:`fornace.common.requestcontext`): oslo.log prints it on the lines
logged meanwhile, the tasks the request publishes carry it to the conductor
(contract 1.13), and the answer names it, whatever answers -- a route, an
error handler, the dashboard, the health check, a 404 or a 500.  A request
that sends ``X-Openstack-Request-Id`` of that same form (another service's
request on whose behalf it calls) keeps it as the global request id, as
oslo.middleware's RequestId middleware does; any other value is ignored, so
no caller writes into the logs.
"""
from __future__ import annotations

from typing import Any

from oslo_middleware.request_id import HTTP_RESP_HEADER_REQUEST_ID, INBOUND_HEADER

from fornace.common import requestcontext
from fornace.common.contract import is_request_id

RESPONSE_HEADER = HTTP_RESP_HEADER_REQUEST_ID.encode("latin-1")   # x-openstack-request-id
_INBOUND = INBOUND_HEADER.lower().encode("latin-1")


def global_request_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The caller's ``X-Openstack-Request-Id`` when it is one request id, else None."""
    sent = [value for name, value in headers if name.lower() == _INBOUND]
    if len(sent) != 1:
        return None
    text = sent[0].decode("latin-1").strip()
    return text if is_request_id(text) else None


class RequestIds:
    """ASGI middleware: a request context for each HTTP request, current while
    the app serves it, and its id in the answer's headers."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ctx = requestcontext.new_context(
            global_request_id=global_request_id(scope.get("headers") or []))
        header = (RESPONSE_HEADER, ctx.request_id.encode("latin-1"))

        async def send_with_id(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = [(name, value) for name, value in message.get("headers") or []
                           if name.lower() != RESPONSE_HEADER]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        with requestcontext.bound(ctx):
            await self.app(scope, receive, send_with_id)
