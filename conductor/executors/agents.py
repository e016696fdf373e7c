"""The agent side over AMQP: execution plans out, results back.

Each plan goes to its unit's input queue with the plan id as message id;
results come back on the environment's results queue carrying the same id.
A plan that gets no answer within its timeout is reported as timed out (the
0.2 ``timeout`` error shape), so a dead agent never hangs a deployment.
While a plan runs, Fornace agents send its log lines on the same queue
(:func:`contract.is_plan_log` bodies); they go to ``on_log`` and the wait for
the answer goes on.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.executors.base import (AgentExecutor, Fence, JobAgents, PlanReply,
                                              PlanRequest)

LOG = logging.getLogger(__name__)

LogHandler = Callable[[str, list[str]], None]   # (plan id, lines)


class AmqpAgents(AgentExecutor):
    def __init__(self, broker: Broker, environment_id: str, default_timeout: float | None = 3600.0,
                 poll: float = 0.5, clock: Callable[[], float] = time.monotonic,
                 on_log: LogHandler | None = None,
                 halted: Callable[[], str | None] | None = None,
                 absent_after: float | None = 30.0,
                 on_queues: Callable[[list[str]], None] | None = None,
                 boot_timeout: float | None = None, fence: Fence | None = None,
                 results_heartbeat: int = 0) -> None:
        """``on_log(plan_id, lines)`` gets the log lines of running plans (from this
        thread, as they come; an exception in it is logged and ignored);
        ``halted()`` says why to stop waiting for answers (the job lost its lock,
        the conductor stops): the plans still unanswered then fail with it.

        ``absent_after``: an agent that was listening on its queue and has not
        been for that many seconds is gone (its process died, its VM stopped):
        its plans fail then, not at the end of ``default_timeout``.  An agent
        never seen listening is waited for (a new VM boots) -- ``boot_timeout``
        seconds at most, then its plans fail with "no agent is listening".
        Only brokers that count consumers (RabbitMQ, the folder broker) tell;
        None turns either watch off.

        ``on_queues(names)`` is told each queue before it is first used (so the
        queues can be deleted with the environment).

        ``fence()`` is called before each plan goes out: it raises
        :class:`~fornace.conductor.executors.base.Fenced` when the job lost its
        lock, so a holder that wakes after a takeover sends no plan.

        ``results_heartbeat``: the AMQP heartbeat of the results subscription
        (:class:`~fornace.common.broker.Inbox`), so a frozen holder does not keep
        the answers its successor waits for."""
        self.broker = broker
        self.environment_id = environment_id
        self.default_timeout = default_timeout
        self.poll = poll
        self.clock = clock
        self.on_log = on_log
        self.halted = halted
        self.absent_after = absent_after
        self.boot_timeout = boot_timeout
        self.on_queues = on_queues
        self.fence = fence
        self.results_heartbeat = results_heartbeat
        self._told: set[str] = set()

    @classmethod
    def for_job(cls, job: JobAgents) -> "AmqpAgents":
        """The job's agents over its broker (the conductor's default backend)."""
        return cls(job.broker, job.environment_id, job.timeout, halted=job.halted,
                   absent_after=job.absent_after, boot_timeout=job.boot_timeout,
                   on_queues=job.on_queues, fence=job.fence,
                   results_heartbeat=job.results_heartbeat)

    def _tell(self, names: list[str]) -> None:
        new = [name for name in dict.fromkeys(names) if name not in self._told]
        if new and self.on_queues is not None:
            self.on_queues(new)
        self._told.update(new)

    def run(self, requests: list[PlanRequest]) -> list[PlanReply]:
        started = self.clock()
        waiting: dict[str, int] = {}
        replies: list[PlanReply | None] = [None] * len(requests)
        queues = {index: contract.agent_queue(self.environment_id, request.service, request.unit)
                  for index, request in enumerate(requests)}
        self._tell([contract.results_queue(self.environment_id), *queues.values()])
        # subscribed first: the broker pushes answers while later plans still go out
        with self.broker.inbox(contract.results_queue(self.environment_id),
                               heartbeat=self.results_heartbeat) as inbox:
            try:
                inbox.open()
            except Exception as exc:  # noqa: BLE001 -- inbox.get() reconnects
                LOG.warning("environment %s: cannot subscribe to the results yet (%s)",
                            self.environment_id, exc)
            watch = _AgentWatch(self.broker, self.absent_after, self.clock,
                                self.boot_timeout)
            watch.gone(set(queues.values()))   # who listens before the plans go out
            for index, request in enumerate(requests):
                plan_id = request.plan["ID"]
                waiting[plan_id] = index
                if self.fence is not None:
                    self.fence()
                self.broker.publish(queues[index], request.plan, plan_id)
            while waiting:
                received = inbox.get(timeout=self.poll)
                if received is not None:
                    self._accept(received, waiting, replies)
                halted = self.halted() if self.halted is not None else None
                gone = watch.gone({queues[index] for index in waiting.values()})
                elapsed = self.clock() - started
                for plan_id, index in list(waiting.items()):
                    reply = self._unanswered(requests[index], queues[index], halted,
                                             gone.get(queues[index]), elapsed)
                    if reply is not None:
                        del waiting[plan_id]
                        replies[index] = reply
        return [reply or PlanReply(timed_out=True) for reply in replies]

    def _unanswered(self, request: PlanRequest, queue: str, halted: str | None,
                    absent: tuple[bool, float] | None, elapsed: float) -> PlanReply | None:
        """The reply of a plan that will get no answer any more, or None (wait on)."""
        if halted is not None:
            return PlanReply.failure("Halted", halted)
        if absent is not None and not absent[0]:
            LOG.warning("environment %s: no agent of unit %s (%s) ever listened on %s; "
                        "plan %s failed", self.environment_id, request.unit_name,
                        request.unit, queue, request.plan["ID"])
            return PlanReply.failure("NoAgent", f"no agent is listening on {queue} (unit "
                                                f"{request.unit_name}) {absent[1]:.0f} s after "
                                                f"the plan was sent: its VM did not boot, or "
                                                f"its agent reads another queue")
        gone_for = absent[1] if absent is not None else None
        if gone_for is not None:
            LOG.warning("environment %s: the agent of unit %s (%s) is gone; plan %s failed",
                        self.environment_id, request.unit_name, request.unit, request.plan["ID"])
            return PlanReply.failure("AgentGone", f"the agent of unit {request.unit_name} stopped "
                                                  f"listening on its queue {gone_for:.0f} s ago "
                                                  f"and did not come back")
        limit = request.timeout or self.default_timeout
        return PlanReply(timed_out=True) if limit is not None and elapsed >= limit else None

    def _accept(self, received: tuple, waiting: dict[str, int],
                replies: list[PlanReply | None]) -> None:
        body, message_id = received
        if contract.is_plan_log(body):
            self._log(body, message_id)
            return
        index = waiting.pop(message_id or "", None)
        if index is None:
            LOG.info("environment %s: result %s answers no waiting plan, dropped",
                     self.environment_id, message_id)
            return
        try:
            replies[index] = PlanReply(contract.parse_plan_result(body))
        except contract.ContractError as exc:
            replies[index] = PlanReply.failure("MalformedResult", str(exc))

    def _log(self, body: dict[str, Any], message_id: str | None) -> None:
        """Hand log lines to ``on_log``; a bad message or a failing handler is only logged."""
        plan_id, lines = body.get("PlanId"), body.get("Log")
        if not isinstance(plan_id, str) or not isinstance(lines, list) \
                or not all(isinstance(line, str) for line in lines):
            LOG.info("environment %s: malformed log message %s dropped", self.environment_id,
                     message_id)
            return
        if self.on_log is None:
            return
        try:
            self.on_log(plan_id, lines)
        except Exception:  # noqa: BLE001 -- the log must never stop a deployment
            LOG.exception("environment %s: the log handler failed on %d line(s) of plan %s",
                          self.environment_id, len(lines), plan_id)


class _AgentWatch:
    """Which agents stopped listening on their queues, and since when."""

    def __init__(self, broker: Broker, absent_after: float | None,
                 clock: Callable[[], float], boot_timeout: float | None = None) -> None:
        self.broker, self.absent_after, self.clock = broker, absent_after, clock
        self.boot_timeout = boot_timeout
        limits = [limit for limit in (absent_after, boot_timeout) if limit]
        self.every = min(min(limits) / 3, 5.0) if limits else None
        self.started = self.next_check = clock()
        self.seen: set[str] = set()
        self.absent_since: dict[str, float] = {}

    def gone(self, queues: set[str]) -> dict[str, tuple[bool, float]]:
        """queue -> (seen before, seconds absent): the agents gone longer than
        ``absent_after``, and those never seen within ``boot_timeout``."""
        now = self.clock()
        if self.every is None or now < self.next_check or not queues:
            return {}
        self.next_check = now + self.every
        try:
            counts = self.broker.consumers(sorted(queues))
        except Exception as exc:  # noqa: BLE001 -- a broker hiccup: the next check
            LOG.info("cannot count the agents' consumers: %s", exc)
            return {}
        if counts is None:        # this transport cannot tell: watch nothing more
            self.every = None
            return {}
        found = {}
        for queue, count in counts.items():
            if count:
                self.seen.add(queue)
                self.absent_since.pop(queue, None)
            elif queue in self.seen:
                since = self.absent_since.setdefault(queue, now)
                if self.absent_after and now - since >= self.absent_after:
                    found[queue] = (True, now - since)
            elif self.boot_timeout and now - self.started >= self.boot_timeout:
                found[queue] = (False, now - self.started)
        return found
