"""The agent core: plan in, journal, run, journal, answer.

:meth:`Agent.execute` handles one plan body (:meth:`Agent.process` returns
just its answer; the tests drive both directly), :meth:`Agent.rerun` runs an
incomplete plan again, and :meth:`Agent.serve` runs the state machine of
:mod:`fornace.agent.states` around them.  Plans are handled one at a time, in queue
order (prefetch 1), and a plan message is acked only once its answer is
journaled and published (for a RebootOnCompletion plan: journaled, the answer
goes out after the restart; for an incomplete plan: journaled for the
re-run, the answer is the one of the re-run).
"""
from __future__ import annotations

import hashlib
import json
import logging
import shlex
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, Callable

from fornace.agent.config import AgentSettings
from fornace.agent.holds import COMMANDS_ENDED, hold
from fornace.agent.journal import Entry, Journal
from fornace.agent.logstream import LogSender, LogStream
from fornace.agent.plan import Plan, PlanError, decode_body, parse_plan, plan_id
from fornace.agent.runner import PlanRun, Runner
from fornace.agent.states import EXIT_POWEROFF, EXIT_REBOOT, EXIT_STOPPED, Machine
from fornace.common import contract
from fornace.common.broker import Broker, describe
from fornace.common.brokerurl import passwords
from fornace.common.secrets import mask_text

LOG = logging.getLogger(__name__)

__all__ = ["Agent", "AgentBroker", "Outcome", "EXIT_REBOOT", "EXIT_POWEROFF", "EXIT_STOPPED"]

Publisher = Callable[[str, dict[str, Any]], None]   # (plan id, result)


def interrupted_result() -> dict[str, Any]:
    return contract.exception_result("AgentInterrupted", "the agent stopped while this plan "
                                                         "ran; it is not run a second time")


@dataclass
class Outcome:
    """A handled plan: its answer and what its scripts asked the agent to do next."""
    plan_id: str
    answer: dict[str, Any] | None    # None: incomplete, answered after its re-run
    action: str | None = None        # "stop", "poweroff", "reboot", "restart" (exit 128)
    reason: str = ""                 # for the state machine's log
    to_send: bool = False            # the answer is journaled, not yet published
    synced: Callable[[], None] | None = None   # waits for the journal's fsync of it


