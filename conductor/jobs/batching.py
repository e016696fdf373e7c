"""When a batch of a job's messages goes: at most so long after its first one.

A job sends its task changes and reports by the thousand; one message each
would make the broker's confirms and the API's transactions the job's pace,
and holding them until the job ends would hide its progress.  A
:class:`BatchTimer` calls its ``flush`` a fixed delay after the first item of
a batch, from one thread that lives while batches keep coming (none while a
job is idle).  :class:`~fornace.conductor.jobs.records.JobRecorder` (task
changes, merged by task) and :class:`~fornace.conductor.jobs.outbox.Outbox`
(every message of a job, in order, one publisher confirm per batch) both
keep time with it.
"""
from __future__ import annotations

import threading
import time
from typing import Callable


class BatchTimer:
    """Calls ``flush`` ``seconds`` after a batch's first item.

    The owner guards its batch with :attr:`lock` (given, or made here) and,
    holding it, calls :meth:`opened` for each item it adds and :meth:`taken`
    when it takes the batch to send it; ``flush`` is called without the lock.
    """

    def __init__(self, flush: Callable[[], None], seconds: float, name: str,
                 lock: threading.Lock | None = None) -> None:
        self.flush = flush
        self.seconds = seconds
        self.name = name
        self.lock = lock or threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._due: float | None = None          # when the batch being filled must go
        self._thread: threading.Thread | None = None

    def opened(self, start: bool = True) -> None:
        """An item went into the batch (``lock`` held): the batch's first
        starts the clock, and the thread when none runs (``start=False``: the
        caller sends the batch itself at once; no thread is needed)."""
        if self._due is None:
            self._due = time.monotonic() + self.seconds
        if start and self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name=self.name)
            self._thread.start()

    def taken(self) -> None:
        """The batch was taken to be sent (``lock`` held)."""
        self._due = None

    @property
    def waiting(self) -> bool:
        """True while a batch waits for its time (``lock`` held)."""
        return self._due is not None

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self.lock:
                if self._thread is threading.current_thread():   # flush raised
                    self._thread = None

    def _loop(self) -> None:
        while True:
            with self._wake:
                while True:
                    if self._due is None:   # nothing left: the thread ends
                        self._thread = None
                        return
                    remaining = self._due - time.monotonic()
                    if remaining <= 0:
                        break
                    self._wake.wait(remaining)
            self.flush()
