"""Takeover of a frozen conductor's job on the database heartbeat (issue 29).

A real ``fornace conductor`` process takes a task and is frozen (SIGSTOP) in
the middle of it, its task message still unacknowledged in its hands; a
second conductor must take the job over once the lock's heartbeat is
``lock_stale_after`` old -- not when RabbitMQ drops the frozen consumer (a
minute and more), nor never (the folder broker keeps no copy).  When the
frozen one resumes it stops without acting and acknowledges its copy.

On SQLite with the folder broker and on PostgreSQL with RabbitMQ.  The time
from the freeze to the new holder's grant is printed (``-s``);
``FORNACE_TEST_STALE_AFTER`` sets ``lock_stale_after`` (default 2 s) to
measure it at other values.
"""
from __future__ import annotations

import datetime
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.common.db.engine import upgrade
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.jobs.lock import JobLock
from fornace.conductor.jobs.takeover import Takeover, kept
from fornace.conductor.session import Settings
from apikit import reset_postgres
from services import postgres_url, rabbitmqctl
from standins import RecordingStacks, drain_reports, one_unit_task
from waiting import wait_for

DATA = Path(__file__).resolve().parents[2] / "data"
STALE = float(os.environ.get("FORNACE_TEST_STALE_AFTER", "2"))
BROKER_REDELIVERY = 57.0   # the fastest RabbitMQ gave a frozen consumer's task back (issue 29)


@pytest.fixture(params=["sqlite+folder", "postgres+rabbitmq"])
def backends(request, tmp_path):
    """(name, broker URL, database URL, RabbitMQ vhost or None), the database migrated."""
    if request.param == "sqlite+folder":
        url = f"sqlite:///{tmp_path / 'fornace.sqlite'}"
        upgrade(url)
        yield request.param, f"filesystem://{tmp_path / 'broker'}", url, None
        return
    database = postgres_url()
    reset_postgres(database)
    upgrade(database)
    broker = request.getfixturevalue("amqp_vhost")
    yield request.param, broker, database, broker.rsplit("/", 1)[1]
    reset_postgres(database)


def start_conductor_process(tmp_path: Path, broker: str, database: str) -> subprocess.Popen:
    """``fornace conductor`` with one consumer, simulated stacks and real agents
    (none listens: its job waits for its plan's answer)."""
    conf = tmp_path / "frozen.conf"
    conf.write_text(f"[DEFAULT]\ndata_dir = {DATA}\n[broker]\nurl = {broker}\n"
                    f"[database]\nconnection = {database}\n"
                    f"[conductor]\nlock_stale_after = {STALE}\n"
                    f"[engine]\nagent_timeout = 600\nagent_boot_timeout = 600\n")
    log = open(tmp_path / "frozen.log", "w")
    return subprocess.Popen([sys.executable, "-m", "fornace.cli", "--config-file", str(conf),
                             "conductor", "--stacks", "simulator", "--agents", "amqp",
                             "--max-environments", "1"], stdout=log, stderr=subprocess.STDOUT)


def consuming(process: subprocess.Popen, broker: Broker, log) -> bool:
    """Whether the conductor process consumes tasks (an AssertionError if it ended)."""
    if process.poll() is not None:
        raise AssertionError(f"the conductor process ended ({process.returncode}):\n{log()}")
    return bool((broker.consumers([contract.TASKS]) or {}).get(contract.TASKS))


def lock_times(lock: JobLock, env_id: str) -> tuple:
    """(heartbeat, acquired) of the environment's lock row."""
    with lock.engine.connect() as conn:
        beat, acquired = conn.execute(text(
            "SELECT heartbeat, acquired FROM job_locks WHERE environment_id = :e"),
            {"e": env_id}).one()
    return _time(beat), _time(acquired)


def _time(value):
    """A DateTime column read by raw SQL (SQLite gives text)."""
    return datetime.datetime.fromisoformat(value) if isinstance(value, str) else value


