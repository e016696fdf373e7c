"""One way for tests to wait for what happens in another thread or process."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable


def wait_for(predicate: Callable[[], Any], what: str | None = None, *, timeout: float = 90.0,
             explain: Callable[[], str] | None = None, interval: float = 0.05) -> Any:
    """Check ``predicate`` until it gives something true, and return that.

    The timeout is a limit against hanging, not a pace: the wait ends as soon
    as the condition holds.  When it passes, with ``what`` an AssertionError
    names what was awaited (and ``explain()``, e.g. a log); without, the last
    (false) value is returned for the caller's own assert.
    """
    ticker = threading.Event()       # nobody sets it: an interruptible tick
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            if what is None:
                return value
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}"
                                 + (f"\n{explain()}" if explain else ""))
        ticker.wait(interval)
