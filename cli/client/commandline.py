"""A client command's line parsed without oslo.config, and without keystoneauth1
when it does not log in to Keystone.

``fornace env list`` reads no configuration file and, in noauth mode or with
a token, needs none of keystoneauth1's options: loading both took half of its
start-up (0.12 s of 0.23 s).  Its line is parsed here by the command's own
parsers under a bare root (no ``--config-file``), first with only the options a
command that does not log in uses (:func:`cloudauth.without_login`), then,
when that parse cannot finish or the command may log in, with all of them.

Neither parse ever prints: help (``-h``), a wrong option or value, an
abbreviation (refused by the first parse: one that is unique among its
options could be ambiguous among all of them) end it with nothing, and
``fornace`` parses the line again as it always has (oslo.config, every
option): what a user sees -- help texts, usage lines, errors, exit codes --
is written by that one parse only.
"""
from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any, Callable, NoReturn, Sequence

from fornace.cli.client import cloudauth

AddParsers = Callable[[argparse._SubParsersAction], object]


class _Unfinished(Exception):
    """The parse would print (help, an error): the full parse is to say it."""


class _SilentParser(argparse.ArgumentParser):
    """A parser that raises instead of printing; its sub-parsers are of its class."""

    abbreviations = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = self.abbreviations
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise _Unfinished(message)

    def print_help(self, file: Any = None) -> NoReturn:
        raise _Unfinished("help")


class _ExactParser(_SilentParser):
    abbreviations = False


class Command:
    """The parsed command as oslo.config gives it (``conf.command``): ``name``
    is the command's name, any other attribute the value of its option."""

    def __init__(self, namespace: argparse.Namespace) -> None:
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        return getattr(self._namespace, "command" if name == "name" else name)


def parse(args: Sequence[str], add_parsers: AddParsers) -> SimpleNamespace | None:
    """The configuration of a client command (``conf.command`` only, as its
    ``run(conf)`` reads it) from ``args`` (the command's name first, no
    ``--config-file``), or None when only the full parse can say what they
    mean."""
    with cloudauth.without_login():
        command = _parsed(args, add_parsers, _ExactParser)
    if command is None or cloudauth.may_log_in(command):
        command = _parsed(args, add_parsers, _SilentParser)
    return None if command is None else SimpleNamespace(command=command)


def _parsed(args: Sequence[str], add_parsers: AddParsers,
            parser_class: type[_SilentParser]) -> Command | None:
    root = parser_class(prog="fornace")
    subparsers = root.add_subparsers(dest="command", required=True)   # as oslo.config names it
    add_parsers(subparsers)
    try:
        return Command(root.parse_args(list(args)))
    except _Unfinished:
        return None
