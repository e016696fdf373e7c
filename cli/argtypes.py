"""The argparse types of the daemons' numbers: a value out of range is a
usage error naming the option (exit status 2), not a server that starts on
a port the kernel refuses or with no worker."""
from __future__ import annotations

import argparse


def port(text: str) -> int:
    """A TCP port to listen on: 0 (any free port) to 65535."""
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (0 to 65535)")
    return value


def positive(text: str) -> int:
    """A count of at least one (worker processes, environments)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a count of at least 1")
    return value


def days(text: str) -> int:
    """A number of days, 0 or more (an age)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number of days (0 or more)")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
