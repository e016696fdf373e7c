"""``fornace api``: serve the REST API and the web dashboard alone (no conductor)."""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from oslo_config import cfg

from fornace.cli import argtypes, daemonlogs
from fornace.common.options import database_url

if TYPE_CHECKING:
    from fornace.common.packages.checks import RuleExplain


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "api", help="serve the REST API",
        description="Serve the REST API (Murano 0.2 compatible, at / and /v1) and consume "
                    "the results and reports of deployments.")
    parser.add_argument("--port", type=argtypes.port,
                        help="port to listen on (default [api] port, 8082)")
    parser.add_argument("--host", help="address to listen on (default [api] host)")
    parser.add_argument("--workers", type=argtypes.positive,
                        help="worker processes (default [api] workers, 1; more need an "
                             "amqp:// broker)")
    parser.add_argument("--db", metavar="URL",
                        help="database URL (default [database] connection, else SQLite "
                             "in [api] state_dir)")


WORKER_ENV = "FORNACE_API_WORKER"


def run(conf: cfg.ConfigOpts) -> int:
    import uvicorn

    from fornace.api.protocol import http_protocol
    from fornace.cli import db
    from fornace.common.broker import is_in_memory, warn_if_in_memory
    from fornace.common.brokerurl import check

    command = conf.command
    workers = command.workers or conf.api.workers
    if workers > 1 and is_in_memory(conf.broker.url):   # refused before logging is set up
        print("fornace api: --workers above 1 needs a broker shared by the processes: "
              "set [broker] url = filesystem:///folder or amqp://...", file=sys.stderr)
        return 2
    check(conf.broker.url)   # here: worker processes would each fail on their own
    daemonlogs.setup(conf)
    _listen_on(conf)
    options = {"host": conf.api.host, "port": command.port or conf.api.port,
               "log_level": "info", "access_log": conf.api.access_log,
               "log_config": None,   # uvicorn's lines go where oslo.log sends the others
               "http": http_protocol()}   # unparseable requests get the JSON 400 too
    if workers > 1:
        from fornace.common.db.engine import upgrade, wait_for_database
        from fornace.common.options import database_retries

        url = command.db or database_url(conf)
        try:
            wait_for_database(url, database_retries(conf))
            upgrade(url)  # once, before the workers start
        except db.startup_errors() as exc:
            return db.failed_start("api", url, exc)
        # each worker process builds its own service from the same options
        os.environ[WORKER_ENV] = json.dumps({"argv": sys.argv[1:], "db": command.db})
        uvicorn.run("fornace.cli.api:worker_app", factory=True, workers=workers, **options)
        return 0
    warn_if_in_memory(conf.broker.url, "deployments wait for a conductor in this process")
    try:
        service = _service(conf, command.db)
    except db.startup_errors() as exc:
        return db.failed_start("api", command.db or database_url(conf), exc)
    try:
        uvicorn.run(service.app, **options)
    finally:
        service.stop()
    return 0


def _listen_on(conf: cfg.ConfigOpts) -> None:
    """``--host`` replaces ``[api] host``: the address listened on is also a
    Host the API serves (:mod:`fornace.api.hosts`)."""
    if conf.command.host:
        conf.set_override("host", conf.command.host, group="api")


def _service(conf: cfg.ConfigOpts, db: str | None, migrate: bool = True):
    from fornace.api.server import ApiService

    service = ApiService(conf, db, migrate, package_check=package_check(conf),
                         workflow_check=workflow_check(conf), rule_explain=rule_explain())
    service.start_consumers()
    # What start-up made (modules, routes, SQLAlchemy's and pydantic's
    # structures: ~160,000 objects) lives as long as the process.  Left to the
    # collector, each full collection walked all of it while holding the GIL:
    # 0.25-0.3 s here, over a second on a busy machine -- the API's stalls
    # under load.  Frozen, a collection walks only what was made since.  Done
    # by the process that serves, not by ApiService: a test process makes
    # hundreds of services, and a full collection of its heap each time cost
    # minutes of the suite.
    gc.collect()
    gc.freeze()
    return service


def worker_app():
    """The app of one worker process of ``fornace api --workers N``."""
    from fornace.cli.main import build_conf, command_line

    spec = json.loads(os.environ[WORKER_ENV])
    conf = build_conf("api")
    conf(command_line(spec["argv"]), project="fornace", prog="fornace")
    daemonlogs.setup(conf)   # a new process: its own logging
    _listen_on(conf)
    return _service(conf, spec["db"], migrate=False).app


def package_check(conf: cfg.ConfigOpts) -> Callable[[Path], list[str]]:
    """How the API checks uploaded workflow packages: as ``fornace workflow check``
    does, with the ``[engine]`` limits, over the data folder (``data_dir``) -- the
    API may not import the conductor: the command that starts it hands it over."""
    from fornace.common.options import data_folder
    from fornace.conductor.config import engine_limits
    from fornace.conductor.packages.check import package_checker

    return package_checker(engine_limits(conf), data_folder(conf))


def workflow_check(conf: cfg.ConfigOpts) -> Callable[[Path, Path], list[str]]:
    """How the dashboard checks an environment's workflow files (one file, its
    catalog folder): as ``fornace workflow check`` does, with the ``[engine]``
    limits -- handed over as :func:`package_check` is."""
    from fornace.common.options import data_folder
    from fornace.conductor.config import engine_limits
    from fornace.conductor.packages.check import workflow_checker

    return workflow_checker(engine_limits(conf), data_folder(conf))


def rule_explain() -> RuleExplain:
    """How the API explains a rule on an environment's model (``fornace why``) --
    handed over as :func:`package_check` is."""
    from fornace.conductor.packages.why import rule_explainer

    return rule_explainer()
