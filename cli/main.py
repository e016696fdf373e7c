"""The ``fornace`` command: one entry point, one sub-command per job.

Options and config files are parsed by oslo.config; each sub-command module
contributes its argparse parsers and a ``run(conf) -> exit code`` function.
A client command given no ``--config-file`` reads no configuration: its line
is parsed without oslo.config (:mod:`fornace.cli.client.commandline`).
``fornace --help`` is written here rather than by argparse, which can only
list the commands in one block: a newcomer first needs to see which commands
run Fornace and which use a running one.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import re
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fornace.cli import daemonlogs
from fornace.common.errors import FornaceError

if TYPE_CHECKING:
    from oslo_config import cfg

# sub-command -> module with add_parsers(subparsers) and run(conf), named for it;
# deploy serves deploy, action and plan, which all start a job (its run() looks
# at conf.command.name)
COMMANDS = {
    "up": "fornace.cli.up",
    "api": "fornace.cli.api",
    "conductor": "fornace.cli.conductor",
    "agent": "fornace.cli.agent",
    "demo": "fornace.cli.demo",
    "env": "fornace.cli.client.env",
    "service": "fornace.cli.client.service",
    "type": "fornace.cli.client.type",
    "deploy": "fornace.cli.client.deploy",
    "action": "fornace.cli.client.deploy",
    "plan": "fornace.cli.client.deploy",
    "jobs": "fornace.cli.client.jobs",
    "logs": "fornace.cli.client.logs",
    "deployments": "fornace.cli.client.deployments",
    "trace": "fornace.cli.client.trace",
    "why": "fornace.cli.client.why",
    "package": "fornace.cli.client.package",
    "status": "fornace.cli.client.status",
    "topology": "fornace.cli.client.topology",
    "outputs": "fornace.cli.client.outputs",
    "workflow": "fornace.cli.workflow",
    "db": "fornace.cli.db",
    "gc": "fornace.cli.gc",
    "dead-letters": "fornace.cli.client.deadletters",
}
# the commands that use a running Fornace: they read nothing of the configuration
CLIENT_COMMANDS = frozenset(name for name, module in COMMANDS.items()
                            if module.startswith("fornace.cli.client."))

# the option modules (each with register(conf): the service's own groups and the
# shared ones of fornace.common.options it reads) a command's configuration has:
# all of them, so that one configuration file serves every command; the agent,
# which runs on a unit, only its own
OPTION_MODULES = ("fornace.conductor.config", "fornace.api.config", "fornace.agent.config")
COMMAND_OPTIONS = {"agent": ("fornace.agent.config",)}

# how ``fornace --help`` groups them (every command in exactly one group)
GROUPS = (
    ("Run Fornace", ("up", "api", "conductor", "agent", "demo")),
    ("Use a running Fornace through its REST API (--url, default $FORNACE_URL)",
     ("env", "service", "type", "deploy", "action", "plan", "jobs", "logs", "trace", "why",
      "deployments", "status", "topology", "outputs", "package")),
    ("Workflow files", ("workflow",)),
    ("Operators", ("db", "gc", "dead-letters")),
)

DESCRIPTION = "Fornace deploys environments of services from Murano 0.2 style XML workflows."
EPILOG = """\
Options of every command: --config-file FILE, --config-dir DIR (oslo.config files;
see etc/fornace.conf.sample). The client commands also take --url URL
($FORNACE_URL), --token TOKEN ($FORNACE_TOKEN, sent as is), --tenant ID
($FORNACE_TENANT, noauth mode) and --json (print the API's data as one JSON
document); their list and show commands -f table|json|yaml|value; the commands
that destroy (env delete, service remove, action uninstall, a scale in, package
delete) ask first on a terminal, --yes does not ask. Run 'fornace COMMAND --help'
for the options and examples of each.

