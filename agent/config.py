"""The agent's options (oslo.config's format) and the settings built from them.

The connection keys are the ``[DEFAULT]`` keys that the agent-config
template (``data/templates/agent-config/Default.template``) writes and that
``init.sh`` stores in ``/etc/fornace/agent.conf``::

    [DEFAULT]
    broker_url = amqp://user:password@host:5672//
    broker_ssl = False
    broker_queue_type = classic
    input_queue = e<env>-<service>-<unit>
    result_routing_key = -execution-results-e<env>

How plans are run is tuned in ``[agent]`` (all optional)::

    [agent]
    work_dir = /var/lib/fornace/agent
    journal =                  # default <work_dir>/journal.jsonl
    command_timeout = 3600
    reboot_command =           # e.g. "systemctl reboot"; empty: only logged
    poweroff_command =         # e.g. "systemctl poweroff"; empty: only logged
    max_incomplete = 10        # re-runs of an incomplete plan before it is an error
    powershell =               # empty: pwsh, then powershell, from PATH
    python = python3
    shell = /bin/sh
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # oslo.config is loaded only where it parses (see fornace.agent.quickstart)
    from oslo_config import cfg


@dataclass(frozen=True)
class Option:
    """One option of the agent, declared once: oslo.config's option is made from it
    (:func:`register`), and :mod:`fornace.agent.quickstart` reads it without
    oslo.config."""
    name: str
    kind: str                      # "str", "bool", "int" or "float"
    default: Any
    help: str
    group: str | None = None       # None: [DEFAULT]
    secret: bool = False
    choices: tuple[str, ...] | None = None
    min: float | None = None


OPTIONS = (
    Option("broker_url", "str", "memory://", secret=True,
           help="Broker the agent takes its plans from (amqp://user:pw@host:5672/vhost); "
                "the nodes of a RabbitMQ cluster one after the other, ';' between "
                "their URLs."),
    Option("broker_ssl", "bool", False, help="Reach the broker over TLS."),
    Option("broker_queue_type", "str", "classic", choices=("classic", "quorum"),
           help="How the agent declares its queues: as the conductor does ([broker] "
                "queue_type), or the broker refuses them."),
    Option("input_queue", "str", "",
           help="Queue of this unit's execution plans (e<env>-<service>-<unit>)."),
    Option("result_routing_key", "str", "",
           help="Queue the results go to (-execution-results-e<env>)."),
    Option("work_dir", "str", "/var/lib/fornace/agent", group="agent",
           help="Folder of the plans' scripts, their output and the journal; scripts "
                "run in it and see it as FORNACE_WORK_DIR."),
    Option("journal", "str", "", group="agent",
           help="Journal file (JSON lines) of the plans answered; default "
                "<work_dir>/journal.jsonl."),
    Option("command_timeout", "float", 3600.0, group="agent", min=0,
           help="Seconds one command may run before it is killed and reported as "
                "an exception (0: no limit)."),
    Option("reboot_command", "str", "", group="agent",
           help="Command run when a plan asks for a reboot (RebootOnCompletion, or "
                "a script exiting 64 or 192), e.g. 'systemctl reboot'. Empty: the "
                "request is only logged. Either way the agent then exits with code 3."),
    Option("poweroff_command", "str", "", group="agent",
           help="Command run when a script asks for a power off (exit 32 or 160), "
                "e.g. 'systemctl poweroff'. Empty: the request is only logged. Either "
                "way the agent then exits with code 4."),
    Option("max_incomplete", "int", 10, group="agent", min=0,
           help="A plan whose script reports 'incomplete' (exit 128, 160, 192) more "
                "often than this is answered with an error instead of being run "
                "again."),
    Option("powershell", "str", "", group="agent",
           help="PowerShell executable; empty looks for pwsh, then powershell."),
    Option("keep_plans", "int", 50, group="agent", min=1,
           help="Plan folders (scripts and command output) kept under "
                "<work_dir>/plans; older ones are removed after each plan."),
    Option("keep_plan_inputs", "bool", False, group="agent",
           help="Keep a plan's inputs (each command's NNN.stdin.json with its "
                "arguments, and plan.json) in its plan folder after the plan is "
                "answered, readable by the agent's user only, until the folder is "
                "pruned (keep_plans). Off: they are deleted once the answer is "
                "journaled, since arguments may hold passwords."),
    Option("journal_keep", "int", 1000, group="agent", min=1,
           help="Plans the journal remembers: at start the journal is rewritten "
                "with the newest ones (and every answer not yet sent) once it "
                "holds twice as many."),
    Option("python", "str", "python3", group="agent", help="Interpreter of .py scripts."),
    Option("shell", "str", "/bin/sh", group="agent", help="Interpreter of .sh scripts."),
)


def _oslo_opts(group: str | None) -> list["cfg.Opt"]:
    from oslo_config import cfg

    kinds = {"str": cfg.StrOpt, "bool": cfg.BoolOpt, "int": cfg.IntOpt,
             "float": cfg.FloatOpt}
    opts = []
    for option in OPTIONS:
        if option.group != group:
            continue
        extra: dict[str, Any] = {}
        if option.secret:
            extra["secret"] = True
        if option.choices is not None:
            extra["choices"] = list(option.choices)
        if option.min is not None:
            extra["min"] = option.min
        opts.append(kinds[option.kind](option.name, default=option.default,
                                       help=option.help, **extra))
    return opts


def register(conf: "cfg.ConfigOpts") -> None:
    conf.register_opts(_oslo_opts(None))
    conf.register_opts(_oslo_opts("agent"), group="agent")


def list_opts() -> list[tuple[str | None, list["cfg.Opt"]]]:
    return [(None, _oslo_opts(None)), ("agent", _oslo_opts("agent"))]


@dataclass
class AgentSettings:
    work_dir: Path
    journal: Path | None = None           # default work_dir / journal.jsonl
    command_timeout: float | None = 3600.0  # None or 0: no limit
    reboot_command: str = ""
    poweroff_command: str = ""
    max_incomplete: int = 10
    powershell: str = ""
    python: str = "python3"
    shell: str = "/bin/sh"
    keep_plans: int = 50
    keep_plan_inputs: bool = False
    journal_keep: int = 1000
    broker_url: str = "memory://"
    broker_ssl: bool = False
    broker_queue_type: str = "classic"
    input_queue: str = ""
    result_queue: str = ""

    def __post_init__(self) -> None:
        self.work_dir = Path(self.work_dir)
        self.journal = Path(self.journal) if self.journal else self.work_dir / "journal.jsonl"

    @classmethod
    def from_conf(cls, conf: "cfg.ConfigOpts") -> "AgentSettings":
        agent = conf.agent
        return cls(work_dir=Path(os.path.expanduser(agent.work_dir)),
                   journal=Path(os.path.expanduser(agent.journal)) if agent.journal else None,
                   command_timeout=agent.command_timeout or None,
                   reboot_command=agent.reboot_command or "",
                   poweroff_command=agent.poweroff_command or "",
                   max_incomplete=agent.max_incomplete,
                   powershell=agent.powershell or "", python=agent.python,
                   shell=agent.shell, keep_plans=agent.keep_plans,
                   keep_plan_inputs=agent.keep_plan_inputs,
                   journal_keep=agent.journal_keep, broker_url=conf.broker_url,
                   broker_ssl=conf.broker_ssl, broker_queue_type=conf.broker_queue_type,
                   input_queue=conf.input_queue,
                   result_queue=conf.result_routing_key)
