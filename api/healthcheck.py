"""``/healthcheck``: oslo.middleware's health check, served by the API.

oslo.middleware's :class:`~oslo_middleware.healthcheck.Healthcheck` answers
as every OpenStack API's health check does: ``200 OK`` (``204`` to a HEAD)
while its backends report the service available, ``503`` with their reason
when one does not; plain text, JSON or HTML by the request's Accept; no
authentication; details (threads, garbage collector, the backends' own)
only with ``[healthcheck] detailed``.  Its options are oslo.middleware's
``[healthcheck]`` group, e.g. ``backends = disable_by_file`` and
``disable_by_file_path = /var/lib/fornace/healthcheck_disable``: while that
file exists the check answers ``503 DISABLED BY FILE``, so a load balancer
stops sending the API requests before it is stopped.

It is a WSGI application and the API an ASGI one: it runs through a2wsgi's
WSGI-to-ASGI bridge, in a thread of its own (what it does is quick and never
touches the database).  A request from outside ``allowed_source_ranges``
(when set) is left to the API, whose answer is a 404.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Optional

from a2wsgi import WSGIMiddleware
from oslo_config import cfg
from oslo_middleware.healthcheck import Healthcheck, opts

from fornace.api.errors import error_body

PATH = "/healthcheck"
GROUP = "healthcheck"
THREADS = 2   # the bridge's threads: a check takes microseconds


def register(conf: cfg.ConfigOpts) -> None:
    """oslo.middleware's ``[healthcheck]`` options and its ``disable_by_file``
    backend's, so that a configuration file's values are read and checked at
    start (the middleware registers the same ones itself)."""
    conf.register_opts(opts.HEALTHCHECK_OPTS, group=GROUP)
    conf.register_opts(opts.DISABLE_BY_FILE_OPTS, group=GROUP)


def _not_found(environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
    """What a request the check ignores (outside ``allowed_source_ranges``) gets:
    the API's 404, as for any path it does not serve."""
    body = json.dumps(error_body(404, "Not Found", "Not Found")).encode()
    start_response("404 Not Found", [("Content-Type", "application/json"),
                                     ("Content-Length", str(len(body)))])
    return [body]


def healthcheck_app(conf: Optional[cfg.ConfigOpts] = None) -> WSGIMiddleware:
    """The health check as an ASGI app, with the ``[healthcheck]`` options of
    ``conf`` (None: their defaults)."""
    if conf is None:
        conf = cfg.ConfigOpts()
        conf([], project="fornace", default_config_files=[], default_config_dirs=[])
    register(conf)
    return WSGIMiddleware(Healthcheck(_not_found, conf), workers=THREADS)


def detailed(conf: Optional[cfg.ConfigOpts]) -> bool:
    """Whether the check shows details (``[healthcheck] detailed``)."""
    if conf is None:
        return False
    register(conf)
    return bool(conf.healthcheck.detailed)
