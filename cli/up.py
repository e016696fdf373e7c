"""``fornace up``: the API, the conductor and the local cloud in one command."""
from __future__ import annotations

import argparse
import threading

from oslo_config import cfg

from fornace.cli import argtypes, daemonlogs
from fornace.cli.signals import stop_on_signals, wait_for_stop
from fornace.common.options import database_url


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "up", help="run Fornace on this machine (API, conductor, local cloud)",
        description="Start the REST API, the conductor and the local cloud (units are "
                    "sandboxed processes of this machine running a real agent) in one "
                    "command, on SQLite and a folder broker unless [database] connection "
                    "and [broker] url say otherwise. Ctrl-C stops it; local instances keep "
                    "running until their environment is deleted.")
    parser.add_argument("--host", help="address of the API (default [api] host)")
    parser.add_argument("--port", type=argtypes.port,
                        help="port of the API (default [api] port, 8082)")
    parser.add_argument("--db", metavar="URL", help="database URL (default [database] "
                                                    "connection, else SQLite in [api] state_dir)")
    parser.add_argument("--max-environments", type=argtypes.positive,
                        help="deployments at the same time (default [conductor] "
                             "max_environments)")


def run(conf: cfg.ConfigOpts) -> int:
    daemonlogs.setup(conf)
    command = conf.command
    from fornace.cli import db
    from fornace.cli.onebox import OneBox
    from fornace.common.brokerurl import masked

    try:
        box = OneBox(conf, command.host, command.port, command.db, command.max_environments)
    except db.startup_errors() as exc:
        return db.failed_start("up", command.db or database_url(conf), exc)
    box.start()
    stopped = threading.Event()
    stop_on_signals(stopped)
    resumed = len(box.cloud.stack_names())
    print(f"Fornace is up on this machine.\n"
          f"  dashboard    {box.url}/dashboard/  (open it in a browser)\n"
          f"  API          {box.url}/  (also at {box.url}/v1; for fornace, "
          f"python-muranoclient, curl)\n"
          f"  broker       {masked(box.broker_url)}\n"
          f"  local cloud  {box.cloud.state_dir} ({resumed} stack(s))\n"
          f"  workflows    {conf.data_dir}\n"
          f"Press Ctrl-C to stop.", flush=True)
    wait_for_stop(stopped)
    print("stopping the API and the conductor (local instances keep running)", flush=True)
    box.stop()
    return 0
