"""The agent as a finite state machine (Digital Rebar's machine agent, for plans).

A machine with few, named states is easy to reason about and to audit: every
transition is logged at INFO as ``agent state: OLD -> NEW (reason)``, so the
console log of a unit tells what its agent did and why.

* ``INIT`` -- read the journal, answer the plans a dead agent left running
  as failed (except incomplete ones, which are run again), send the answers
  not yet sent (a plan whose commands had ended: as it ended), subscribe to
  the input queue.  Error: sleep, ``INIT`` again.
  Else ``WAIT_FOR_RUNNABLE``.
* ``WAIT_FOR_RUNNABLE`` -- an incomplete plan to re-run, or a plan from the
  input queue: ``RUN_TASK``; the stop signal: ``EXIT``; a broker error:
  ``INIT``.
* ``RUN_TASK`` -- run the plan (the connection is kept alive meanwhile), ack
  it.  Then, by what its scripts' exit codes asked (see
  :data:`fornace.agent.runner.EXIT_SIGNALS`): ``REBOOT`` (64, 192, RebootOnCompletion,
  and 128, which only restarts the agent), ``POWEROFF`` (32, 160), ``EXIT``
  (16), else ``WAIT_FOR_RUNNABLE``.  An error handling the plan or a broker
  error: ``INIT`` (an unacked plan comes again and is answered from the
  journal, never run twice).
* ``REBOOT`` / ``POWEROFF`` / ``EXIT`` -- final: run ``[agent]
  reboot_command`` / ``poweroff_command`` (when set) and end the process with
  :data:`EXIT_REBOOT` / :data:`EXIT_POWEROFF` / :data:`EXIT_STOPPED` (0 when
  ``EXIT`` came from the stop signal).  ``init.sh`` starts the agent again
  after a reboot, and only then.
"""
from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from fornace.agent.inbox import PlanInbox, PlanMessage

if TYPE_CHECKING:
    from fornace.agent.journal import Entry
    from fornace.agent.service import Agent, Outcome

LOG = logging.getLogger(__name__)

EXIT_STOPPED_BY_SIGNAL = 0
EXIT_REBOOT = 3      # a reboot (or a restart for an incomplete plan): start the agent again
EXIT_POWEROFF = 4    # a power off: the unit's agent ends
EXIT_STOPPED = 5     # a script asked the agent to stop (exit 16): it ends

INIT_RETRY = 5.0     # seconds between two INIT attempts
POLL = 0.5           # seconds between two looks at the stop signal while waiting
PUMP = 0.05          # seconds of reading the connection between two looks at a running plan


class State(str, enum.Enum):
    INIT = "INIT"
    WAIT_FOR_RUNNABLE = "WAIT_FOR_RUNNABLE"
    RUN_TASK = "RUN_TASK"
    REBOOT = "REBOOT"
    POWEROFF = "POWEROFF"
    EXIT = "EXIT"


Step = tuple[State, str]     # (next state, why)


@dataclass
class Task:
    """What RUN_TASK runs: a plan from the queue, or an incomplete plan again."""
    message: PlanMessage | None = None
    rerun: "Entry | None" = None


