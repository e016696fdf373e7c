"""How the client commands print: aligned tables for people, one JSON document
for programs, and the live lines of a running job.

On a terminal a running job shows a one-line progress bar that the job's
lines scroll above; piped into a file or another program there is no bar
(its redrawing would be noise), and each line says how far the job is.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Iterable, TextIO

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
