"""Fencing at the cloud: a holder that wakes after a takeover changes nothing.

A frozen conductor's threads all stop; when it resumes, the job thread may go
on with its next step before the heartbeat thread notices that the lock was
taken over (issue 29: an instance started 3 ms after the loss was logged).
Here the freeze is a conductor whose heartbeat thread never runs (it stays
frozen) and whose job thread waits on an event; another holder takes the lock
over in the database meanwhile.
"""
from __future__ import annotations

import contextlib
import shutil
import threading
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.common.consumer import Delivery
from fornace.common.db.engine import upgrade
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors.base import Fenced, FencedStacks, StackRequest
from fornace.conductor.jobs.fencing import GrantFence
from fornace.conductor.jobs.lock import Grant, JobLock
from fornace.conductor.session import Settings
from standins import RecordingStacks, drain_reports, one_unit_task
from waiting import wait_for

DATA = Path(__file__).resolve().parents[2] / "data"


class FrozenBeat(Conductor):
    """A conductor whose lock heartbeat thread is frozen for the whole test."""

    def _beat(self, grant, watch):
        pass


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    return url


def take_over(url: str, env_id: str, job_id: str) -> Grant:
    """Another conductor takes the silent holder's lock over, as soon as it is stale."""
    with JobLock(url) as lock:
        return wait_for(lambda: _granted(lock.acquire(env_id, job_id, "conductor-b",
                                                      stale_after=0.3)),
                        "the silent holder's lock to be taken over")


def _granted(found):
    return found if isinstance(found, Grant) else None


def run_frozen(url: str, env_id: str, stacks) -> tuple[threading.Thread, list]:
    """A conductor running ``env_id``'s task with a frozen heartbeat; its outcomes."""
    daemon = FrozenBeat(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                          database_url=url, lock_stale_after=60,
                                          engine=Settings(agent_timeout=30,
                                                          agent_boot_timeout=30)), stacks)
    outcome: list = []

    def handle():
        try:
            daemon.handle_task(one_unit_task(env_id), Delivery(message_id="t-" + env_id,
                                                               queue=contract.TASKS))
            outcome.append("answered")
        except BaseException as exc:  # noqa: BLE001 -- shown by the assertions
            outcome.append(exc)

    thread = threading.Thread(target=handle)
    thread.start()
    return thread, outcome


def what_it_sent(env_id: str) -> tuple[list, list, list]:
    """(results, report texts, plans) that reached the broker for ``env_id``."""
    with Broker("memory://") as broker:
        results = [(b, m) for b, m in broker.drain(contract.RESULTS, timeout=0.3)
                   if m == "t-" + env_id]
        reports = [b for b, _ in drain_reports(broker, timeout=0.3)
                   if b.get("environment_id") == env_id]
        plans = broker.drain(contract.agent_queue(env_id, "s1", "u1"), timeout=0.2)
    return results, reports, plans


def assert_ended_as_lost(outcome: list, results: list, reports: list) -> None:
    """Ended as a lost lock ends a job: answered, a warning, no result, no error."""
    assert outcome == ["answered"], outcome
    assert results == []
    texts = [(b["level"], b["text"]) for b in reports]
    assert any(level == "warning" and "stopped: it lost the environment's lock" in text
               for level, text in texts), texts
    assert not any(level == "error" for level, _ in texts), texts   # not a workflow failure


def test_a_woken_holder_applies_no_stack_after_a_takeover(url):
    """Regression (issue 29): a holder frozen between its grant and its stack step
    went on with the step once it woke, the lock taken over meanwhile."""
    env_id = "d" + uuid.uuid4().hex[:8]
    frozen, thaw, calls = threading.Event(), threading.Event(), []

    def stacks(task):          # the job thread freezes right before its first step
        frozen.set()
        thaw.wait(60)
        return RecordingStacks(calls)

    thread, outcome = run_frozen(url, env_id, stacks)
    assert frozen.wait(30)
    successor = take_over(url, env_id, "t-" + env_id)
    assert successor.token == 2
    thaw.set()
    wait_for(lambda: not thread.is_alive(), "the woken holder's job to end")
    assert calls == []                                       # the cloud was not touched
    results, reports, plans = what_it_sent(env_id)
    assert plans == []
    assert_ended_as_lost(outcome, results, reports)
    with JobLock(url) as lock:                               # the successor still holds it
        assert lock.holder(env_id).holder == "conductor-b" and lock.heartbeat(successor)


