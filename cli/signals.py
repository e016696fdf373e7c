"""Stopping a daemon's main thread on SIGINT and SIGTERM, safely.

A signal handler runs in the main thread, between two of its bytecodes.  A
handler that calls ``event.set()`` may find the main thread inside
``event.wait()`` holding the event's own (non-reentrant) lock: the handler
then waits for that lock for ever, and the daemon hangs instead of stopping
(``fornace conductor`` did, when SIGTERM came right as it started waiting).
So the handler only starts a thread, and that thread sets the event.

And the main thread never blocks without a timeout (:func:`wait_for_stop`):
the kernel may deliver the signal to any thread, and a main thread blocked
on a lock is woken only by a signal delivered to it -- Python runs the
handler when the main thread next runs Python code.  ``fornace conductor``
ignored about one SIGTERM in twenty that way, its main thread asleep in
``Event.wait()`` while a consumer thread had taken the signal.
"""
from __future__ import annotations

import signal
import threading
from typing import Callable


def stop_on_signals(stopped: threading.Event,
                    said: Callable[[int], None] | None = None) -> None:
    """SIGINT and SIGTERM set ``stopped`` (after ``said(signum)``, e.g. a log line),
    from a thread of their own."""
    def act(signum: int) -> None:
        if said is not None:
            said(signum)
        stopped.set()

    def handler(signum: int, _frame: object) -> None:
        threading.Thread(target=act, args=(signum,), name=f"signal-{signum}",
                         daemon=True).start()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handler)


WAKE_SECONDS = 0.5   # how long a signal may wait for the main thread to notice it


def wait_for_stop(stopped: threading.Event) -> None:
    """Wait in the main thread until ``stopped`` is set (by a signal or anything
    else), waking every :data:`WAKE_SECONDS` so that a signal another thread
    took runs its handler."""
    while not stopped.wait(WAKE_SECONDS):
        pass