class Machine:
    def __init__(self, agent: "Agent", stop: threading.Event,
                 ready: threading.Event | None = None, *, retry_delay: float = INIT_RETRY,
                 poll: float = POLL) -> None:
        self.agent = agent
        self.stop = stop
        self.ready = ready
        self.retry_delay = retry_delay
        self.poll = poll
        self.state = State.INIT
        self.inbox = PlanInbox(agent.broker(), agent.settings.input_queue)
        self.exit_code = EXIT_STOPPED_BY_SIGNAL
        self._task: Task | None = None
        self._reboot_unit = True     # False: REBOOT only restarts the agent (exit 128)
        self._handlers: dict[State, Callable[[], Step | None]] = {
            State.INIT: self._init, State.WAIT_FOR_RUNNABLE: self._wait,
            State.RUN_TASK: self._run_task, State.REBOOT: self._reboot,
            State.POWEROFF: self._poweroff, State.EXIT: self._exit}

    def run(self) -> int:
        """Run from INIT to a final state; the process exit code."""
        LOG.info("agent state: %s (agent started)", self.state.value)
        try:
            while True:
                step = self._handlers[self.state]()
                if step is None:
                    LOG.info("agent exits in state %s (code %d)", self.state.value,
                             self.exit_code)
                    return self.exit_code
                self._move(*step)
        finally:
            self.inbox.close()
            self.agent.close()

    def _move(self, new: State, reason: str) -> None:
        LOG.info("agent state: %s -> %s (%s)", self.state.value, new.value, reason)
        self.state = new

    # -- the states ---------------------------------------------------------------
    def _init(self) -> Step:
        if self.stop.is_set():
            return State.EXIT, "stop signal"
        try:
            sent = self.agent.startup()
            # the first answer then waits for no handshake
            self.agent.broker().connect([self.agent.settings.result_queue])
            self.inbox.open()
        except Exception as exc:  # noqa: BLE001 -- INIT is retried whatever failed
            self.inbox.close()
            LOG.warning("agent start failed (%s); trying again in %.0f s",
                        self.agent.describe_error(exc), self.retry_delay)
            if self.stop.wait(self.retry_delay):
                return State.EXIT, "stop signal"
            return State.INIT, f"error: {self.agent.describe_error(exc)}"
        if self.ready is not None:
            self.ready.set()
        return State.WAIT_FOR_RUNNABLE, (f"journal read, {sent} answer(s) sent, subscribed "
                                         f"to {self.inbox.queue}")

    def _wait(self) -> Step:
        reruns = self.agent.journal.reruns_pending()
        if reruns and not self.stop.is_set():
            entry = reruns[0]
            self._task = Task(rerun=entry)
            return State.RUN_TASK, (f"plan {entry.id} is incomplete: running it again from "
                                    f"command {entry.next}")
        while not self.stop.is_set():
            try:
                message = self.inbox.get(self.poll)
            except Exception as exc:  # noqa: BLE001 -- any broker failure
                self.inbox.close()
                return State.INIT, f"broker error: {self.agent.describe_error(exc)}"
            if message is not None:
                self._task = Task(message=message)
                return State.RUN_TASK, f"plan {message.message_id} received"
        return State.EXIT, "stop signal"

    def _run_task(self) -> Step:
        task, self._task = self._task, None
        assert task is not None
        outcome, error, broken = self._in_worker(task)
        if error is not None:      # it comes again, answered from the journal if need be
            if task.message is not None:
                self.inbox.give_back(task.message)
            self.inbox.close()
            return State.INIT, f"the plan could not be handled: {error}"
        if task.message is not None and broken is None:
            try:
                self.inbox.ack(task.message)
            except Exception as exc:  # noqa: BLE001 -- redelivered, answered from the journal
                broken = exc
        if broken is not None:
            self.inbox.close()
        return self._after(outcome, broken)

    def _after(self, outcome: "Outcome", broken: Exception | None) -> Step:
        """The state that follows a handled plan."""
        action = outcome.action
        if action == "stop":
            self.exit_code = EXIT_STOPPED
            return State.EXIT, outcome.reason
        if action == "poweroff":
            return State.POWEROFF, outcome.reason
        if action in ("reboot", "restart"):
            self._reboot_unit = action == "reboot"
            return State.REBOOT, outcome.reason
        if broken is not None:
            return State.INIT, f"{outcome.reason}; broker error: " \
                               f"{self.agent.describe_error(broken)}"
        return State.WAIT_FOR_RUNNABLE, outcome.reason

    def _reboot(self) -> None:
        self.inbox.close()
        if self._reboot_unit:
            self.agent.reboot()
        else:
            LOG.info("restarting the agent (exit code %d) to run the incomplete plan again",
                     EXIT_REBOOT)
        self.exit_code = EXIT_REBOOT
        return None

    def _poweroff(self) -> None:
        self.inbox.close()
        self.agent.poweroff()
        self.exit_code = EXIT_POWEROFF
        return None

    def _exit(self) -> None:
        return None

    # -- running a plan -----------------------------------------------------------
    def _in_worker(self, task: Task) -> tuple[Any, str | None, Exception | None]:
        """Run the task in a thread while this one keeps the connection alive.

        (outcome, error text when handling it failed, broker error seen meanwhile).
        A broken connection does not cut the plan short: it finishes first.
        """
        box: dict[str, Any] = {}
        finished = threading.Event()

        def work() -> None:
            try:
                if task.rerun is not None:
                    box["outcome"] = self.agent.rerun(task.rerun)
                else:
                    box["outcome"] = self.agent.execute(task.message.body,
                                                        task.message.message_id)
            except Exception as exc:  # noqa: BLE001 -- reported as a transition reason
                LOG.exception("the agent failed handling a plan")
                box["error"] = self.agent.describe_error(exc)
            finally:
                finished.set()

        threading.Thread(target=work, name="fornace-plan", daemon=True).start()
        broken: Exception | None = None
        while not finished.wait(self.poll):
            if broken is not None or not self.inbox.is_open:
                continue
            try:
                self.inbox.pump(PUMP)
            except Exception as exc:  # noqa: BLE001 -- any broker failure
                LOG.warning("broker connection lost while a plan runs (%s); the plan "
                            "finishes first", self.agent.describe_error(exc))
                broken = exc
        return box.get("outcome"), box.get("error"), broken
