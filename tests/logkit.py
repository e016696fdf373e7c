"""Log lines as the daemons write them: oslo.log's context-aware formatter on
a handler of the root logger, with the request context filter the daemons'
log set-up puts on theirs (:mod:`fornace.cli.daemonlogs`)."""
from __future__ import annotations

import contextlib
import io
import logging
from typing import Callable, Iterator

from oslo_config import cfg
from oslo_log import formatters, log

from fornace.common import requestcontext

# the loggers whose INFO lines the tests read (uvicorn's access log: one line
# per request, as ``fornace api`` writes with [api] access_log)
INFO_LOGGERS = ("fornace", "uvicorn.access")
# the loggers that must pass their lines up to the root logger (an earlier
# uvicorn of the process may have stopped them: its default logging
# configuration does, and access_log=False)
PROPAGATING = ("fornace", "uvicorn", "uvicorn.access")


@contextlib.contextmanager
def captured_lines() -> Iterator[Callable[[], list[str]]]:
    """For the block: every log line of the process at INFO and above of
    :data:`INFO_LOGGERS` (WARNING for the others), formatted with oslo.log's
    defaults; yields a function that returns the lines so far."""
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf([], project="fornace", default_config_files=[], default_config_dirs=[])
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatters.ContextFormatter(config=conf, project="fornace"))
    requestcontext.install([handler])
    root = logging.getLogger()
    kept = {name: (logging.getLogger(name).level, logging.getLogger(name).propagate)
            for name in {*INFO_LOGGERS, *PROPAGATING}}
    for name in INFO_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    for name in PROPAGATING:
        logging.getLogger(name).propagate = True
    root.addHandler(handler)
    try:
        yield lambda: stream.getvalue().splitlines()
    finally:
        root.removeHandler(handler)
        for name, (level, propagate) in kept.items():
            logging.getLogger(name).setLevel(level)
            logging.getLogger(name).propagate = propagate
