"""``fornace agent`` started without oslo.config and oslo.log, when it can be.

Every unit boots an agent, and the local cloud boots one process per unit on
the conductor's machine: oslo.config and oslo.log are more than half of what
an agent costs to start (about 0.1 CPU s of 0.2), for a configuration file of
a few keys.  :func:`parse` reads the command line and the configuration files
of the usual case -- ``fornace --config-file FILE... agent [--work-dir DIR]``
whose files set only the agent's own options (:data:`fornace.agent.config.OPTIONS`)
and ``debug`` -- as oslo.config would (``[DEFAULT]`` and ``[agent]``, later
files win, quotes around a value stripped, the same types, choices and
minimums), and logs to standard output in oslo.log's default format.

Anything else -- another option (oslo.log's ``log_file``, ``use_syslog``...),
``--config-dir``, no ``--config-file`` (oslo.config then looks for default
files), an option set through the environment, a value it cannot read -- gives
None: the caller parses with oslo.config as before, which also reports the
errors.  So the quick path changes how fast the agent starts, never what a
configuration means.
"""
from __future__ import annotations

import configparser
import logging
import os
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from fornace.agent.config import OPTIONS, Option

# oslo.log's default line format (its logging_default_format_string without context)
LOG_FORMAT = "%(asctime)s.%(msecs)03d %(process)d %(levelname)s %(name)s [-] %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
# libraries chatty at INFO (as cli/daemonlogs.py quiets them under oslo.log)
QUIET = ("amqp", "kombu", "stevedore", "urllib3", "iso8601")
TRUE = frozenset({"true", "1", "on", "yes"})
FALSE = frozenset({"false", "0", "off", "no"})
GROUPS = {"DEFAULT": None, "agent": "agent"}
EXTRA_KEYS = {None: {"debug": "bool"}}   # read beyond the agent's own options


class Unhandled(Exception):
    """Something only oslo.config reads (or reports) right."""


@dataclass
class QuickConf:
    """What ``fornace agent``'s ``run(conf)`` reads of an oslo.config configuration."""
    values: dict[str | None, dict[str, Any]]
    command: SimpleNamespace
    debug: bool = False
    agent: SimpleNamespace = field(init=False)

    def __post_init__(self) -> None:
        self.agent = SimpleNamespace(**self.values["agent"])
        for name, value in self.values[None].items():
            setattr(self, name, value)

    def setup_logging(self) -> None:
        """Lines to standard output, as oslo.log writes them without options."""
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
        root = logging.getLogger()
        root.handlers[:] = [handler]
        root.setLevel(logging.DEBUG if self.debug else logging.INFO)
        for name in QUIET:
            logging.getLogger(name).setLevel(logging.WARNING)


def parse(front: list[str], rest: list[str]) -> QuickConf | None:
    """The configuration of ``fornace [front] agent [rest...]``, or None when
    oslo.config must read it (see the module docstring)."""
    try:
        files = _config_files(front)
        work_dir = _work_dir(rest)
        if any(name.startswith("OS_") and "__" in name for name in os.environ):
            raise Unhandled("an option may be set through the environment")
        values = _defaults()
        for path in files:
            _read(path, values)
    except Unhandled:
        return None
    debug = bool(values[None].pop("debug", False))
    return QuickConf(values, SimpleNamespace(name="agent", work_dir=work_dir), debug)


def _config_files(front: list[str]) -> list[str]:
    files = []
    index = 0
    while index < len(front):
        arg = front[index]
        if arg == "--config-file" and index + 1 < len(front):
            files.append(front[index + 1])
            index += 2
        elif arg.startswith("--config-file="):
            files.append(arg.split("=", 1)[1])
            index += 1
        else:
            raise Unhandled(arg)
    if not files:
        raise Unhandled("no --config-file: oslo.config looks for default files")
    return files


def _work_dir(rest: list[str]) -> str | None:
    if rest[:1] != ["agent"]:
        raise Unhandled("not the agent command")
    args = rest[1:]
    if not args:
        return None
    if len(args) == 2 and args[0] == "--work-dir" and not args[1].startswith("-"):
        return args[1]
    if len(args) == 1 and args[0].startswith("--work-dir=") and len(args[0]) > 11:
        return args[0].split("=", 1)[1]
    raise Unhandled(" ".join(args))


def _defaults() -> dict[str | None, dict[str, Any]]:
    values: dict[str | None, dict[str, Any]] = {None: {}, "agent": {}}
    for option in OPTIONS:
        values[option.group][option.name] = option.default
    return values


def _read(path: str, values: dict[str | None, dict[str, Any]]) -> None:
    parser = configparser.RawConfigParser(strict=False, default_section="\0none")
    parser.optionxform = str   # type: ignore[assignment,method-assign]  -- names as written
    try:
        with open(path, encoding="utf-8") as handle:
            parser.read_file(handle)
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        raise Unhandled(str(exc)) from None
    known = {(o.group, o.name): o for o in OPTIONS}
    for section in parser.sections():
        if section not in GROUPS:
            raise Unhandled(f"section [{section}]")
        group = GROUPS[section]
        for name, text in parser.items(section):
            extra = EXTRA_KEYS.get(group, {}).get(name)
            option = known.get((group, name)) or (
                Option(name, extra, False, "", group) if extra else None)
            if option is None or text is None or "\n" in text or "$" in text:
                raise Unhandled(f"[{section}] {name}")
            values[group][name] = _value(option, _unquoted(text.strip()))


def _unquoted(text: str) -> str:
    if text and text[0] == text[-1] and text[0] in "\"'":   # as oslo.config's parser
        return text[1:-1]
    return text


def _value(option: Option, text: str) -> Any:
    if option.kind == "str":
        if option.choices is not None and text not in option.choices:
            raise Unhandled(option.name)
        return text
    if option.kind == "bool":
        lowered = text.lower()
        if lowered in TRUE or lowered in FALSE:
            return lowered in TRUE
        raise Unhandled(option.name)
    try:
        number = int(text) if option.kind == "int" else float(text)
    except ValueError:
        raise Unhandled(option.name) from None
    if option.min is not None and number < option.min:
        raise Unhandled(option.name)
    return number
