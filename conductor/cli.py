"""The ``fornace`` command: one entry point, one sub-command per job.

Options and config files are parsed by oslo.config; each sub-command module
contributes its argparse parsers and a ``run(conf) -> exit code`` function.

Exit codes: 0 success, 1 the job failed (problems found, deployment ended
with an error), 2 bad usage or unreadable input.
"""
from __future__ import annotations

import sys
from typing import Callable

from oslo_config import cfg

from . import config, workflow_cli
from .errors import FornaceError

# name -> (add its parsers to the sub-parsers object, run it)
COMMANDS: dict[str, tuple[Callable, Callable[[cfg.ConfigOpts], int]]] = {
    "workflow": (workflow_cli.add_parsers, workflow_cli.run),
}


def _add_command_parsers(subparsers) -> None:
    for add_parsers, _ in COMMANDS.values():
        add_parsers(subparsers)


def build_conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    config.register(conf)
    conf.register_cli_opt(cfg.SubCommandOpt(
        "command", title="commands", handler=_add_command_parsers,
        help="run 'fornace COMMAND --help' for the options of each"))
    return conf


def main(argv: list[str] | None = None) -> int:
    conf = build_conf()
    args = sys.argv[1:] if argv is None else argv
    try:
        conf(args, project="fornace", prog="fornace",
             description="Fornace: deploy environments of services from Murano 0.2 "
                         "style XML workflows.")
    except cfg.Error as exc:
        print(f"fornace: {exc}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[conf.command.name][1](conf)
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