def unacked_tasks(vhost: str | None) -> tuple[int, int]:
    """(ready, unacknowledged) messages of the tasks queue; (0, 0) on the folder
    broker, which removes a message when it is taken."""
    if vhost is None:
        return 0, 0
    out = rabbitmqctl("list_queues", "-p", vhost, "name", "messages_ready",
                      "messages_unacknowledged", "--quiet", "--no-table-headers")
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == contract.TASKS:
            return int(parts[1]), int(parts[2])
    return 0, 0


def test_a_frozen_conductors_job_is_taken_over_after_lock_stale_after(backends, tmp_path,
                                                                       caplog):
    name, broker_url, database, vhost = backends
    caplog.set_level(logging.INFO, logger="fornace.conductor")
    env_id = "d" + uuid.uuid4().hex[:8]
    task_id, plans_queue = "t-" + env_id, contract.agent_queue(env_id, "s1", "u1")
    frozen = start_conductor_process(tmp_path, broker_url, database)
    log = lambda: (tmp_path / "frozen.log").read_text()   # noqa: E731
    successor = None
    stopped = False
    try:
        with Broker(broker_url) as broker, JobLock(database) as lock:
            wait_for(lambda: consuming(frozen, broker, log),
                     "the conductor process to consume tasks", explain=log)
            broker.publish(contract.TASKS, one_unit_task(env_id), task_id)
            # its stack step done, it waits for its (absent) agent: freeze it there
            wait_for(lambda: broker.drain(plans_queue, timeout=0.1), "its plan", explain=log)
            first = lock.holder(env_id)
            assert first is not None and lock.token(env_id) == 1
            calls: list = []
            successor = Conductor(ConductorSettings(
                broker_url=broker_url, data_dir=DATA, max_environments=1,
                database_url=database, lock_stale_after=STALE, agents="simulator",
                engine=Settings(agent_timeout=30)), lambda task: RecordingStacks(calls))
            successor.start()
            assert successor.wait_ready()

            frozen.send_signal(signal.SIGSTOP)
            stopped, froze = True, time.monotonic()
            last_beat = lock_times(lock, env_id)[0]        # it beats no more
            wait_for(lambda: lock.token(env_id) == 2, "the takeover by the second conductor",
                     timeout=min(STALE + 20, BROKER_REDELIVERY), explain=log)
            took = time.monotonic() - froze
            print(f"\n{name}: lock_stale_after={STALE:g} s, freeze to the new holder's "
                  f"grant: {took:.2f} s")
            said = lambda: [r.getMessage() for r in caplog.records]   # noqa: E731
            wait_for(lambda: any(f"job {task_id} holds the lock (token 2)" in m
                                 for m in said()), "the successor's grant", explain=log)
            assert any(f"the holder of job {task_id} " in m and "takes the job over" in m
                       for m in said()), said()
            if vhost:    # the task message is still in the frozen conductor's hands
                assert unacked_tasks(vhost) == (0, 1)
            granted = lock_times(lock, env_id)[1]          # not before the heartbeat was stale
            assert (granted - last_beat).total_seconds() >= STALE, (last_beat, granted)
            results = []
            wait_for(lambda: results.extend(broker.drain(contract.RESULTS, timeout=0.1)) or any(
                m == task_id for _, m in results), "the successor's result")
            assert [contract.fence_of(b, "result") for b, m in results if m == task_id] == [2]
            assert calls == [("apply", f"e{env_id}")]

            frozen.send_signal(signal.SIGCONT)
            stopped = False
            reports: list = []
            wait_for(lambda: reports.extend(drain_reports(broker, timeout=0.1)) or any(
                "stopped: it lost the environment's lock" in b.get("text", "")
                for b, _ in reports), "the woken conductor to stop", explain=log)
            lost = [b for b, _ in reports if "lost the environment's lock" in b.get("text", "")]
            assert lost and all(contract.fence_of(b, "report") == 1 for b in lost)
            if vhost:   # it acknowledged its copy
                wait_for(lambda: unacked_tasks(vhost) == (0, 0), "the copy's acknowledgement",
                         explain=log)
            results.extend(broker.drain(contract.RESULTS, timeout=0.3))
            assert [contract.fence_of(b, "result") for b, m in results if m == task_id] == [2]
            assert broker.drain(plans_queue, timeout=0.2) == []   # it sent no plan more
            assert frozen.poll() is None, log()                    # and it runs on
    finally:
        if stopped:
            frozen.send_signal(signal.SIGCONT)
        frozen.terminate()
        frozen.wait(60)
        if successor is not None:
            successor.shutdown()


