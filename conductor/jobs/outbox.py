"""A job's outgoing messages, sent in batches with one publisher confirm each.

A deployment of a thousand units sends thousands of reports and task events;
confirmed one by one, the broker's round trips were most of the job's time
(issue 30: 84 % of the job thread).  The :class:`Outbox` takes every message a
job sends to the API -- reports, task events, job states, its trace and its
result -- and sends them in order, a batch at a time
(:meth:`~fornace.common.broker.Broker.publish_many`: each message still an
AMQP message of its own with its id, as a 0.2 API reads them).  A batch goes
when it is full, or ``batch_seconds`` after its first message
(:class:`~fornace.conductor.jobs.batching.BatchTimer`), so progress shows
while the job waits.

Order: the messages of one queue go in the order they were put; messages to
different queues are not ordered with each other, except that a *final*
message (the result) goes only once everything put before it was confirmed
-- the reports of a job are on the broker before its result.

Nothing is lost on a broker failure: a batch the broker did not confirm
stays at the head of the outbox and goes again, whole, with the same ids
(the API stores by message id).  A report that cannot be sent never ends the
job: it is logged, and kept to be sent with the next batch; only what
:meth:`Outbox.finish` sends last raises.  What is still unsent when the job
ends (:meth:`Outbox.close`), or beyond :data:`MAX_KEPT` messages while the
broker is away, is set aside with a warning, never retried for ever.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Sequence

from fornace.conductor.jobs.batching import BatchTimer

LOG = logging.getLogger(__name__)

#: ``(queue, [(body, message_id), ...])``: :meth:`Broker.publish_many`
Sender = Callable[[str, Sequence[tuple[dict[str, Any], str]]], None]

#: a queue's messages of a batch -> fewer that hold them (contract.pack_reports)
Packer = Callable[[Sequence[tuple[dict[str, Any], str]]], list[tuple[dict[str, Any], str]]]

BATCH_SECONDS = 0.05    # a message waits at most this long for others to go with
BATCH_SIZE = 500        # messages of one batch (one confirm)
MAX_KEPT = 20_000       # unsent messages kept while the broker is away

Entry = tuple[str, dict[str, Any], str, bool]   # queue, body, message id, final


class Outbox:
    """The messages of one job, sent by :attr:`send` in ordered batches."""

    def __init__(self, send: Sender, job_id: str, batch_seconds: float = BATCH_SECONDS,
                 batch_size: int = BATCH_SIZE, max_kept: int = MAX_KEPT,
                 packers: dict[str, Packer] | None = None) -> None:
        self.send = send
        self.packers = packers or {}
        self.job_id = job_id
        self.batch_seconds = batch_seconds
        self.batch_size = batch_size
        self.max_kept = max_kept
        self._timer = BatchTimer(self.flush, batch_seconds, f"{job_id}-outbox")
        self._lock = self._timer.lock
        self._sending = threading.Lock()       # batches go one at a time, in order
        # (queue, body, message id, final): put, not yet confirmed
        self._waiting: list[Entry] = []

    def put(self, queue: str, body: dict[str, Any], message_id: str) -> None:
        """Add a message; it goes with its batch (at once when that is full)."""
        with self._lock:
            self._waiting.append((queue, body, message_id, False))
            full = len(self._waiting) >= self.batch_size or self.batch_seconds <= 0
            self._timer.opened(start=not full)
        if full:
            self.flush()

    def flush(self) -> None:
        """Send what waits now; a failure is logged and what was not confirmed
        stays, to go with the next batch."""
        try:
            self._send_waiting()
        except Exception as exc:  # noqa: BLE001 -- progress lost for now, never the job
            LOG.warning("job %s: messages not sent yet, kept to be sent again: %s",
                        self.job_id, exc)

    def finish(self, queue: str, body: dict[str, Any], message_id: str) -> None:
        """Send ``body`` last, once everything put before it is confirmed, and
        return when it is; raises when the broker did not take it (then it
        and what was not confirmed stay, for :meth:`close` to set aside)."""
        with self._lock:
            self._waiting.append((queue, body, message_id, True))
        self._send_waiting()

    def close(self) -> None:
        """The job ended: send what waits; what the broker does not take is set
        aside with a warning (never retried for ever)."""
        self.flush()
        with self._lock:
            left, self._waiting = self._waiting, []
            self._timer.taken()
        if left:
            LOG.warning("job %s: %d message(s) set aside unsent: the broker did not take "
                        "them (%s)", self.job_id, len(left), _ids(left))

    def _send_waiting(self) -> None:
        with self._sending:
            with self._lock:
                batch, self._waiting = self._waiting, []
                self._timer.taken()
            ordered = runs(batch)
            for index, (queue, entries) in enumerate(ordered):
                messages = [(body, message_id) for _, body, message_id, _ in entries]
                packer = self.packers.get(queue)
                try:
                    self.send(queue, packer(messages) if packer else messages)
                except BaseException:
                    self._keep([entry for _, rest in ordered[index:] for entry in rest])
                    raise

    def _keep(self, unsent: list[Entry]) -> None:
        """What was not confirmed goes back to the head, to go again."""
        with self._lock:
            self._waiting = unsent + self._waiting
            excess = len(self._waiting) - self.max_kept
            if excess > 0:   # the oldest that are not final
                dropped = [entry for entry in self._waiting if not entry[3]][:excess]
                gone = {id(entry) for entry in dropped}
                self._waiting = [entry for entry in self._waiting if id(entry) not in gone]
                LOG.warning("job %s: the broker has not taken %d message(s) for a while; "
                            "the oldest %d set aside (%s)", self.job_id,
                            len(self._waiting) + len(dropped), len(dropped), _ids(dropped))
            if self._waiting:
                self._timer.opened()


def runs(batch: list[Entry]) -> list[tuple[str, list[Entry]]]:
    """``batch`` as ``(queue, entries)`` to send one after another: each
    queue's messages in order, the queues in the order they first appear; a
    final message goes after all that came before it, in its queue's run."""
    found: list[tuple[str, list[Entry]]] = []
    open_runs: dict[str, list[Entry]] = {}   # in the order the queues first appear
    for entry in batch:
        open_runs.setdefault(entry[0], []).append(entry)
        if entry[3]:   # final: everything before it first; its own queue's run last
            mine = open_runs.pop(entry[0])
            found.extend(open_runs.items())
            found.append((entry[0], mine))
            open_runs = {}
    found.extend(open_runs.items())
    return found


def _ids(entries: list[Entry]) -> str:
    shown = ", ".join(entry[2] for entry in entries[:3])
    return shown + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