OpenStack credentials (client commands): OS_AUTH_URL, OS_USERNAME, OS_PASSWORD,
OS_PROJECT_NAME, OS_USER_DOMAIN_NAME, OS_PROJECT_DOMAIN_NAME (OS_AUTH_TYPE,
default password; any --os-* option of keystoneauth1), or OS_CLOUD, a cloud of
clouds.yaml (./, ~/.config/openstack/, /etc/openstack/ or $OS_CLIENT_CONFIG_FILE;
secure.yaml beside it merged in; OS_* variables override it); OS_REGION_NAME,
OS_INTERFACE (default public), OS_CACERT, --insecure, --timeout SECONDS (30).
Without --token, the command logs in to Keystone and sends the session's token;
without --url or FORNACE_URL, the API is the 'application-catalog' endpoint of the
catalog.

Exit codes:
  0    success
  1    the deployment or job failed, 'workflow check' found problems, 'workflow
       simulate' ended with an error (with --environment: its run differs from
       the last real one), 'db current' found the schema behind, 'gc' found
       orphans (without --remove), or a confirmation was answered no
  2    bad usage: wrong options, unreadable files or models, parameters or names
       the API rejects (HTTP 400, 404; 409 for a name taken or a version that
       exists), a command that would ask for confirmation without a terminal
       and without --yes, a database URL that names no database Fornace can use
  3    the API is unreachable or refused the request (authentication,
       permission, environment busy, server error); for db, gc, api and up:
       the database is unreachable, refuses, or has no schema ('db purge':
       not the newest)
  130  interrupted (Ctrl-C; a followed job goes on)"""


def _module(name: str) -> ModuleType:
    return importlib.import_module(COMMANDS[name])


def _modules(command: str | None = None) -> list[ModuleType]:
    """The modules of every command, or only of ``command`` (a known one)."""
    names = [COMMANDS[command]] if command in COMMANDS else COMMANDS.values()
    return [importlib.import_module(name) for name in dict.fromkeys(names)]


class _Summaries:
    """Stands for argparse's sub-parsers while the commands add theirs: keeps the
    one-line help of each for the grouped ``fornace --help``."""

    def __init__(self, subparsers: argparse._SubParsersAction) -> None:
        self._subparsers = subparsers
        self.found: dict[str, str] = {}

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        self.found[name] = kwargs.get("help") or ""
        return self._subparsers.add_parser(name, **kwargs)


def _add_command_parsers(subparsers: argparse._SubParsersAction,
                         command: str | None = None) -> _Summaries:
    subparsers.metavar = "COMMAND"
    summaries = _Summaries(subparsers)
    for module in _modules(command):
        module.add_parsers(summaries)
    return summaries


def overview() -> str:
    """The text of ``fornace --help``."""
    from fornace.cli.client import cloudauth
    # only the one-line summaries are wanted: no OpenStack login options (they
    # load keystoneauth1, ~80 ms)
    with cloudauth.summaries_only():
        summaries = _add_command_parsers(argparse.ArgumentParser().add_subparsers()).found
    width = max(len(name) for name in COMMANDS) + 2
    lines = ["usage: fornace [--config-file FILE] [--config-dir DIR] COMMAND [options]",
             "       fornace --version | --shell_completion bash|zsh", "",
             DESCRIPTION]
    grouped = {name for _, names in GROUPS for name in names}
    others = tuple(name for name in COMMANDS if name not in grouped)
    for title, names in GROUPS + ((("Other commands", others),) if others else ()):
        lines += ["", f"{title}:"]
        lines += [f"  {name:<{width}}{summaries.get(name, '')}" for name in names]
    return "\n".join(lines + ["", EPILOG])


def build_conf(command: str | None = None) -> cfg.ConfigOpts:
    """The option groups of ``command`` (:data:`COMMAND_OPTIONS`, else every
    group) and the parsers of every command or only of ``command``.

    The option groups come from the light config modules; naming the command
    keeps start-up small: ``fornace workflow simulate`` does not import the
    API, the broker or the local cloud, ``fornace agent`` nothing of the API
    or the conductor.
    """
    from oslo_config import cfg

    conf = cfg.ConfigOpts()
    for name in COMMAND_OPTIONS.get(command or "", OPTION_MODULES):
        importlib.import_module(name).register(conf)
    if command in daemonlogs.DAEMONS:
        daemonlogs.register(conf)
    conf.register_cli_opt(cfg.SubCommandOpt(
        "command", title="commands",
        handler=lambda subparsers: _add_command_parsers(subparsers, command),
        help="run 'fornace COMMAND --help' for the options of each"))
    return conf


GLOBAL_OPTIONS = ("--config-file", "--config-dir")
# oslo.log's command-line options of the daemons (cli/daemonlogs.py): with a value, flags
LOG_OPTIONS = ("--log-file", "--logfile", "--log-dir", "--logdir", "--log-config-append",
               "--log-config", "--log_config", "--log-date-format", "--syslog-log-facility")
LOG_FLAGS = ("--debug", "-d", "--nodebug", "--use-syslog", "--nouse-syslog", "--use-journal",
             "--nouse-journal", "--use-json", "--nouse-json")


def hoist_global_options(args: list[str]) -> list[str]:
    """Move ``--config-file F`` (and ``--config-dir``) given after the sub-command
    to the front, where oslo.config expects them: ``fornace api --config-file F``
    then means what its user meant."""
    front, rest = _split_global_options(args)
    return front + rest


def _split_global_options(args: list[str], options: tuple[str, ...] = GLOBAL_OPTIONS,
                           flags: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(the global options with their values, the other arguments)."""
    front: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        name = arg.split("=", 1)[0]
        if arg in flags:
            front.append(arg)
        elif name in options:
            if "=" in arg:
                front.append(arg)
            else:
                front.extend(args[index:index + 2])
                index += 1
        else:
            rest.append(arg)
        index += 1
    return front, rest