def test_a_woken_holder_sends_no_plan_after_a_takeover(url):
    """Regression (issue 29): a holder frozen inside its stack step finished the
    step once it woke (the cloud's own, out of its hands) and then sent its
    plans to the agents, the lock taken over meanwhile."""
    env_id = "d" + uuid.uuid4().hex[:8]
    entered, thaw, calls = threading.Event(), threading.Event(), []
    thread, outcome = run_frozen(url, env_id, lambda task: RecordingStacks(calls, thaw, entered))
    assert entered.wait(30)                                   # frozen inside the apply
    take_over(url, env_id, "t-" + env_id)
    thaw.set()
    wait_for(lambda: not thread.is_alive(), "the woken holder's job to end")
    assert calls == [("apply", f"e{env_id}")]                 # only the step it had in hand
    results, reports, plans = what_it_sent(env_id)
    assert plans == []                                        # no plan reached the agent
    assert_ended_as_lost(outcome, results, reports)


def test_fenced_stacks_refuse_every_action_once_the_grant_is_gone(url):
    calls = []
    with JobLock(url) as lock:
        grant = lock.acquire("env1", "job1", "conductor-a")
        lost = threading.Event()
        stacks = FencedStacks(RecordingStacks(calls), GrantFence(lock, grant, lost))
        request = StackRequest("eenv1", {"Resources": {"r": {"Type": "T"}}}, {})
        stacks.apply(request)                                  # still the holder
        assert calls == [("apply", "eenv1")] and not lost.is_set()
        lock.clear("env1")                                     # abandoned: revoked
        for action in (lambda: stacks.apply(request), lambda: stacks.delete("eenv1"),
                       lambda: stacks.remove("eenv1", ["r"])):
            with pytest.raises(Fenced):
                action()
        assert calls == [("apply", "eenv1")] and lost.is_set()


def test_an_unreachable_database_fences_the_job(tmp_path):
    """A holder that cannot confirm its grant (the database out of reach past a
    short retry) takes it as lost: the safe side."""
    gone = tmp_path / "gone"
    gone.mkdir()
    url = f"sqlite:///{gone / 'locks.sqlite'}"
    upgrade(url)
    with JobLock(url) as lock:
        grant = lock.acquire("env1", "job1", "conductor-a")
        lock.engine.dispose()
        shutil.rmtree(gone)                   # sqlite cannot open (nor make) the file now
        lost = threading.Event()
        with pytest.raises(Fenced):
            GrantFence(lock, grant, lost, backoff=(0.0, 0.0))()
        assert lost.is_set()


def test_a_fresh_confirmation_spares_the_next_steps_queries_but_not_a_woken_holders(
        tmp_path):
    """A burst of steps within ``fresh_for`` of a confirmation asks the database
    once (a thousand plans are not a thousand queries); a holder whose clock
    jumped past it (frozen, then woken after a takeover) asks again and is
    fenced."""
    from sqlalchemy import update
    from fornace.common.db.models import JobLock as LockRow
    now = [100.0]
    with held_lock(tmp_path) as (lock, grant, asked):
        lost = threading.Event()
        fence = GrantFence(lock, grant, lost, backoff=(), fresh_for=0.25,
                           clock=lambda: now[0])
        for _ in range(1000):                       # a burst of plans going out
            fence()
        assert asked == [grant.token]
        now[0] += 30.0                              # frozen for 30 s; taken over meanwhile
        with lock.engine.begin() as conn:
            conn.execute(update(LockRow).where(LockRow.environment_id == "env1").values(
                job_id="job1", holder="conductor-b", token=LockRow.token + 1))
        with pytest.raises(Fenced):
            fence()
        assert asked == [grant.token, grant.token] and lost.is_set()


@contextlib.contextmanager
def held_lock(tmp_path: Path) -> Iterator[tuple[JobLock, Grant, list]]:
    """The lock of env1 held by conductor-a's job1 in a SQLite database of
    ``tmp_path``: the lock, its grant, and the heartbeats sent from then on."""
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    with JobLock(url) as lock:
        grant = lock.acquire("env1", "job1", "conductor-a")
        yield lock, grant, counted_heartbeats(lock)


def counted_heartbeats(lock: JobLock) -> list:
    """The tokens of the heartbeats ``lock`` sends from now on (fence checks)."""
    asked: list = []
    heartbeat = lock.heartbeat

    def counted(grant):
        asked.append(grant.token)
        return heartbeat(grant)
    lock.heartbeat = counted
    return asked


def test_the_grant_counts_as_a_confirmation_for_the_first_steps(tmp_path):
    """Taking the lock stamped its heartbeat: the steps right after it (the
    job's first stack action) do not ask again within ``fresh_for``."""
    now = [100.0]
    with held_lock(tmp_path) as (lock, grant, asked):
        fence = GrantFence(lock, grant, threading.Event(), backoff=(), fresh_for=0.25,
                           clock=lambda: now[0], confirmed=99.9)
        fence()
        assert asked == []
        now[0] += 0.2                               # 0.3 s after the grant was asked
        fence()
        assert asked == [grant.token]
