"""``fornace agent --config-file /etc/fornace/agent.conf``: run the unit agent.

Exit codes (what ``init.sh`` and a supervisor act on):

* 0 -- stopped by SIGTERM/SIGINT (after the running plan);
* 2 -- bad configuration;
* 3 (``EXIT_REBOOT``) -- a reboot: a plan asked for one (RebootOnCompletion, a
  script exiting 64 or 192) or a script reported its plan incomplete (128);
  start the agent again -- it then sends the answers kept for after the
  reboot and re-runs an incomplete plan first;
* 4 (``EXIT_POWEROFF``) -- a script asked for a power off (32, or 160:
  incomplete, re-run when the unit starts again);
* 5 (``EXIT_STOPPED``) -- a script asked the agent to stop (16): do not
  restart it.
"""
from __future__ import annotations

import argparse
import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

from fornace.agent import config
from fornace.agent.quickstart import QuickConf
from fornace.cli.signals import stop_on_signals

if TYPE_CHECKING:
    from oslo_config import cfg


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "agent", help="run the unit agent (execution plans from the broker)",
        description="Run the agent of a unit: take execution plans from the input queue, "
                    "one at a time, run them and answer on the results queue. Settings come "
                    "from --config-file ([DEFAULT] broker_url, input_queue, "
                    "result_routing_key; [agent] work_dir, command_timeout...).")
    parser.add_argument("--work-dir", help="override [agent] work_dir")


def run(conf: "cfg.ConfigOpts | QuickConf | Any") -> int:
    """Run the agent; ``conf`` is oslo.config's, or the quick one of
    :mod:`fornace.agent.quickstart` (same attributes, logging without oslo.log)."""
    command = conf.command
    settings = config.AgentSettings.from_conf(conf)
    if command.work_dir:
        settings = config.AgentSettings(**{**settings.__dict__, "work_dir": command.work_dir,
                                           "journal": conf.agent.journal or None})
    missing = [name for name, value in (("input_queue", settings.input_queue),
                                        ("result_routing_key", settings.result_queue))
               if not value]
    if missing:
        print(f"fornace agent: set {' and '.join(missing)} in the config file",
              file=sys.stderr)
        return 2
    # after the checks: a refused command leaves logging as it was
    if isinstance(conf, QuickConf):
        conf.setup_logging()
    else:
        from fornace.cli import daemonlogs

        daemonlogs.setup(conf)
    try:
        from fornace.agent.service import Agent

        agent = Agent(settings)
    except OSError as exc:
        print(f"fornace agent: cannot use work dir {settings.work_dir}: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    stop_on_signals(stop, lambda signum: logging.getLogger(__name__).info(
        "signal %d: stopping after the running plan", signum))
    return agent.serve(stop)
