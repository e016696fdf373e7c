"""The ``fornace`` command: one entry point, one sub-command per job.

Options and config files are parsed by oslo.config; each sub-command module
contributes its argparse parsers and a ``run(conf) -> exit code`` function.

Exit codes: 0 success, 1 the job failed (problems found, deployment ended
with an error), 2 bad usage or unreadable input.
"""
from __future__ import annotations

import importlib
import sys
from types import ModuleType

from oslo_config import cfg

from . import config
from .errors import FornaceError

# sub-command -> module with add_parsers(subparsers), run(conf) and maybe register(conf)
COMMANDS = {
    "workflow": "conductor.workflow_cli",
    "api": "api.cli",
    "agent": "agent.cli",
    "conductor": "conductor.daemon_cli",
    "up": "conductor.up_cli",
    "demo": "conductor.demo_cli",
}


def _module(name: str) -> ModuleType:
    return importlib.import_module(COMMANDS[name])


def _add_command_parsers(subparsers) -> None:
    for name in COMMANDS:
        _module(name).add_parsers(subparsers)


def build_conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    config.register(conf)
    for name in COMMANDS:
        register = getattr(_module(name), "register", None)
        if register is not None:
            register(conf)
    conf.register_cli_opt(cfg.SubCommandOpt(
        "command", title="commands", handler=_add_command_parsers,
        help="run 'fornace COMMAND --help' for the options of each"))
    return conf


GLOBAL_OPTIONS = ("--config-file", "--config-dir")


def hoist_global_options(args: list[str]) -> list[str]:
    """Move ``--config-file F`` (and ``--config-dir``) given after the sub-command
    to the front, where oslo.config expects them: ``fornace api --config-file F``
    then means what its user meant."""
    front: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        name = arg.split("=", 1)[0]
        if name in GLOBAL_OPTIONS:
            if "=" in arg:
                front.append(arg)
            else:
                front.extend(args[index:index + 2])
                index += 1
        else:
            rest.append(arg)
        index += 1
    return front + rest


def main(argv: list[str] | None = None) -> int:
    conf = build_conf()
    args = hoist_global_options(sys.argv[1:] if argv is None else argv)
    try:
        conf(args, project="fornace", prog="fornace",
             description="Fornace: deploy environments of services from Murano 0.2 "
                         "style XML workflows.")
    except cfg.Error as exc:
        print(f"fornace: {exc}", file=sys.stderr)
        return 2
    try:
        return _module(conf.command.name).run(conf)
    except FornaceError as exc:
        print(f"fornace: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head, less…
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
