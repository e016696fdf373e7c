"""What the loop asks of the cloud: the Heat side and the agent side.

The real executors (python-heatclient, AMQP agents) and the simulator all
implement these two small interfaces, so the workflow loop never knows which
one it talks to.
"""
from __future__ import annotations

import abc
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from fornace.common import contract


LOG = logging.getLogger(__name__)

#: confirms that the job may still change the cloud; raises :class:`Fenced` if not
Fence = Callable[[], None]


class Fenced(BaseException):
    """The job's grant is no longer its environment's lock (another conductor
    took the job over, or a user abandoned it): nothing more of it may reach
    the cloud.  Raised before a step that would change it.

    A BaseException, as asyncio's CancelledError is: it stops the job rather
    than failing a step, so no ``except Exception`` on its way (an executor
    error turned into a workflow failure, an internal error reported) may take
    it for one and let the workflow go on; the conductor ends such a job as
    one whose lock was lost."""


class StackFailure(Exception):
    """A stack create/update/delete did not end as expected."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or message


@dataclass
class StackSource:
    """One ``update-cf-stack`` that contributed to a merged template."""

    template: str
    mappings: dict[str, Any]


@dataclass
class StackRequest:
    stack_name: str
    template: dict[str, Any]
    parameters: dict[str, Any]
    sources: list[StackSource] = field(default_factory=list)


@dataclass
class PlanRequest:
    """An execution plan for one unit's agent."""

    service: str
    unit: str
    template: str
    plan: dict[str, Any]
    timeout: float | None = None
    labels: frozenset[str] = frozenset()  # unit id, name and hostname

    @property
    def unit_name(self) -> str:
        """How a person knows the unit: its name and hostname, else its id."""
        return " / ".join(sorted(self.labels - {self.unit})) or self.unit


@dataclass
class PlanReply:
    result: Any = None  # the 0.2 result document
    timed_out: bool = False

    @classmethod
    def failure(cls, kind: str, message: str) -> "PlanReply":
        """The answer of a plan that failed before (or without) its agent answered."""
        return cls(contract.exception_result(kind, message))


class StackExecutor(abc.ABC):
    """The Heat side of a deployment.  Backends are listed by name in
    ``fornace.conductor.executors.STACKS``."""

    @classmethod
    def factory(cls, conf: Any) -> Callable[[Any], "StackExecutor"]:
        """``task -> executor`` for the conductor, from its configuration: one
        executor per task, or one shared by every task, as the backend needs.
        Only the backends of the name table have one."""
        raise NotImplementedError(f"{cls.__name__} is not a backend the conductor can name")

    @abc.abstractmethod
    def apply(self, request: StackRequest) -> dict[str, Any]:
        """Merge the template into the stack's current one (creating the stack if
        absent), wait for the result; return the outputs or raise StackFailure."""

    @abc.abstractmethod
    def delete(self, stack_name: str) -> None:
        """Delete the stack (absent is fine); raise StackFailure on failure."""

    @abc.abstractmethod
    def remove(self, stack_name: str, resources: list[str]) -> dict[str, Any]:
        """Remove resources (and the outputs using them) from the stack; return its outputs.

        Rounds only ever merge into the stack, so scale-in, heal and uninstall
        need this to drop some units' instances while keeping the others.
        The template surgery is :func:`fornace.conductor.executors.cfn.remove_resources`:
        names the stack lacks are ignored, a remaining resource still referring
        to a removed one is a StackFailure.  An absent stack gives ``{}``; a
        stack left without resources is deleted (``{}``).  Waits like ``apply``.
        """


    # -- for `fornace gc`: the stacks a backend keeps ------------------------------
    def stack_names(self) -> list[str]:
        """The stacks this backend holds (those it can list)."""
        raise NotImplementedError(f"{type(self).__name__} cannot list its stacks")

    def describe(self, stack_name: str) -> str:
        """A line on one stack, for a person."""
        return ""