class Agent:
    def __init__(self, settings: AgentSettings, publish: Publisher | None = None,
                 publish_log: LogSender | None = None) -> None:
        """``publish`` (and ``publish_log`` for log lines) replace the broker in tests;
        without ``publish`` both go to the results queue."""
        self.settings = settings
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(settings.journal, keep=settings.journal_keep)
        self.runner = Runner(settings)
        self.publish = self._publish_to_broker if publish is None else publish
        self.publish_log = self._publish_log_to_broker if publish is None else publish_log
        self.reboot_requested: str | None = None   # id of the plan that asked
        self._broker: Broker | None = None

    # -- the core --------------------------------------------------------------
    def process(self, body: Any, message_id: str | None = None) -> dict[str, Any] | None:
        """Answer one plan (running it at most once) and return the answer
        (None for an incomplete plan: it is answered after its re-run)."""
        return self.execute(body, message_id).answer

    def execute(self, body: Any, message_id: str | None = None) -> Outcome:
        """Handle one plan message: run it unless the journal knows it already."""
        try:
            parsed_body: Any = decode_body(body)
            key = plan_id(parsed_body) or message_id
        except PlanError:
            parsed_body, key = None, message_id
        if key is None:   # nothing to correlate with: key by content
            key = "sha256:" + hashlib.sha256(_bytes(body)).hexdigest()
        entry = self.journal.get(key)
        if entry is not None and entry.result is not None:
            LOG.info("plan %s was answered before; sending the journaled answer again", key)
            self._send(key, entry.result)
            return Outcome(key, entry.result, reason=f"plan {key} answered again")
        if entry is not None and entry.rerun_pending:
            return self.rerun(entry)
        if entry is not None and entry.started:
            return self._answer(key, interrupted_result(),
                                f"plan {key} was interrupted before: answered as failed")

        self.journal.started(key)
        try:
            plan = parse_plan(parsed_body if parsed_body is not None else body)
        except PlanError as exc:
            LOG.warning("plan %s cannot run: %s: %s", key, exc.kind, exc)
            return self._answer(key, contract.exception_result(exc.kind, str(exc)),
                                f"plan {key} cannot run: {exc.kind}")
        return self._run(plan, key, incompletes=0)

    def rerun(self, entry: Entry) -> Outcome:
        """Run an incomplete plan again from the command that was incomplete."""
        key = entry.id
        try:
            plan = parse_plan(self.runner.load_plan(key))
        except (OSError, ValueError, PlanError) as exc:
            LOG.error("incomplete plan %s cannot be run again: %s", key, exc)
            return self._answer(key, contract.exception_result(
                "IncompletePlanLost", f"the incomplete plan cannot be run again: {exc}"),
                f"incomplete plan {key} is lost: answered as failed")
        LOG.info("plan %s: running it again from command %d (incomplete %d time(s))", key,
                 entry.next, entry.incompletes)
        self.journal.resumed(key)
        return self._run(plan, key, incompletes=entry.incompletes, start=entry.next,
                         done=entry.done or [])

    def _run(self, plan: Plan, key: str, incompletes: int, start: int = 0,
             done: list[dict[str, Any]] | tuple = ()) -> Outcome:
        """Run the commands (streaming their output lines), journal how the plan
        ended, then send its answer.

        The end is journaled as soon as the last command ended, before the last
        log lines go out (a broker in trouble can hold them) and before the
        answer: an agent killed from then on sends that answer when it starts
        again (:meth:`startup`) instead of answering the plan as interrupted.
        Its fsync runs meanwhile, and ends before the answer is marked sent.
        """
        stream = None
        if self.publish_log is not None and not key.startswith("sha256:"):
            stream = LogStream(key, self.publish_log)
        try:
            try:
                run = self.runner.run_plan(plan, key, start=start, done=done,
                                           on_line=stream.add if stream else None)
            except Exception as exc:   # noqa: BLE001 -- the agent itself failed
                LOG.exception("plan %s: the agent failed running it", key)
                run = PlanRun(contract.exception_result(type(exc).__name__,
                                                        f"the agent failed: {exc}"))
            outcome = self._conclude(plan, key, run, incompletes)
            hold(COMMANDS_ENDED, key)
        finally:
            if stream is not None:
                stream.close()    # the last lines go out before the answer
        self.runner.prune(keep=self.runner.plan_folder(key))
        return self._deliver(outcome)

    def _conclude(self, plan: Plan, key: str, run: PlanRun, incompletes: int) -> Outcome:
        """Journal what the run gave: an incomplete plan to re-run, or the answer
        (sent by :meth:`_deliver`)."""
        asked = run.signal
        what = f"{run.name} exited {run.code}"
        if asked is not None and asked.incomplete:
            count = incompletes + 1
            if count <= self.settings.max_incomplete:
                self.runner.save_plan(plan, key)
                self.journal.incomplete(key, run.result["Result"], run.command or 0, count)
                action = asked.action or "restart"
                LOG.info("plan %s is incomplete (%d time(s)); it runs again after the %s",
                         key, count, action)
                return Outcome(key, None, action, f"plan {key}: {what}, incomplete: "
                                                  f"{action} and run it again")
            run.result["Result"].append(contract.exception_result(
                "TooManyIncompleteRuns", f"{run.name} reported 'incomplete' (exit "
                f"{run.code}) {count} times, more than [agent] max_incomplete = "
                f"{self.settings.max_incomplete}"))
            asked = None
        result = run.result
        failed = result["IsException"] or any(e["IsException"] for e in result["Result"])
        if plan.reboot == 2 or (plan.reboot == 1 and not failed):
            return self._journal_answer(key, result, f"plan {key} asks for a reboot "
                                                     f"(RebootOnCompletion {plan.reboot})",
                                        deferred_reboot=True)
        if asked is None:
            return self._journal_answer(key, result, f"plan {key} answered")
        outcome = self._journal_answer(key, result, f"plan {key} answered; {what}: "
                                                    f"{asked.action}")
        outcome.action = asked.action
        return outcome

    def _answer(self, key: str, result: dict[str, Any], reason: str) -> Outcome:
        """Journal the answer, then send it."""
        return self._deliver(self._journal_answer(key, result, reason))

    def _journal_answer(self, key: str, result: dict[str, Any], reason: str,
                        deferred_reboot: bool = False) -> Outcome:
        """Journal the answer, to send -- or, for a reboot plan, kept for after it."""
        contract.parse_plan_result(result)   # our own answers follow the contract
        # an answer to send now is fsynced while it is published (the two waits overlap)
        self.journal.result(key, result, reboot=deferred_reboot, sync=deferred_reboot)
        if deferred_reboot:
            self._forget_inputs(key)
            LOG.info("plan %s asks for a reboot; its answer is sent after the restart", key)
            self.reboot_requested = key
            return Outcome(key, result, "reboot", reason)
        return Outcome(key, result, None, reason, to_send=True,
                       synced=self.journal.sync_in_background())

    def _deliver(self, outcome: Outcome) -> Outcome:
        """Send a journaled answer that is to be sent now."""
        if outcome.to_send:
            assert outcome.answer is not None
            self._send(outcome.plan_id, outcome.answer, outcome.synced)
            outcome.to_send = False
            self._forget_inputs(outcome.plan_id)   # after the answer: it waits for no disk
        return outcome

    def _forget_inputs(self, key: str) -> None:
        if not self.settings.keep_plan_inputs:   # answered: its inputs are not needed
            self.runner.forget_inputs(key)

    def _send(self, key: str, result: dict[str, Any],
              synced: Callable[[], None] | None = None) -> None:
        try:
            self.publish(key, result)
        finally:
            if synced is not None:
                synced()      # the answer's record is on disk before its "sent"
        self.journal.sent(key)

    def startup(self) -> int:
        """After a (re)start: fail the plans a dead agent left running (incomplete
        ones excepted: they run again), then send the answers journaled but not
        sent, oldest first -- among them those of plans whose commands had ended
        when the agent died, as they ended: the script is not run again.  The
        number of answers sent."""
        for entry in self.journal.interrupted():
            LOG.warning("plan %s was running when the agent stopped; it is answered as "
                        "failed, not run again", entry.id)
            self.journal.result(entry.id, interrupted_result())
        sent = 0
        for entry in self.journal.unsent():
            LOG.info("sending the journaled answer of plan %s", entry.id)
            self._deliver(Outcome(entry.id, entry.result, to_send=True))
            sent += 1
        for entry in self.journal.reboots_pending():
            self.journal.rebooted(entry.id)
        return sent

    def reboot(self) -> None:
        """Carry out a reboot request: the configured command, or only a log line."""
        self._system_command("a reboot", "reboot_command", self.settings.reboot_command,
                             EXIT_REBOOT)

    def poweroff(self) -> None:
        """Carry out a power-off request: the configured command, or only a log line."""
        self._system_command("a power off", "poweroff_command",
                             self.settings.poweroff_command, EXIT_POWEROFF)

    def _system_command(self, what: str, option: str, command: str, code: int) -> None:
        command = command.strip()
        if not command:
            LOG.warning("%s was asked for; no [agent] %s is set, so the agent only exits "
                        "(code %d)", what, option, code)
            return
        LOG.warning("%s was asked for: running %r", what, command)
        try:
            subprocess.run(shlex.split(command), check=False, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            LOG.error("%s %r failed: %s", option, command, exc)

    def describe_error(self, exc: BaseException) -> str:
        """``Type: message`` of an error (or the queue type mismatch it means),
        with the password of every broker host masked."""
        text = describe(exc, self.settings.broker_queue_type)
        return mask_text(text, passwords(self.settings.broker_url))

    # -- over the broker -----------------------------------------------------------
    def broker(self) -> Broker:
        if self._broker is None:
            self._broker = AgentBroker(self.settings.broker_url, ssl=self.settings.broker_ssl,
                                       queue_type=self.settings.broker_queue_type)
        return self._broker

    def _publish_to_broker(self, key: str, result: dict[str, Any]) -> None:
        message_id = None if key.startswith("sha256:") else key
        self.broker().publish(self.settings.result_queue, result, message_id)

    def _publish_log_to_broker(self, key: str, lines: list[str], message_id: str) -> None:
        self.broker().publish(self.settings.result_queue, contract.plan_log_body(key, lines),
                              message_id)

    def serve(self, stop: threading.Event, ready: threading.Event | None = None) -> int:
        """Run the state machine until a final state; the process exit code.

        0 after ``stop``, :data:`EXIT_REBOOT` (3), :data:`EXIT_POWEROFF` (4) or
        :data:`EXIT_STOPPED` (5) as the plans asked.  ``ready`` is set once the
        agent is subscribed to its input queue.
        """
        if not self.settings.input_queue or not self.settings.result_queue:
            raise ValueError("input_queue and result_routing_key must be configured")
        return Machine(self, stop, ready).run()

    def close(self) -> None:
        self.journal.close()
        if self._broker is not None:
            self._broker.close()
            self._broker = None


class AgentBroker(Broker):
    """A :class:`Broker` that can reach RabbitMQ over TLS (``broker_ssl``)."""

    def __init__(self, url: str, ssl: bool = False, **options: Any) -> None:
        super().__init__(url, **options)
        self.ssl = ssl

    def connection(self, heartbeat: int | None = None):
        conn = super().connection(heartbeat)
        if self.ssl and not self.local:
            conn.ssl = True
        return conn


def _bytes(body: Any) -> bytes:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8", "replace")
    return json.dumps(body, sort_keys=True, default=str).encode()