def test_a_job_taken_over_goes_back_to_the_queue_if_its_conductor_stops(tmp_path, caplog):
    """The silent holder still has the task message, but it will only acknowledge
    it once it wakes and finds its lock lost: a job taken over and interrupted
    (its new conductor stopping) must not be lost with it.  The task kept with
    the lock is never logged."""
    caplog.set_level(logging.DEBUG)
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    env_id = "d" + uuid.uuid4().hex[:8]
    task_id = "t-" + env_id
    body = one_unit_task(env_id)
    body["services"][0]["adminPassword"] = "Kept-secret-1"
    with JobLock(url) as lock:        # a conductor took the task, then froze
        lock.acquire(env_id, task_id, "frozen-conductor", task=kept(body, task_id))
    successor = Conductor(ConductorSettings(
        broker_url="memory://", data_dir=DATA, max_environments=1, database_url=url,
        lock_stale_after=1, engine=Settings(agent_timeout=3600, agent_boot_timeout=3600)),
        lambda task: RecordingStacks([]))
    successor.start()
    try:
        with Broker("memory://") as broker:      # taken over: its plan waits for an agent
            wait_for(lambda: broker.drain(contract.agent_queue(env_id, "s1", "u1"),
                                          timeout=0.1), "the job taken over to send its plan")
            successor.shutdown()
            tasks = broker.drain(contract.TASKS, timeout=0.3)
    finally:
        successor.shutdown()
    assert [(body["id"], message_id) for body, message_id in tasks] == [(env_id, task_id)]
    with JobLock(url) as lock:                   # freed, not ended: the copy will run it
        assert lock.holder(env_id) is None and lock.token(env_id) == 2
    assert any("takes the job over" in r.getMessage() for r in caplog.records)
    assert "Kept-secret-1" not in caplog.text


def test_no_takeover_until_the_database_answered_for_a_stale_period(tmp_path):
    """After a database outage every holder looks silent (its heartbeats failed
    too), and a job that ended in it may still hold its lock (its release lost):
    a conductor the database failed takes nothing over for a stale period."""
    folder, away = tmp_path / "db", tmp_path / "away"
    folder.mkdir()
    url = f"sqlite:///{folder / 'locks.sqlite'}"
    upgrade(url)
    env_id = "d" + uuid.uuid4().hex[:8]
    with JobLock(url, clock=lambda: datetime.datetime(2000, 1, 1)) as old:   # silent for long
        old.acquire(env_id, "t-" + env_id, "silent", task=kept(one_unit_task(env_id),
                                                               "t-" + env_id))
    now, ran = [0.0], []
    with JobLock(url) as lock:
        takeover = Takeover(lock, "me", 10, lambda task_id: True,
                            lambda body, task_id: lambda: ran.append(task_id),
                            lambda body, task_id: None, threading.Event(),
                            clock=lambda: now[0])
        lock.engine.dispose()
        folder.rename(away)                  # the database out of reach
        assert takeover.look() == []
        away.rename(folder)                  # back
        now[0] = 9.0
        assert takeover.look() == [] and [s.job_id for s in lock.silent(10)] == ["t-" + env_id]
        now[0] = 10.5
        assert takeover.look() == ["t-" + env_id]
        wait_for(lambda: ran == ["t-" + env_id], "the job taken over to run")