class UnreachableStacks(StackExecutor):
    """Stands for the stack backend a task could not get (its cloud refused its
    credentials, no endpoint...): every stack action fails with why, so the
    workflow's failure branches run and the job ends with that error -- the
    task is answered, not retried for ever."""

    def __init__(self, why: str) -> None:
        self.why = why

    def _fail(self, stack_name: str) -> StackFailure:
        return StackFailure(f"stack {stack_name}: {self.why}", self.why)

    def apply(self, request: StackRequest) -> dict[str, Any]:
        raise self._fail(request.stack_name)

    def delete(self, stack_name: str) -> None:
        raise self._fail(stack_name)

    def remove(self, stack_name: str, resources: list[str]) -> dict[str, Any]:
        raise self._fail(stack_name)

    def describe(self, stack_name: str) -> str:
        return f"unknown ({self.why})"


class FencedStacks(StackExecutor):
    """``inner``, with the job's ``fence`` checked before each stack action: a
    holder that lost its lock (a takeover while it was frozen) changes no
    stack, whatever it had in hand when it stopped."""

    def __init__(self, inner: StackExecutor, fence: Fence) -> None:
        self.inner = inner
        self.fence = fence

    def apply(self, request: StackRequest) -> dict[str, Any]:
        self.fence()
        return self.inner.apply(request)

    def delete(self, stack_name: str) -> None:
        self.fence()
        self.inner.delete(stack_name)

    def remove(self, stack_name: str, resources: list[str]) -> dict[str, Any]:
        self.fence()
        return self.inner.remove(stack_name, resources)

    def stack_names(self) -> list[str]:
        return self.inner.stack_names()

    def describe(self, stack_name: str) -> str:
        return self.inner.describe(stack_name)


@dataclass
class JobAgents:
    """What an agent backend gets to answer one job's plans (``for_job``)."""

    broker: Any                      # fornace.common.broker.Broker of the job
    environment_id: str
    timeout: float | None            # [engine] agent_timeout (None: no limit)
    absent_after: float | None = None
    boot_timeout: float | None = None
    halted: Callable[[], str | None] | None = None
    on_queues: Callable[[list[str]], None] | None = None
    fence: Fence | None = None       # checked before each plan is sent (None: no lock)
    # the AMQP heartbeat of the results subscription (0: none): a frozen holder's
    # subscription is dropped after about that long, and the answers pushed to it
    # go to the conductor that took its job over
    results_heartbeat: int = 0


class AgentExecutor(abc.ABC):
    #: each unit has a queue on the broker (its agent declares it as it starts,
    #: plans sent or not): the conductor writes them down, to be deleted with
    #: the environment
    unit_queues = True

    @abc.abstractmethod
    def run(self, requests: list[PlanRequest]) -> list[PlanReply]:
        """Run the plans (in order per unit) and return one reply each."""


def run_plans(agents: AgentExecutor, requests: list[PlanRequest]) -> list[PlanReply]:
    """``agents.run(requests)``, one reply per request whatever happens: an
    executor that raises, or answers fewer plans than it was given, yields
    error replies naming each plan left without an answer (never a silent
    drop); surplus replies are ignored."""
    if not requests:
        return []
    try:
        replies = list(agents.run(requests))
    except Exception as exc:  # an executor bug must not kill the deployment
        LOG.exception("the agent executor failed on %d plan(s)", len(requests))
        return [PlanReply.failure(type(exc).__name__, str(exc)) for _ in requests]
    if len(replies) != len(requests):
        LOG.error("the agent executor answered %d of %d plan(s)", len(replies), len(requests))
    missing = [PlanReply.failure("NoReply", f"no reply for {request.template} on unit "
                                           f"{request.unit}: the agent executor answered "
                                           f"{len(replies)} of {len(requests)} plan(s)")
               for request in requests[len(replies):]]
    return replies[:len(requests)] + missing
