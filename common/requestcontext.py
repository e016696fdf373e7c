"""The request a log line belongs to: oslo.context's request context, made
current for one block of work (an API request, a conductor's job).

oslo.log prints a record's request context (``logging_context_format_string``:
``[%(global_request_id)s %(request_id)s %(user_identity)s]``) when the record
carries one.  oslo.context keeps the current context per thread, which the
API cannot use: its event loop serves many requests at once in one thread,
and hands their database calls to other threads.  So the context is kept
in a context variable instead -- asyncio tasks and the API's store threads
each see their own request's, and a plain thread (a conductor's job) its
own -- and the daemons' log handlers put it on every record they handle
(:func:`install`).

Request ids are ``req-`` and a UUID, as oslo.context makes them; a caller's
``X-Openstack-Request-Id`` is only kept (as the global request id) when it
has that form (:func:`fornace.common.contract.is_request_id`), so no caller
puts text of their own into the logs.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Iterable, Iterator, Optional

from oslo_context import context as oslo_context

from fornace.common.contract import is_request_id

_current: contextvars.ContextVar[Optional["RequestContext"]] = contextvars.ContextVar(
    "fornace_request_context", default=None)


class RequestContext(oslo_context.RequestContext):
    """oslo.context's request context, never stored in its per-thread slot:
    :func:`bound` makes it current for one block only."""

    def update_store(self) -> None:
        """Nothing: oslo.context would keep it as its thread's context for good
        (its constructor does, when the thread has none), and the thread then
        serves other requests."""


def new_context(request_id: Optional[str] = None, global_request_id: Optional[str] = None,
                project_id: Optional[str] = None) -> RequestContext:
    """A context for a request (a new request id unless ``request_id`` is one);
    ids that are not request ids are left out."""
    return RequestContext(
        request_id=request_id if is_request_id(request_id) else None,
        global_request_id=global_request_id if is_request_id(global_request_id) else None,
        project_id=project_id, overwrite=False)


def current() -> Optional[RequestContext]:
    """The context of the request being served here, if any."""
    return _current.get()


@contextlib.contextmanager
def bound(ctx: Optional[RequestContext]) -> Iterator[Optional[RequestContext]]:
    """``ctx`` current for the block (None: no context), the previous one after."""
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


class ContextFilter(logging.Filter):
    """A handler's filter: each record it handles carries the current context
    for oslo.log's formatters (``record.context``), unless it names its own
    (``extra={"context": ...}``).  A handler's, not a record factory: a
    record made with the context already set would refuse that ``extra``."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _current.get()
        if ctx is not None and "context" not in record.__dict__:
            record.context = ctx
        return True


def install(handlers: Iterable[logging.Handler]) -> None:
    """Have ``handlers`` (e.g. the root logger's, once oslo.log set them up)
    print the current context of each line; once each."""
    for handler in handlers:
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