CLIENT_OPTIONS = ("--url", "--token", "--tenant", "--format", "-f", "--timeout")  # with a value
CLIENT_FLAGS = ("--json", "--yes", "-y", "--insecure", "--collect-timing")
CLIENT_PREFIX = "--os-"   # OpenStack credentials (cli/client/cloudauth.py): each has a value


def sink_client_options(args: list[str]) -> list[str]:
    """Move the client commands' options given before the command to the end, where
    the command's own parser reads them: ``fornace --url U env list`` and
    ``fornace --os-cloud C env list`` then work."""
    rest = list(args)
    moved: list[str] = []
    while rest and rest[0].startswith("-"):
        name = rest[0].split("=", 1)[0]
        if name in CLIENT_FLAGS or ((name in CLIENT_OPTIONS or name.startswith(CLIENT_PREFIX))
                                    and "=" in rest[0]):
            moved.append(rest.pop(0))
        elif name in CLIENT_OPTIONS or name.startswith(CLIENT_PREFIX):
            moved.extend(rest[:2])
            del rest[:2]
        else:
            break
    return rest + moved


def _version() -> str:
    import importlib.metadata   # 25 ms: only for --version

    try:
        return importlib.metadata.version("fornace")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "(not installed)"


def _arrange(argv: list[str]) -> tuple[list[str], list[str]]:
    """(global options -- and a daemon's logging options --, the command and the
    rest, a client command's options moved after it)."""
    front, rest = _split_global_options(argv)
    lead, after = _leading_options(rest, LOG_OPTIONS, LOG_FLAGS)
    if lead and after and after[0] in daemonlogs.DAEMONS:   # fornace --log-file F api
        front, rest = front + lead, after
    rest = sink_client_options(rest)
    if rest and rest[0] in daemonlogs.DAEMONS:   # fornace api --debug --log-file F: oslo.log's
        more, rest = _split_global_options(rest, LOG_OPTIONS, LOG_FLAGS)
        front += more
    return front, rest


def _log_options_of_another_command(rest: list[str]) -> str | None:
    """The usage error of oslo.log's options given to a command that is no
    daemon (``fornace --debug env list``), or None: argparse would take the
    option's value for the command."""
    lead, after = _leading_options(rest, LOG_OPTIONS, LOG_FLAGS)
    if not lead or (after and after[0] in daemonlogs.DAEMONS):
        return None
    option = lead[0].split("=", 1)[0]
    daemons = ", ".join(daemonlogs.DAEMONS)
    if after and not after[0].startswith("-"):
        return f"fornace: {option} is an option of the daemons only ({daemons}), not of '{after[0]}'"
    return f"fornace: {option} is an option of the daemons only ({daemons}): fornace {option} DAEMON"


