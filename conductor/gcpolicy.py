"""Garbage collection while deployments run.

A deployment's object model and trace are millions of small containers with
few reference cycles; with CPython's default thresholds the collector runs so
often that its cost grows faster than the model (5000 units took 6.1-6.5 times
1000 units in ``tools/bench_engine.py``; 5.2-5.5 with these settings).  While
at least one deployment runs in the process, the collector runs rarely; the
previous thresholds come back when the last one ends (sessions run in
several threads of one conductor).
"""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

RELAXED = (50_000, 20, 100)   # generation 0, 1 and 2 thresholds while sessions run

_lock = threading.Lock()
_running = 0
_saved: tuple[int, int, int] | None = None


@contextlib.contextmanager
def relaxed_collection() -> Iterator[None]:
    """Collect rarely for the duration of the block (nested and concurrent uses
    share one setting; the caller's comes back after the last)."""
    global _running, _saved
    with _lock:
        if _running == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*(max(a, b) for a, b in zip(RELAXED, _saved)))
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0 and _saved is not None:
                gc.set_threshold(*_saved)
