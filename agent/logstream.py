"""Streaming a running plan's log lines back, in batches.

The conductor shows what a long script is doing before its answer comes:
lines are collected as the runner reads them and sent as
``contract.plan_log_body(plan_id, lines)`` at most every ``interval`` seconds
or ``batch`` lines, and once more at the end (before the answer, so the
conductor sees them first).  Sending is best effort: a batch that cannot be
sent is dropped with a warning and never fails the plan.  Lines are sent as
the script printed them -- scripts must not print secrets; the agent's own
log never quotes them.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

LOG = logging.getLogger(__name__)

INTERVAL = 0.5      # seconds between two batches at most
BATCH = 50          # lines that make a batch go out at once

LogSender = Callable[[str, list[str], str], None]   # (plan id, lines, message id)


class LogStream:
    """Collects one plan's lines (from any thread) and sends them from its own thread."""

    def __init__(self, plan_id: str, send: LogSender, interval: float = INTERVAL,
                 batch: int = BATCH) -> None:
        self.plan_id = plan_id
        self.send = send
        self.interval = interval
        self.batch = batch
        self.sent_batches = 0
        self._lines: list[str] = []
        self._closed = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name=f"fornace-log-{plan_id[:20]}",
                                        daemon=True)
        self._thread.start()

    def add(self, line: str) -> None:
        """Queue one line (never raises, never blocks on the broker)."""
        with self._wake:
            self._lines.append(line)
            if len(self._lines) >= self.batch:
                self._wake.notify()

    def close(self) -> None:
        """Send what is left and stop; returns once the last batch went out."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._wake:
                if not self._closed and len(self._lines) < self.batch:
                    self._wake.wait(self.interval)
                lines, self._lines = self._lines, []
                closed = self._closed
            for start in range(0, len(lines), self.batch):
                self._send(lines[start:start + self.batch])
            if closed:
                return

    def _send(self, lines: list[str]) -> None:
        self.sent_batches += 1
        message_id = f"{self.plan_id}-log-{self.sent_batches}"
        try:
            self.send(self.plan_id, lines, message_id)
        except Exception as exc:  # noqa: BLE001 -- the log is best effort
            LOG.warning("plan %s: %d log line(s) could not be sent (%s: %s); dropped",
                        self.plan_id, len(lines), type(exc).__name__, exc)
