"""How the client commands print: aligned tables for people, one JSON or YAML
document or tab-separated values for programs, and the live lines of a
running job.

Every list and show command takes ``-f/--format``: ``table`` (the default,
for people), ``json`` (the API's data as one document; ``--json`` says the
same), ``yaml`` (that document as YAML) and ``value`` (the table's rows
without headers, one per line, cells separated by tabs).  The times the API
gives (UTC, ISO 8601) are shown in tables and values as the local time with
its offset (``2024-05-01 14:03:07+02:00``); json and yaml keep the API's.

On a terminal a running job shows a one-line progress bar that the job's
lines scroll above; piped into a file or another program there is no bar
(its redrawing would be noise), and each line says how far the job is.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any, Callable, Iterable, TextIO

from fornace.common.errors import FornaceError

BAR_WIDTH = 24
SUMMARY_WIDTH = 100


def print_json(data: Any) -> None:
    """The whole output of a command run with ``--json``."""
    json.dump(data, sys.stdout, indent=2)
    print()


def cell(value: Any) -> str:
    """A table cell: ``-`` for nothing, one line, at most :data:`SUMMARY_WIDTH` wide."""
    if value is None or value == "":
        return "-"
    text = " ".join(str(value).split())
    return text if len(text) <= SUMMARY_WIDTH else text[:SUMMARY_WIDTH - 1] + "…"


def table(headers: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    """Columns aligned on their widest cell (the last column is not padded)."""
    lines = [list(headers)] + [[cell(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip()
                     for line in lines)


def print_table(headers: Iterable[str], rows: Iterable[Iterable[Any]],
                empty: str = "(none)") -> None:
    rows = list(rows)
    print(table(headers, rows) if rows else empty)


# -- -f/--format ---------------------------------------------------------------------

FORMATS = ("table", "json", "yaml", "value")


def add_format_option(parser: argparse.ArgumentParser) -> None:
    """``-f/--format`` of a list or show command (``--json`` stays its synonym)."""
    parser.add_argument("-f", "--format", choices=FORMATS,
                        help="table (default), json (the API's data, as --json), yaml, or "
                             "value (the rows without headers, cells separated by tabs)")


def format_of(command: Any) -> str:
    """The format ``command`` asks for: ``--json`` is ``-f json``."""
    chosen = getattr(command, "format", None)
    if getattr(command, "json", False):
        if chosen not in (None, "json"):
            raise FornaceError(f"--json and -f {chosen} ask for two formats: give one")
        return "json"
    return chosen or "table"


def print_yaml(data: Any) -> None:
    """The API's data as one YAML document (keys in the API's order)."""
    import yaml     # only for -f yaml

    yaml.safe_dump(data, sys.stdout, sort_keys=False, allow_unicode=True,
                   default_flow_style=False)


def value_cell(value: Any) -> str:
    """A cell of ``-f value``: whole (never shortened), nothing for None, and on one
    line without tabs so that a row stays a line and a cell stays a field."""
    if value is None:
        return ""
    if isinstance(value, (dict, list, bool)):
        value = json.dumps(value)
    return " ".join(str(value).split())


def print_values(rows: Iterable[Iterable[Any]]) -> None:
    for row in rows:
        print("\t".join(value_cell(value) for value in row))


def emit(command: Any, data: Any, rows: Iterable[Iterable[Any]],
         show: Callable[[], None]) -> None:
    """Print a list or show command's answer in its format: ``data`` (the API's)
    for json and yaml, ``rows`` for value, ``show()`` prints the table view."""
    chosen = format_of(command)
    if chosen == "json":
        print_json(data)
    elif chosen == "yaml":
        print_yaml(data)
    elif chosen == "value":
        print_values(rows)
    else:
        show()


# -- times ---------------------------------------------------------------------------

def parse_time(text: Any) -> datetime.datetime | None:
    """A time of the API (ISO 8601, UTC when it names no zone) as an aware datetime;
    None for nothing or what is no time."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def local_time(text: Any) -> Any:
    """A time of the API as the local time with its offset (``2024-05-01
    14:03:07+02:00``, ``TZ`` decides); anything else as it is."""
    moment = parse_time(text)
    if moment is None:
        return text
    return moment.astimezone().isoformat(sep=" ", timespec="seconds")


class Live:
    """The lines of a running job, under a progress bar when ``stream`` is a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None,
                 tty: bool | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.done = 0
        self.total = 0
        self._bar = ""

    def progress(self, done: int, total: int, seconds: float) -> None:
        self.done, self.total = done, total
        if self.tty:
            self._bar = self._render(seconds)
            self._write(f"\r{self._bar}\x1b[K")

    def line(self, text: str, counted: bool = False) -> None:
        """A line above the bar; without a terminal, a ``counted`` line (a task that
        ended) starts with the progress instead."""
        if not self.tty:
            self._write(f"[{self.done}/{self.total}] {text}\n" if counted else f"{text}\n")
        elif self._bar:
            self._write(f"\r\x1b[K{text}\n{self._bar}")
        else:
            self._write(f"{text}\n")

    def close(self) -> None:
        """Remove the bar (the final line replaces it)."""
        if self._bar:
            self._write("\r\x1b[K")
            self._bar = ""

    def _render(self, seconds: float) -> str:
        filled = BAR_WIDTH * self.done // self.total if self.total else 0
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        return f"{self.label} [{bar}] {self.done}/{self.total} tasks {seconds:4.0f}s"

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
