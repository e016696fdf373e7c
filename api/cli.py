"""``fornace api``: serve the REST API (and, later, the dashboard) alone."""
from __future__ import annotations

import argparse
import logging

from oslo_config import cfg

from . import config


def register(conf: cfg.ConfigOpts) -> None:
    config.register(conf)


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "api", help="serve the REST API",
        description="Serve the REST API (Murano 0.2 compatible, at / and /v1) and consume "
                    "the results and reports of deployments.")
    parser.add_argument("--port", type=int, help="port to listen on (default [api] port, 8082)")
    parser.add_argument("--host", help="address to listen on (default [api] host)")
    parser.add_argument("--db", metavar="URL",
                        help="database URL (default [database] connection, else SQLite "
                             "in [api] state_dir)")


def run(conf: cfg.ConfigOpts) -> int:
    import uvicorn

    from .service import ApiService

    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    command = conf.command
    service = ApiService(conf, command.db)
    service.start_consumers()
    try:
        uvicorn.run(service.app, host=command.host or conf.api.host,
                    port=command.port or conf.api.port, log_level="info")
    finally:
        service.stop()
    return 0
