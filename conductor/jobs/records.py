"""Jobs and their tasks, as the conductor records them.

Every Heat round and every agent command of a job is a *task* with a change
id -- sortable (it starts with the time) and unique per environment (one job
runs per environment at a time, and ids grow within a job) -- a target, an
operation, a reason (new, reconfigure, repair, rerun, ...), a status, start
and end times, a result summary and log lines.  :class:`JobRecorder` sends
each change of a task to the API on the ``job-events`` queue as it happens,
so the job's progress is visible while it runs.
"""
from __future__ import annotations

import datetime
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from fornace.common import contract
from fornace.common.canonicaljson import canonical_json
from fornace.conductor.jobs.batching import BatchTimer

LOG = logging.getLogger(__name__)

Publisher = Callable[[dict[str, Any], str], None]   # (job-events body, message id)

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"   # Crockford's base 32: sorts as text


def _base32(number: int, width: int) -> str:
    digits = []
    for _ in range(width):
        number, digit = divmod(number, 32)
        digits.append(_ALPHABET[digit])
    return "".join(reversed(digits))


_COUNTER_LIMIT = 32 ** 3                               # what 3 characters can count
_COUNTERS = [_base32(n, 3) for n in range(1024)]       # the usual counters, written once


class ChangeIds:
    """Change ids: 10 characters of milliseconds, then 3 of a counter.

    Sortable as text in creation order; the counter keeps ids of one job
    distinct (and growing) within a millisecond or if the clock steps back.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._last = (0, 0)
        self._prefix = (0, _base32(0, 10))   # the millisecond part, written once per millisecond
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            millis = int(self.clock() * 1000)
            last_millis, counter = self._last
            if millis <= last_millis:
                millis, counter = last_millis, counter + 1
                if counter >= _COUNTER_LIMIT:   # the counter is full: the next millisecond
                    millis, counter = last_millis + 1, 0
            else:
                counter = 0
            self._last = (millis, counter)
            if self._prefix[0] != millis:
                self._prefix = (millis, _base32(millis, 10))
            return self._prefix[1] + (_COUNTERS[counter] if counter < len(_COUNTERS)
                                      else _base32(counter, 3))


_second: tuple[int, str] = (0, "")   # the last whole second written, and its text


def now_iso() -> str:
    """The time now in UTC, ISO 8601 to the millisecond (the second's part
    written once per second: tasks start and end by the thousand)."""
    global _second
    now = time.time()
    cached = _second   # one read: another thread may replace it meanwhile
    if cached[0] != int(now):
        cached = _second = (int(now), datetime.datetime.fromtimestamp(
            int(now), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{cached[1]}.{int((now - cached[0]) * 1000):03d}+00:00"


@dataclass(slots=True)
class TaskRecord:
    """One task of a job; changes go out as job events through the recorder."""

    recorder: "JobRecorder"
    change_id: str
    target: str | None
    target_name: str | None
    operation: str
    reason: str
    status: str = "pending"
    started: str | None = None
    finished: str | None = None
    summary: str = ""
    digest: str | None = None
    log: list[str] = field(default_factory=list)

    def add_log(self, lines: list[str]) -> None:
        lines = [self.recorder.mask(str(line)) for line in lines]
        if lines:
            self.log.extend(lines)
            self.recorder.send(self, log=lines)

    def finish(self, status: str, summary: str = "") -> None:
        self.status, self.finished = status, now_iso()
        self.summary = self.recorder.mask(summary)[:2000]
        self.recorder.send(self, status=status, finished=self.finished, summary=self.summary,
                           digest=self.digest)

    def full(self) -> dict[str, Any]:
        return {"change_id": self.change_id, "target": self.target,
                "target_name": self.target_name, "operation": self.operation,
                "reason": self.reason, "status": self.status, "started": self.started,
                "finished": self.finished, "summary": self.summary, "digest": self.digest}


class JobRecorder:
    """The tasks of one job, sent as ``job-events`` (or only kept, without a publisher).

    Changes are sent in batches (``tasks`` events, contract 1.4): a job of a
    thousand units changes thousands of tasks, and one message each would
    make the broker's confirms and the API's transactions the job's pace.
    A batch goes ``batch_seconds`` after its first change (so progress shows
    while a job waits for its agents), when it holds ``batch_size`` tasks, or
    on :meth:`flush` -- which the conductor calls before it sends the job's
    result, so the API has stored every task when the result ends the job.
    Changes of one task within a batch are merged (log lines appended in
    order).  ``batch_seconds = 0`` sends every change at once.  The node
    states that changed (:meth:`node`) go with the batch, the latest of each.
    """

    def __init__(self, environment_id: str, job_id: str | None,
                 publish: Publisher | None = None, mask: Callable[[str], str] | None = None,
                 change_ids: ChangeIds | None = None, batch_seconds: float = 0.25,
                 batch_size: int = 200) -> None:
        self.environment_id = environment_id
        self.job_id = job_id or f"job-{environment_id}"
        self.publish = publish
        self.mask = mask or (lambda text: text)
        self.ids = change_ids or ChangeIds()
        self.batch_seconds = batch_seconds
        self.batch_size = min(batch_size, contract.MAX_TASKS_PER_EVENT)
        self.tasks: list[TaskRecord] = []
        self._events = 0
        self._timer = BatchTimer(self.flush, batch_seconds, f"{self.job_id}-events")
        self._lock = self._timer.lock          # the batch being filled and its timer
        self._sending = threading.Lock()       # batches go out one at a time, in order
        self._batch: dict[str, dict[str, Any]] = {}   # change id -> its merged changes
        self._nodes: dict[str, dict[str, Any]] = {}   # node id -> the unit or service

    def task(self, target: str | None, target_name: str | None, operation: str, reason: str,
             status: str = "pending", digest: str | None = None,
             summary: str = "") -> TaskRecord:
        """A new task, sent at once with its first status: ``running`` (it
        starts now), one that ended (``summary``: why), or pending/planned --
        one event where a task created, then started or ended would send two."""
        record = TaskRecord(self, self.ids.next(), target, target_name, operation, reason,
                            status=status, digest=digest)
        if status == "running":
            record.started = now_iso()
        elif status not in ("pending", "planned"):
            record.finished = now_iso()
            record.summary = self.mask(summary)[:2000]
        self.tasks.append(record)
        self._add(record.change_id, record.full())
        return record

    def send(self, record: TaskRecord, **changes: Any) -> None:
        """Add a change of ``record`` to the batch (sent as the class says)."""
        self._add(record.change_id, changes)

    def node(self, obj: dict[str, Any]) -> None:
        """A unit's or service's node state or status changed: it goes with the
        batch (its state and status as they are when the batch goes: the latest)."""
        node_id = obj.get("id")
        if self.publish is None or node_id is None:
            return
        with self._lock:
            self._nodes[node_id if isinstance(node_id, str) else str(node_id)] = obj
            full = len(self._nodes) >= contract.MAX_NODES_PER_EVENT or self.batch_seconds <= 0
            self._timer.opened(start=not full)
        if full:
            self.flush()

    def _add(self, change_id: str, changes: dict[str, Any]) -> None:
        if self.publish is None:
            return
        with self._lock:
            merged = self._batch.get(change_id)
            if merged is None:
                self._batch[change_id] = changes   # the first change of it in this batch
                changes["change_id"] = change_id
            else:
                lines = changes.pop("log", None)
                merged.update(changes)
                if lines:
                    merged["log"] = [*merged.get("log", ()), *lines]
            full = len(self._batch) >= self.batch_size or self.batch_seconds <= 0
            self._timer.opened(start=not full)
        if full:
            self.flush()

    def flush(self) -> None:
        """Send the changes not sent yet, now."""
        with self._sending:
            with self._lock:
                batch, self._batch = list(self._batch.values()), {}
                nodes, self._nodes = self._nodes, {}
                self._timer.taken()
                if batch or nodes:
                    self._events += 1
            if not batch and not nodes:
                return
            try:
                self.publish(self._events_body(batch, _node_states(nodes)),
                             f"{self.job_id}-events-{self._events}")
            except Exception as exc:  # progress lost, never the job
                LOG.warning("job %s: could not send the changes of %d task(s): %s",
                            self.job_id, len(batch), exc)

    def _events_body(self, batch: list[dict[str, Any]],
                     nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The ``tasks`` event of ``batch`` and ``nodes``.  When the contract
        refuses it (an id from before the API checked them: 300 characters,
        a '/'), each task and node is checked alone and the bad ones are set
        aside with the reason logged: one bad record never loses the others."""
        try:
            return contract.task_events_body(self.environment_id, self.job_id, batch, nodes)
        except contract.ContractError:
            pass
        good = [task for task in batch
                if self._acceptable([task], None, f"task {task.get('change_id')}")]
        kept = {node_id: node for node_id, node in nodes.items()
                if self._acceptable([], {node_id: node}, f"node {_shown(node_id)}")}
        return contract.task_events_body(self.environment_id, self.job_id, good, kept)

    def _acceptable(self, tasks: list[dict[str, Any]], nodes: dict[str, Any] | None,
                    what: str) -> bool:
        """Whether the contract takes these tasks and nodes; logged when not."""
        try:
            contract.task_events_body(self.environment_id, self.job_id, tasks, nodes)
            return True
        except contract.ContractError as exc:   # its text never quotes the values
            LOG.warning("job %s: set aside %s: %s", self.job_id, what, exc)
            return False

    def job_state(self, state: str, summary: str = "") -> None:
        if self.publish is None:
            return
        self.flush()   # the tasks first, as they happened
        try:
            self.publish(contract.job_event_body(self.environment_id, self.job_id, state,
                                                 self.mask(summary)),
                         f"{self.job_id}-job-{state}")
        except Exception as exc:
            LOG.warning("job %s: could not send its state %s: %s", self.job_id, state, exc)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.tasks:
            counts[record.status] = counts.get(record.status, 0) + 1
        return counts