def _leading_options(args: list[str], options: tuple[str, ...],
                     flags: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(the ``options`` (with their values) and ``flags`` that ``args`` starts
    with, the rest from the first other argument on)."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in flags:
            index += 1
        elif arg.split("=", 1)[0] in options:
            index += 1 if "=" in arg else 2
        else:
            break
    return args[:index], args[index:]


def command_line(argv: list[str]) -> list[str]:
    """The arguments as oslo.config reads them (see :func:`_arrange`)."""
    front, rest = _arrange(argv)
    return front + rest


def main(argv: list[str] | None = None) -> int:
    front, rest = _arrange(sys.argv[1:] if argv is None else argv)
    misplaced = _log_options_of_another_command(rest)
    if misplaced:
        print(misplaced, file=sys.stderr)
        return 2
    if not rest or rest[0] in ("-h", "--help"):
        print(overview(), file=sys.stdout if rest else sys.stderr)
        return 0 if rest else 2
    if rest[0] == "--version":
        print(f"fornace {_version()}")
        return 0
    if rest[0] == "--shell_completion":  # oslo.config's own lacks its templates
        from fornace.cli import completion

        shell = rest[1] if len(rest) > 1 else ""
        if shell not in completion.SHELLS:
            print(f"fornace: --shell_completion takes {' or '.join(completion.SHELLS)}",
                  file=sys.stderr)
            return 2
        print(completion.script(shell, _add_command_parsers), end="")
        return 0
    if rest[0] not in COMMANDS and not rest[0].startswith("-"):   # fornace deplyo
        from fornace.cli.suggest import unknown

        print(f"fornace: {unknown('command', rest[0], COMMANDS, 'fornace --help lists them')}",
              file=sys.stderr)
        return 2
    if not front and rest[0] in CLIENT_COMMANDS:
        from fornace.cli.client import commandline

        quick = commandline.parse(rest, lambda subparsers: _add_command_parsers(
            subparsers, rest[0]))
        if quick is not None:
            return _run(rest[0], quick)
    if rest[0] == "agent":   # every unit starts one: without oslo.config when it can
        from fornace.agent import quickstart

        quick = quickstart.parse(front, rest)
        if quick is not None:
            return _module("agent").run(quick)
    from oslo_config import cfg

    conf = build_conf(rest[0])
    try:
        conf(front + rest, project="fornace", prog="fornace", description=DESCRIPTION)
    except cfg.Error as exc:
        print(f"fornace: {exc}", file=sys.stderr)
        return 2
    return _run(conf.command.name, conf)


def _run(command: str, conf: Any) -> int:
    """The command's exit code; its errors as one line."""
    try:
        return _module(command).run(conf)
    except FornaceError as exc:
        print(f"fornace: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head, less…
        return closed_pipe()
    except Exception as exc:
        # a value of the configuration files, read when first used (a client
        # command run without oslo.config cannot meet one: not imported for it)
        config = sys.modules.get("oslo_config.cfg")
        if config is None or not isinstance(exc, config.Error):
            raise
        print(f"fornace {command}: {config_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def config_error(exc: Exception) -> str:
    """oslo.config's error in a user's words: the file named, not its
    ``LocationInfo(...)`` object."""
    return re.sub(r"from LocationInfo\(location=<[^>]*>, detail='([^']*)'\)", r"in \1",
                  str(exc)).replace("Value for option", "the value of option")


def closed_pipe() -> int:
    """The exit code of a command whose reader stopped reading (``| head``):
    what is left of its output goes nowhere, quietly -- Python would print a
    BrokenPipeError at exit when it flushes standard output again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def console() -> None:
    """The ``fornace`` program: :func:`main`, then the process ends.

    Its objects are left to the operating system: frozen, they are not walked
    by the interpreter's last garbage collection (0.2 s of a 1000-unit
    ``workflow simulate``).  In-process callers use :func:`main`.
    """
    try:
        code = main()
        sys.stdout.flush()   # a reader that went away shows here, not at exit
    except BrokenPipeError:
        code = closed_pipe()
    gc.freeze()
    sys.exit(code)

