"""Asking before a client command destroys something.

``env delete``, ``service remove``, a scale-in (``action ENV scale`` with a
negative ``delta``) and ``action ENV uninstall`` ask on the terminal first,
``Delete environment web (2 services, 4 units)? [y/N]``; only ``y`` or
``yes`` goes on.  ``-y/--yes`` skips the question.  Without a terminal on
standard input (a script, a pipe, cron) and without ``--yes`` the command
refuses at once (exit status 2) instead of waiting for an answer that never
comes.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Iterable

from fornace.common.errors import FornaceError

DECLINED = 1    # the exit status when the question is answered no: nothing was done


def add_yes_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-y", "--yes", action="store_true",
                        help="do it without asking (needed when standard input is not a "
                             "terminal, e.g. in scripts)")


def confirmed(command: Any, question: str, refusal: str) -> bool:
    """Whether to go on: ``--yes``, or ``question`` answered yes on the terminal.

    ``refusal`` says what was not done, for the error raised when nobody can be
    asked (standard input is not a terminal) and the note when the answer is no.
    """
    if getattr(command, "yes", False):
        return True
    stdin = sys.stdin
    if stdin is None or stdin.closed or not stdin.isatty():
        raise FornaceError(f"{refusal}: standard input is not a terminal, so nobody can "
                           f"confirm it; pass --yes to go on without asking")
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = stdin.readline()
    if not answer:          # end of input (Ctrl-D): no
        sys.stderr.write("\n")
    if answer.strip().lower() in ("y", "yes"):
        return True
    print(f"fornace: {refusal}: not confirmed", file=sys.stderr)
    return False


def plural(count: int, word: str) -> str:
    """``1 unit``, ``4 units``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def extent(services: Iterable[dict[str, Any]]) -> str:
    """``2 services, 4 units`` (or ``nothing deployed``) of a list of services."""
    services = [s for s in services if isinstance(s, dict)]
    if not services:
        return "nothing deployed"
    units = sum(len(s.get("units") or []) for s in services)
    return f"{plural(len(services), 'service')}, {plural(units, 'unit')}"
