"""The agent's journal: one JSON object a line, appended and (but ``sent``) fsynced.

Records (``event`` field):

* ``started``  ``{id}`` -- a plan began to run;
* ``result``   ``{id, result, reboot}`` -- its answer, written as soon as the
  plan's commands ended, BEFORE it is sent (an agent that dies then sends it
  when it starts again); ``reboot`` is true when the plan asked for a reboot (the answer is then
  sent after the restart, as Murano 0.2 agents did);
* ``sent``     ``{id}`` -- the answer was published; written without an fsync
  (the next fsynced record, or the system's own writeback, makes it
  durable): lost in a crash of the machine, it only makes the agent send the
  answer once more when it starts again, which the conductor drops as it
  drops any answer it is not waiting for;
* ``rebooted`` ``{id}`` -- the agent came back after that plan's reboot;
* ``incomplete`` ``{id, done, next, count}`` -- a command asked for the plan to
  run again from command ``next`` (after a restart); ``done`` are the result
  entries of the commands before it, ``count`` how many times the plan was
  incomplete so far;
* ``resumed``  ``{id}`` -- the re-run of an incomplete plan began.

A plan ``started`` without result is either waiting for its re-run
(incomplete, not yet resumed) or was interrupted (the agent died while it ran).

The state of a plan is the fold of its records.  A torn last line (a crash
while writing) is skipped.  With ``keep``, a journal that remembers more than
twice that many plans is rewritten at load with the newest ``keep`` (and any
plan not answered, answer not yet sent or reboot not yet done), atomically.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

LOG = logging.getLogger(__name__)


@dataclass
class Entry:
    id: str
    started: bool = False
    result: dict[str, Any] | None = None
    reboot: bool = False
    sent: bool = False
    rebooted: bool = False
    done: list[dict[str, Any]] | None = None   # incomplete: result entries kept
    next: int = 0                              # incomplete: the command to run again
    incompletes: int = 0
    resumed: bool = False

    @property
    def reboot_pending(self) -> bool:
        return self.reboot and not self.rebooted

    @property
    def rerun_pending(self) -> bool:
        """Incomplete, and its re-run has not begun."""
        return self.result is None and self.done is not None and not self.resumed

    @property
    def interrupted(self) -> bool:
        """Started (or resumed) without result while no re-run is pending."""
        return self.started and self.result is None and not self.rerun_pending


class Journal:
    def __init__(self, path: Path, keep: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.entries: dict[str, Entry] = {}
        self._order: list[str] = []
        self._handle: Any = None
        self._load()
        if keep is not None and len(self._order) > 2 * keep:
            self._compact(keep)

    def _compact(self, keep: int) -> None:
        newest = set(self._order[-keep:])
        kept = [i for i in self._order if i in newest or self.entries[i].reboot_pending
                or not self.entries[i].sent]   # unanswered, unsent or to re-run
        partial = self.path.with_name(self.path.name + ".compact")
        with open(partial, "w", encoding="utf-8") as handle:
            for plan_id in kept:
                for record in _records(self.entries[plan_id]):
                    handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.path)
        LOG.info("journal %s: kept %d of %d plans", self.path, len(kept), len(self._order))
        self.entries = {i: self.entries[i] for i in kept}
        self._order = kept

    def _load(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    self._apply(record)
                except (ValueError, KeyError, TypeError):
                    LOG.warning("journal %s: line %d is unreadable, skipped", self.path, number)

    def _apply(self, record: dict[str, Any]) -> None:
        plan_id = record["id"]
        entry = self.entries.get(plan_id)
        if entry is None:
            entry = self.entries[plan_id] = Entry(plan_id)
            self._order.append(plan_id)
        event = record["event"]
        if event == "started":
            entry.started = True
        elif event == "result":
            entry.result = record["result"]
            entry.reboot = bool(record.get("reboot"))
            entry.sent = False
        elif event == "sent":
            entry.sent = True
        elif event == "rebooted":
            entry.rebooted = True
        elif event == "incomplete":
            entry.done = list(record["done"])
            entry.next = int(record["next"])
            entry.incompletes = int(record["count"])
            entry.resumed = False
        elif event == "resumed":
            entry.resumed = True
        else:
            raise KeyError(event)

    def _append(self, record: dict[str, Any], sync: bool = True) -> None:
        record = {**record, "time": round(time.time(), 3)}
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            if self._handle is None:   # kept open: one open() per agent, not per record
                self._handle = open(self.path, "a", encoding="utf-8")
            self._handle.write(line)
            self._handle.flush()
            if sync:
                os.fsync(self._handle.fileno())
            self._apply(record)

    def sync_in_background(self) -> Callable[[], None]:
        """fsync what was written, in a thread of its own; returns the wait for it.

        The answer of a plan is journaled without an fsync, then this runs while
        the answer is published (the two waits overlap): a killed agent finds the
        record anyway (it is in the system's cache); a machine that dies before
        the fsync ended loses it, which a machine dying before the answer was
        published would have made of the plan anyway: answered as interrupted.
        """
        with self._lock:
            handle = self._handle
        if handle is None:
            return lambda: None
        done = threading.Thread(target=_fsync_quietly, args=(handle,), daemon=True,
                                name="fornace-journal-fsync")
        done.start()
        return done.join

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    # -- queries -------------------------------------------------------------
    def get(self, plan_id: str) -> Entry | None:
        return self.entries.get(plan_id)

    def unsent(self) -> list[Entry]:
        """Answers journaled but not (known to be) sent, oldest first."""
        return [self.entries[i] for i in self._order
                if self.entries[i].result is not None and not self.entries[i].sent]

    def reboots_pending(self) -> list[Entry]:
        return [self.entries[i] for i in self._order if self.entries[i].reboot_pending]

    def reruns_pending(self) -> list[Entry]:
        """Incomplete plans to run again, oldest first."""
        return [self.entries[i] for i in self._order if self.entries[i].rerun_pending]

    def interrupted(self) -> list[Entry]:
        """Plans the agent was running when it died, oldest first."""
        return [self.entries[i] for i in self._order if self.entries[i].interrupted]

    # -- records -------------------------------------------------------------
    def started(self, plan_id: str) -> None:
        self._append({"event": "started", "id": plan_id})

    def result(self, plan_id: str, result: dict[str, Any], reboot: bool = False,
               sync: bool = True) -> None:
        """``sync=False``: the caller fsyncs (:meth:`sync_in_background`)."""
        self._append({"event": "result", "id": plan_id, "result": result, "reboot": reboot},
                     sync=sync)

    def sent(self, plan_id: str) -> None:
        self._append({"event": "sent", "id": plan_id}, sync=False)

    def rebooted(self, plan_id: str) -> None:
        self._append({"event": "rebooted", "id": plan_id})

    def incomplete(self, plan_id: str, done: list[dict[str, Any]], next_command: int,
                   count: int) -> None:
        self._append({"event": "incomplete", "id": plan_id, "done": done,
                      "next": next_command, "count": count})

    def resumed(self, plan_id: str) -> None:
        self._append({"event": "resumed", "id": plan_id})


def _records(entry: Entry) -> list[dict[str, Any]]:
    """Records whose fold is ``entry``."""
    records: list[dict[str, Any]] = []
    if entry.started:
        records.append({"event": "started", "id": entry.id})
    if entry.done is not None:
        records.append({"event": "incomplete", "id": entry.id, "done": entry.done,
                        "next": entry.next, "count": entry.incompletes})
    if entry.resumed:
        records.append({"event": "resumed", "id": entry.id})
    if entry.result is not None:
        records.append({"event": "result", "id": entry.id, "result": entry.result,
                        "reboot": entry.reboot})
    if entry.sent:
        records.append({"event": "sent", "id": entry.id})
    if entry.rebooted:
        records.append({"event": "rebooted", "id": entry.id})
    return records


def _fsync_quietly(handle: Any) -> None:
    try:
        os.fsync(handle.fileno())
    except (OSError, ValueError) as exc:   # closed meanwhile: the close flushed it
        LOG.warning("journal fsync failed: %s", exc)
