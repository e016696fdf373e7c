"""One way for tests to wait for what happens in another thread or process."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, TypeVar

T = TypeVar("T")


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


def returns(call: Callable[[], T], what: str, *, timeout: float = 90.0) -> T:
    """Run ``call`` in a thread of its own and give its value (or raise its
    exception) once it returns.

    For a call that must end on an event rather than on a limit of its own
    (a drain stopping at its count, a stopped consumer's run): give the call
    a limit far above ``timeout`` and a regression fails here, naming
    ``what``, instead of hanging or passing slowly.
    """
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 -- raised again in the caller
            outcome.append((False, exc))

    threading.Thread(target=run, name="returns", daemon=True).start()
    wait_for(lambda: outcome, what, timeout=timeout)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value
