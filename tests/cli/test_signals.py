"""SIGINT and SIGTERM stop a daemon's main thread through a thread of their own
(a handler setting the event itself could wait for ever on the event's lock,
held by the main thread inside ``wait``)."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from fornace.cli.signals import stop_on_signals, wait_for_stop


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_sets_the_event_and_says_which(signum):
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    stopped, said, setters = threading.Event(), [], []
    try:
        stop_on_signals(stopped, lambda number: (said.append(number),
                                                 setters.append(threading.current_thread())))
        os.kill(os.getpid(), signum)
        assert stopped.wait(10)
        assert said == [signum]
        assert setters[0] is not threading.main_thread()
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def test_a_signal_another_thread_took_still_stops_the_main_thread():
    """The kernel may hand the signal to any thread; the main thread, waiting in
    wait_for_stop, runs the handler within WAKE_SECONDS (a bare Event.wait()
    slept on: fornace conductor ignored about one SIGTERM in twenty)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    stopped, release = threading.Event(), threading.Event()
    worker = threading.Thread(target=release.wait, daemon=True)
    worker.start()
    try:
        stop_on_signals(stopped)
        threading.Thread(target=signal.pthread_kill, args=(worker.ident, signal.SIGTERM),
                         daemon=True).start()
        wait_for_stop(stopped)            # returns: the handler ran
        assert stopped.is_set()
    finally:
        release.set()
        for number, handler in saved.items():
            signal.signal(number, handler)