def _shown(node_id: str) -> str:
    """A node id as a log line shows it: quoted, its first 40 characters."""
    return repr(node_id[:40]) + (f" ({len(node_id)} characters)" if len(node_id) > 40 else "")


def _node_states(nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{id: {"state", "local", "hostname", "address", "url"}}`` of the units and
    services, as they are now (an endpoint their state does not hold, or holds
    as no string the contract takes, left out)."""
    found = {}
    for node_id, obj in nodes.items():
        status = obj.get("status")
        if isinstance(status, dict):
            found[node_id] = {"state": status.get("state"), "local": status.get("local"),
                              **_endpoints(obj.get("state"))}
    return found


def _endpoints(state: Any) -> dict[str, str]:
    if not isinstance(state, dict):
        return {}
    return {name: value for name in contract.NODE_ENDPOINTS
            if isinstance(value := state.get(name), str)
            and 0 < len(value) <= contract.MAX_ENDPOINT_CHARS}


def result_summary(ok: bool, value: Any) -> str:
    """A task's one-line summary of a plan's result (0.2 shape) or error list."""
    if ok:
        first = next((entry.get("Result") for entry in value or [] if isinstance(entry, dict)),
                     None)
        text = _as_text(first)
        return f"ok: {text}" if text else "ok"
    messages = []
    for error in value or []:
        if isinstance(error, dict):
            messages.extend(str(m) for m in error.get("messages") or [])
    return "; ".join(messages) or "failed"


def _as_text(value: Any, limit: int = 2000) -> str:
    """A command's result as a person reads it: text as it is, a list of texts
    one after another, anything else as compact JSON (never a Python repr)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "; ".join(value)[:limit]
    return canonical_json(value)[:limit]
