"""Logging of the daemons (``fornace up``, ``api``, ``conductor``, ``agent``,
``demo``) with oslo.log, as OpenStack services log.

The options are oslo.log's own: ``--debug``, ``--log-file``, ``--log-dir``,
``--use-syslog``, ``--use-journal``, ``--use-json`` on the command line or in
``[DEFAULT]`` of the configuration file, plus its format and rotation
options.  Without any, lines go to standard error.  The lines of an API
request, and of the conductor's job it started, show its request id
(:mod:`fornace.common.requestcontext`) where oslo.log's
``logging_context_format_string`` puts it.  The client commands and
``fornace workflow`` do not load it (their start-up stays small).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oslo_config import cfg

# the sub-commands whose configuration has oslo.log's options
DAEMONS = ("up", "api", "conductor", "agent", "demo")
# libraries that are chatty at INFO, on top of oslo.log's own list
QUIET = ("alembic=WARN", "httpx=WARN", "uvicorn.error=INFO", "uvicorn.access=INFO",
         "kombu=WARN", "amqp=WARN", "keystoneauth=WARN")


def register(conf: cfg.ConfigOpts) -> None:
    """oslo.log's options (before the command line is parsed)."""
    from oslo_log import log

    log.register_options(conf)
    log.set_defaults(default_log_levels=log.get_default_log_levels() + list(QUIET))


def setup(conf: cfg.ConfigOpts, *, level: str | None = None) -> None:
    """Configure logging from ``conf``; ``level`` is the root level when not
    debugging (``WARNING`` for ``fornace demo``, whose output is its report)."""
    import logging

    from oslo_log import log

    from fornace.common import requestcontext

    log.setup(conf, "fornace")
    # each line of an API request or of a conductor's job names its request
    requestcontext.install(logging.getLogger().handlers)
    if level and not conf.debug:
        logging.getLogger().setLevel(level)
