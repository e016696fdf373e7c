"""``fornace conductor``: the deployment daemon."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from oslo_config import cfg

from fornace.cli import argtypes, daemonlogs
from fornace.cli.signals import stop_on_signals, wait_for_stop
from fornace.conductor.executors import AGENTS, STACKS

if TYPE_CHECKING:
    from fornace.conductor.daemon import ConductorSettings


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "conductor", help="run the deployment daemon",
        description="Consume deployment tasks, run their workflows (Heat stacks first, "
                    "then agent plans), send reports as they happen and the final model.")
    parser.add_argument("--max-environments", type=argtypes.positive,
                        help="deployments at the same time (default [conductor] "
                             "max_environments)")
    parser.add_argument("--stacks", choices=list(STACKS),
                        help="stack backend (default [conductor] stacks)")
    parser.add_argument("--agents", choices=list(AGENTS),
                        help="agent backend: amqp (real agents) or simulator (every plan "
                             "answered ok, no VM) (default [conductor] agents)")


def run(conf: cfg.ConfigOpts) -> int:
    from fornace.cli import db
    from fornace.common.broker import warn_if_in_memory
    from fornace.common.brokerurl import check
    from fornace.common.db.urls import checked
    from fornace.conductor.daemon import Conductor
    from fornace.conductor.executors import stacks_factory

    check(conf.broker.url)   # before logging is set up: on the terminal, naming the part
    daemonlogs.setup(conf)
    command = conf.command
    settings = conductor_settings(conf, command.max_environments,
                                  agents=command.agents or conf.conductor.agents)
    warn_if_in_memory(settings.broker_url, "this conductor gets no task from an API process")
    try:   # a URL that cannot work is refused now; a database out of reach is
        # waited for job by job (its locks), the conductor consuming meanwhile
        checked(settings.database_url).get_dialect()
    except db.startup_errors() as exc:
        return db.failed_start("conductor", settings.database_url, exc)
    stacks = command.stacks or conf.conductor.stacks
    if stacks == "simulator" and settings.agents != "simulator":
        logging.getLogger(__name__).warning(
            "stacks are simulated: no VM boots, so no agent listens unless one is started "
            "by hand; plans fail %s s after they are sent ([engine] agent_boot_timeout) -- "
            "add --agents simulator to have every plan answered", conf.engine.agent_boot_timeout)
    daemon = Conductor(settings, stacks_factory(stacks, conf))
    daemon.start()
    stopped = daemon.stop
    stop_on_signals(stopped)
    logging.getLogger(__name__).info("conductor: %d consumer(s) on %s",
                                     settings.max_environments, daemon.consumers[0].broker.display)
    wait_for_stop(stopped)
    daemon.shutdown()
    return 0


def conductor_settings(conf: cfg.ConfigOpts, max_environments: int | None, agents: str,
                       db: str | None = None) -> ConductorSettings:
    """The conductor's settings from the configuration, for ``fornace conductor``
    and the conductor of ``fornace up``: ``max_environments`` and ``db`` (the
    database of the job locks) as given, else ``[conductor] max_environments``
    and ``[database] connection``."""
    from fornace.common.options import database_pool, database_url
    from fornace.conductor.config import engine_settings, trust_deleter
    from fornace.conductor.daemon import ConductorSettings

    return ConductorSettings(
        broker_url=conf.broker.url, broker_queue_type=conf.broker.queue_type,
        data_dir=Path(conf.data_dir),
        max_environments=max_environments or conf.conductor.max_environments,
        lock_stale_after=conf.conductor.lock_stale_after, lock_wait=conf.conductor.lock_wait,
        engine=engine_settings(conf), database_url=db or database_url(conf),
        database_pool=database_pool(conf), history_days=conf.database.history_days,
        agents=agents, delete_trust=trust_deleter(conf),
        trace=conf.conductor.trace, trace_bytes=conf.conductor.trace_bytes)
