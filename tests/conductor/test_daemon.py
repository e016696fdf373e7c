"""The conductor daemon on a real broker, with simulated stacks and a stand-in agent."""
from __future__ import annotations

import subprocess
import sys
import threading
import logging
import uuid
from pathlib import Path

import pytest

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.common.errors import WorkflowError
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors.base import UnreachableStacks
from fornace.conductor.executors.simulator import SimulatedCloud, SimulatedStacks
from fornace.conductor.session import Settings
from standins import StandInAgents, drain_reports, one_unit_task, reports_in
from waiting import wait_for

DATA = Path(__file__).resolve().parents[2] / "data"


def model(env_id: str) -> dict:
    return {"id": env_id, "name": "daemon", "services": [{
        "id": "svc1", "name": "site", "type": "linuxWebServer", "unitNamingPattern": "web#",
        "osImage": {"name": "debian"}, "adminPassword": "Secret-pass-1",
        "units": [{"id": "u1", "name": "site_instance_0"}, {"id": "u2", "name": "site_instance_1"}]}]}


@pytest.fixture(params=["memory", "rabbitmq"])
def conductor(request):
    url = "memory://" if request.param == "memory" else request.getfixturevalue("amqp_vhost")
    stacks_seen = []

    def stacks(task):
        stacks_seen.append(task.environment_id)
        return SimulatedCloud().executors()[0]

    daemon = Conductor(ConductorSettings(broker_url=url, data_dir=DATA, max_environments=2,
                                         engine=Settings(agent_timeout=3)), stacks)
    daemon.start()
    assert daemon.wait_ready()
    yield url, daemon
    daemon.shutdown()


def collect(broker: Broker, queue: str, until) -> list:
    """The messages of ``queue`` (drained; reports unpacked), once
    ``until(messages)`` holds."""
    found: list = []

    def arrived() -> bool:
        drained = broker.drain(queue, timeout=0.2)
        found.extend(reports_in(drained) if queue == contract.REPORTS else drained)
        return bool(until(found))
    wait_for(arrived, f"the awaited messages on {queue}",
             explain=lambda: f"got {[message_id for _, message_id in found]}")
    return found


def test_a_conductor_with_simulated_agents_deploys_without_any_agent():
    """Regression: `fornace conductor --stacks simulator` sent its plans to agents
    that did not exist and waited the whole agent_timeout in silence; with
    `--agents simulator` every plan is answered at once."""
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                         agents="simulator",
                                         engine=Settings(agent_timeout=3600)),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.start()
    try:
        assert daemon.wait_ready()
        env_id = "d" + uuid.uuid4().hex[:8]
        with Broker("memory://") as broker:
            broker.publish(contract.TASKS, contract.task_body(model(env_id), "tok", "t1"),
                           "task-" + env_id)
            results = collect(broker, contract.RESULTS,
                              lambda found: any(m == "task-" + env_id for _, m in found))
    finally:
        daemon.shutdown()
    body = next(b for b, m in results if m == "task-" + env_id)
    units = contract.parse_result(body)["services"][0]["units"]
    assert [u["state"].get("siteDeployed") for u in units] == [True, True]


def test_consumer_threads_keep_their_publishing_connection_from_job_to_job():
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                         agents="simulator", max_environments=2,
                                         engine=Settings(agent_timeout=3600)),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.start()
    envs = ["k" + uuid.uuid4().hex[:8] for _ in range(5)]
    try:
        assert daemon.wait_ready()
        with Broker("memory://") as broker:
            for env_id in envs:
                broker.publish(contract.TASKS, contract.task_body(model(env_id), "tok", "t1"),
                               "task-" + env_id)
            results = collect(broker, contract.RESULTS, lambda found: {
                "task-" + e for e in envs} <= {m for _, m in found})
        assert {"task-" + e for e in envs} <= {m for _, m in results}
        assert 1 <= len(daemon._publishers) <= 2   # one per consumer thread, not per job
    finally:
        daemon.shutdown()
    assert daemon._publishers == []                # closed with the conductor


def test_unknown_agent_backend_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown agent backend 'vms' \\(one of amqp, simulator\\)"):
        Conductor(ConductorSettings(agents="vms", data_dir=DATA), lambda task: None)


def test_task_to_result_with_reports(conductor):
    url, _ = conductor
    env_id = "d" + uuid.uuid4().hex[:8]
    agents = StandInAgents(url, env_id, ["u1", "u2"])
    with Broker(url) as broker:
        broker.publish(contract.TASKS, {"text": "not a task"}, "bad-" + env_id)  # dropped
        broker.publish(contract.TASKS, contract.task_body(model(env_id), "tok", "t1"),
                       "task-" + env_id)
        results = collect(broker, contract.RESULTS,
                          lambda found: any(m == "task-" + env_id for _, m in found))
        reports = collect(broker, contract.REPORTS, lambda found: len(found) >= 8)
    agents.stop.set()
    body, message_id = next((b, m) for b, m in results if m == "task-" + env_id)
    final = contract.parse_result(body)
    assert "token" not in final and "temp" not in final
    units = final["services"][0]["units"]
    assert [u["state"] for u in units] == [{"hostname": "web1", "address": None, "siteDeployed": True,
                                            "url": None},
                                           {"hostname": "web2", "address": None, "siteDeployed": True,
                                            "url": None}]
    assert sorted(agents.plans) == ["u1", "u2"]
    ours = [(b, m) for b, m in reports if b["environment_id"] == env_id]
    texts = [b["text"] for b, _ in ours]
    assert "Web site deployed on web1: done" in texts
    assert all(m.startswith("task-" + env_id + "-report-") for _, m in ours)
    assert len({m for _, m in ours}) == len(ours)


def test_silent_agent_times_out_and_the_deployment_ends(conductor, caplog):
    caplog.set_level(logging.INFO, logger="fornace.conductor.daemon")
    url, _ = conductor
    env_id = "d" + uuid.uuid4().hex[:8]
    agents = StandInAgents(url, env_id, ["u1", "u2"], silent={"u2"})
    with Broker(url) as broker:
        broker.publish(contract.TASKS, contract.task_body(model(env_id), None, "t1"),
                       "task-" + env_id)
        results = collect(broker, contract.RESULTS,
                          lambda found: any(m == "task-" + env_id for _, m in found))
        reports = collect(broker, contract.REPORTS, lambda found: any(
            b["environment_id"] == env_id and "no answer from the agent" in b["text"]
            for b, _ in found))
    agents.stop.set()
    result = next(b for b, m in results if m == "task-" + env_id)
    errors = [b["text"] for b, _ in reports
              if b["environment_id"] == env_id and b["level"] == "error"]
    assert any("web2" in text and "no answer from the agent" in text for text in errors)
    # the result counts them: the API may store it before them (another queue)
    assert contract.error_reports_of(result) == len(errors) == 1
    # the conductor's log says how the job ended as the API will show it
    ended = wait_for(lambda: [r.getMessage() for r in caplog.records
                              if env_id in r.getMessage() and " ended: " in r.getMessage()],
                     "the job's end in the conductor's log")
    assert "ended: completed_w_errors (1 error report(s))" in ended[0]


def test_reports_are_sent_while_the_deployment_runs(conductor):
    url, _ = conductor
    env_id = "d" + uuid.uuid4().hex[:8]
    agents = StandInAgents(url, env_id, ["u1", "u2"], silent={"u1", "u2"})  # it hangs on them
    with Broker(url) as broker:
        broker.publish(contract.TASKS, contract.task_body(model(env_id), None, "t1"),
                       "task-" + env_id)
        early = collect(broker, contract.REPORTS, lambda found: any(
            b["environment_id"] == env_id and b["text"].startswith("Deploying the web site")
            for b, _ in found))
        done_early = [m for _, m in broker.drain(contract.RESULTS, timeout=0.1)]
        results = collect(broker, contract.RESULTS,
                          lambda found: any(m == "task-" + env_id for _, m in found))
    agents.stop.set()
    texts = [b["text"] for b, _ in early if b["environment_id"] == env_id]
    assert "Creating instance web1 (site_instance_0)" in texts
    assert "task-" + env_id not in done_early        # the deployment was still running
    assert any(m == "task-" + env_id for _, m in results)
    assert not any("Secret-pass-1" in str(b) for b, _ in early)


def test_a_task_redelivered_while_it_runs_here_is_not_run_twice():
    """RabbitMQ requeues a task when the connection that took it breaks, while its
    handler still runs; a second consumer thread taking the copy waits for it."""
    from fornace.common.consumer import Delivery

    release, started, copy_waits = threading.Event(), threading.Event(), threading.Event()
    runs = []

    class SlowStacks(SimulatedStacks):
        def apply(self, request):
            runs.append(request.stack_name)
            started.set()
            release.wait(10)
            return {}

    class WatchedEnd(threading.Event):
        """The run's end, telling when someone starts waiting for it (the barrier)."""

        def wait(self, timeout=None):
            copy_waits.set()
            return super().wait(timeout)

    env_id = "d" + uuid.uuid4().hex[:8]
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                         engine=Settings(agent_timeout=1)),
                       lambda task: SlowStacks(SimulatedCloud()))
    body = contract.task_body({"id": env_id, "name": "x", "services": [{
        "id": "s1", "name": "site", "type": "linuxWebServer", "units": [
            {"id": "u1", "name": "site_instance_0"}]}]}, None, "t1")
    delivery = Delivery(message_id="task-" + env_id, queue=contract.TASKS)
    threads = [threading.Thread(target=daemon.handle_task, args=(body, delivery))
               for _ in range(2)]
    threads[0].start()
    assert started.wait(10)
    daemon._running["task-" + env_id].ended = WatchedEnd()
    threads[1].start()
    assert copy_waits.wait(10)            # the copy waits for the run ...
    assert threads[1].is_alive() and runs == [f"e{env_id}"]
    release.set()
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads)    # ... and ends with it
    assert runs == [f"e{env_id}"]


# -- exactly once: message ids, copies, the lock ----------------------------------------

def test_a_task_without_a_message_id_is_refused(caplog):
    """Regression: tasks without an id were all 'task-<env>', so a deletion that
    arrived while a deploy of the same environment ran waited, then never ran."""
    from fornace.common.consumer import Delivery
    runs = []
    env_id = "d" + uuid.uuid4().hex[:8]
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA),
                       lambda task: runs.append(task) or SimulatedCloud().executors()[0])
    daemon.handle_task(one_unit_task(env_id), Delivery(message_id=None, queue=contract.TASKS))
    assert runs == []
    assert any("without a message id is refused" in r.getMessage() for r in caplog.records)


def test_a_copy_runs_when_the_first_failed_before_answering():
    """Regression: the waiting copy was acknowledged even when the first run failed
    before sending a result: the task was lost."""
    from fornace.common.consumer import Delivery
    entered, fail_now = threading.Event(), threading.Event()
    calls = []

    def stacks(task):
        calls.append(task.environment_id)
        if len(calls) == 1:
            entered.set()
            fail_now.wait(10)
            raise RuntimeError("the first run breaks before its result")
        return SimulatedCloud().executors()[0]

    env_id = "d" + uuid.uuid4().hex[:8]
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                         engine=Settings(agent_timeout=1)), stacks)
    body, delivery = one_unit_task(env_id), Delivery(message_id="t-" + env_id,
                                                     queue=contract.TASKS)
    errors = []

    def handle():
        try:
            daemon.handle_task(body, delivery)
        except RuntimeError as exc:
            errors.append(exc)

    first = threading.Thread(target=handle)
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=handle)
    second.start()
    fail_now.set()
    first.join(30)
    second.join(30)
    assert len(errors) == 1 and len(calls) == 2          # the copy ran the job
    with Broker("memory://") as broker:
        results = collect(broker, contract.RESULTS, lambda found: any(
            message_id == "t-" + env_id for _, message_id in found))
    assert any(message_id == "t-" + env_id for _, message_id in results)


class GatedStacks(SimulatedStacks):
    """Stacks whose apply waits for ``gate`` (and counts the applies)."""

    def __init__(self, gate: threading.Event, applied: list) -> None:
        super().__init__(SimulatedCloud())
        self.gate, self.applied = gate, applied

    def apply(self, request):
        self.applied.append(request.stack_name)
        self.gate.wait(20)
        return super().apply(request)


def test_a_job_that_loses_its_lock_stops_and_sends_no_result(tmp_path, caplog):
    """Regression: a heartbeat that found the lock lost was ignored and the job
    went on acting on the environment."""
    from fornace.common.consumer import Delivery
    from fornace.common.db.engine import upgrade
    from fornace.conductor.jobs.lock import JobLock
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    gate, applied = threading.Event(), []
    env_id = "d" + uuid.uuid4().hex[:8]
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA, database_url=url,
                                         lock_stale_after=0.4, engine=Settings(agent_timeout=2)),
                       lambda task: GatedStacks(gate, applied))
    delivery = Delivery(message_id="t-" + env_id, queue=contract.TASKS)
    thread = threading.Thread(target=daemon.handle_task, args=(one_unit_task(env_id), delivery))
    thread.start()
    assert wait_for(lambda: applied)
    with JobLock(url) as lock:
        lock.clear(env_id)                                  # a user abandons the job
    assert wait_for(lambda: any("lost the environment's lock" in r.getMessage()
                                  for r in caplog.records))
    gate.set()
    thread.join(30)
    assert not thread.is_alive()
    with Broker("memory://") as broker:
        results = [m for _, m in broker.drain(contract.RESULTS, timeout=0.5)]
        reports = [b["text"] for b, _ in drain_reports(broker, timeout=0.5)
                   if b.get("id") == env_id]
        plans = broker.drain(contract.agent_queue(env_id, "s1", "u1"), timeout=0.2)
    assert "t-" + env_id not in results
    assert any("stopped: it lost the environment's lock" in t for t in reports), reports
    assert plans == []                                      # nothing after the lost lock


def test_a_copy_of_a_job_running_elsewhere_waits_then_is_not_run_again(tmp_path):
    """Regression: a redelivered task taken by a second conductor ran beside the first."""
    from fornace.common.consumer import Delivery
    from fornace.common.db.engine import upgrade
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    gate, applied = threading.Event(), []
    env_id = "d" + uuid.uuid4().hex[:8]

    def conductor():
        return Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                           database_url=url, lock_stale_after=2,
                                           engine=Settings(agent_timeout=1)),
                         lambda task: GatedStacks(gate, applied))
    body = one_unit_task(env_id)
    delivery = Delivery(message_id="t-" + env_id, queue=contract.TASKS)
    first = threading.Thread(target=conductor().handle_task, args=(body, delivery))
    first.start()
    assert wait_for(lambda: applied)
    second = threading.Thread(target=conductor().handle_task, args=(body, delivery))
    second.start()
    second.join(3)                 # longer than the stale time: the first still beats
    assert second.is_alive() and len(applied) == 1
    gate.set()
    first.join(30)
    second.join(30)
    assert not second.is_alive() and len(applied) == 1   # answered, not run again


def _locked_conductor(tmp_path: Path, prefix: str,
                      agent_timeout: float) -> tuple[str, str, Conductor]:
    """A conductor on the memory broker taking job locks in a SQLite database of
    ``tmp_path`` (its URL), and a new environment id starting with ``prefix``."""
    from fornace.common.db.engine import upgrade
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA, database_url=url,
                                         engine=Settings(agent_timeout=agent_timeout)),
                       lambda task: SimulatedCloud().executors()[0])
    return url, prefix + uuid.uuid4().hex[:8], daemon


def test_a_stopping_conductor_does_not_wait_for_a_silent_agent(tmp_path):
    """Regression: a conductor waiting on a dead agent ignored SIGTERM (for the whole
    agent_timeout); now the wait ends, the task is requeued (not answered) and the
    lock is freed for the next copy, which runs the job."""
    from fornace.common.consumer import Delivery
    from fornace.conductor.daemon import Interrupted
    from fornace.conductor.jobs.lock import Grant, JobLock
    url, env_id, daemon = _locked_conductor(tmp_path, "d", agent_timeout=3600)
    outcome = []

    def handle():
        try:
            daemon.handle_task(one_unit_task(env_id),
                               Delivery(message_id="t-" + env_id, queue=contract.TASKS))
            outcome.append("answered")
        except Interrupted as exc:
            outcome.append(exc)

    thread = threading.Thread(target=handle)
    thread.start()
    with Broker("memory://") as broker:     # the plan reached the (silent) agent's queue
        assert collect(broker, contract.agent_queue(env_id, "s1", "u1"), lambda found: found)
    daemon.stop.set()   # the job would wait an hour for its agent (how soon: bench_startup.py)
    wait_for(lambda: not thread.is_alive(), "the job to end on the conductor's stop")
    assert len(outcome) == 1 and isinstance(outcome[0], Interrupted)
    with Broker("memory://") as broker:
        assert "t-" + env_id not in [m for _, m in broker.drain(contract.RESULTS, timeout=0.3)]
    with JobLock(url) as lock:                       # free, and not marked done
        assert isinstance(lock.acquire(env_id, "t-" + env_id, "next-conductor"), Grant)


def test_what_a_locked_job_sends_carries_its_token(tmp_path):
    from fornace.common.consumer import Delivery
    from fornace.common.db.engine import upgrade
    from fornace.conductor.jobs.lock import JobLock
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    env_id = "d" + uuid.uuid4().hex[:8]
    with JobLock(url) as lock:               # two earlier grants: this run gets token 3
        for job in ("old1", "old2"):
            lock.release(lock.acquire(env_id, job, "x"))
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA, database_url=url,
                                         engine=Settings(agent_timeout=0.5)),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.handle_task(one_unit_task(env_id), Delivery(message_id="t-" + env_id,
                                                       queue=contract.TASKS))
    with Broker("memory://") as broker:
        results = [(b, m) for b, m in broker.drain(contract.RESULTS, timeout=0.5)]
        reports = [b for b, _ in drain_reports(broker, timeout=0.5)
                   if b.get("environment_id") == env_id]
    final = [b for b, m in results if m == "t-" + env_id]
    events = [b for b, _ in results if contract.is_job_event(b) and b["environment_id"] == env_id]
    assert final and contract.fence_of(final[0], "result") == 3
    assert reports and all(contract.fence_of(b, "report") == 3 for b in reports)
    assert events and all(contract.fence_of(b, "job event") == 3 for b in events)


def _job_states_sent(tmp_path: Path, run) -> list[str]:
    """The job states (job events of kind ``job``) a locked conductor sends for
    one task, ``run(daemon, env_id, body, message_id)`` running it."""
    tmp_path.mkdir(exist_ok=True)
    _, env_id, daemon = _locked_conductor(tmp_path, "r", agent_timeout=0.5)
    run(daemon, env_id, one_unit_task(env_id), "t-" + env_id)
    with Broker("memory://") as broker:
        results = broker.drain(contract.RESULTS, timeout=0.5)
    assert any(m == "t-" + env_id for _, m in results)       # it ran to its result
    return [b["state"] for b, _ in results if contract.is_job_event(b)
            and b["environment_id"] == env_id and b.get("kind") == "job"]


def test_a_job_that_takes_a_free_lock_does_not_say_it_runs(tmp_path):
    """The API shows a job running from its creation: saying it again is one
    confirmed publish and one stored event per deployment for nothing."""
    from fornace.common.consumer import Delivery

    def first_delivery(daemon, env_id, body, message_id):
        daemon.handle_task(body, Delivery(message_id=message_id, queue=contract.TASKS))
    assert _job_states_sent(tmp_path, first_delivery) == []


def test_a_redelivered_or_taken_over_job_says_it_runs(tmp_path):
    """An earlier copy of either may have been shown queued: the API hears running."""
    from fornace.common.consumer import Delivery

    def redelivered(daemon, env_id, body, message_id):
        daemon.handle_task(body, Delivery(message_id=message_id, queue=contract.TASKS,
                                          redelivered=True))

    def taken_over(daemon, env_id, body, message_id):
        daemon._reserve(body, message_id)()
    assert _job_states_sent(tmp_path / "a", redelivered) == ["running"]
    assert _job_states_sent(tmp_path / "b", taken_over) == ["running"]


def _bad_catalog(root: Path) -> Path:
    (root / "workflows").mkdir(parents=True)
    (root / "workflows" / "a.xml").write_text(
        '<workflow>\n<rule match="$[?(@.n == ' + "9" * 5000 + ')]"/></workflow>\n')
    (root / "workflows" / "b.xml").write_text('<workflow>\n<rule match="$">\n<nope/></rule>'
                                              '</workflow>\n')
    (root / "workflows" / "c.xml").write_text('<workflow><rule match="$"/></workflow>\n')
    return root


def test_a_conductor_with_bad_workflow_files_refuses_to_start_naming_them_all(tmp_path):
    root = _bad_catalog(tmp_path / "catalog")
    with pytest.raises(WorkflowError,
                       match=f"{root / 'workflows' / 'a.xml'}:2: bad filter ") as caught:
        Conductor(ConductorSettings(data_dir=root), lambda task: None)
    text = str(caught.value)
    assert f"{root / 'workflows' / 'a.xml'}:2: bad filter " in text
    assert f"{root / 'workflows' / 'b.xml'}:3: unknown function <nope>" in text


def test_fornace_conductor_exits_2_on_a_bad_workflow_file(tmp_path):
    root = _bad_catalog(tmp_path / "catalog")
    conf = tmp_path / "fornace.conf"
    conf.write_text(f"[DEFAULT]\ndata_dir = {root}\n[broker]\nurl = memory://\n")
    proc = subprocess.run([sys.executable, "-m", "fornace.cli", "--config-file", str(conf),
                           "conductor", "--stacks", "simulator"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"fornace: 2 problems in the workflow files of {root / 'workflows'}:" in proc.stderr
    assert f"{root / 'workflows' / 'b.xml'}:3: unknown function <nope>" in proc.stderr


def test_a_task_whose_cloud_refuses_it_is_answered_with_why():
    """A stack backend the task cannot have (its trust refused, no endpoint: a
    ValueError) fails its stack actions with why; the job ends and is answered
    instead of going back to the queue for ever.  Its trust stays (nothing was
    deleted), and a deletion's trust is left to nobody without [keystone_authtoken]."""
    from fornace.common.consumer import Delivery
    env_id = "d" + uuid.uuid4().hex[:8]
    deleted_trusts = []

    def stacks(task):
        raise ValueError("cannot find Heat in the Keystone catalog: trust refused")

    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                         engine=Settings(agent_timeout=1),
                                         delete_trust=deleted_trusts.append), stacks)
    body = contract.task_body(one_unit_task(env_id), None, "t1", trust_id="trust-1")
    daemon.handle_task(body, Delivery(message_id="t-" + env_id, queue=contract.TASKS))
    with Broker("memory://") as broker:
        results = collect(broker, contract.RESULTS, lambda found: any(
            message_id == "t-" + env_id for _, message_id in found))
        reports = [contract.parse_report(b) for b, _ in drain_reports(broker, timeout=0.5)]
    [result] = [b for b, message_id in results if message_id == "t-" + env_id]
    assert "trust_id" not in result
    errors = [r.text for r in reports if r.level == "error" and r.environment_id == env_id]
    assert any("the cloud is unreachable: cannot find Heat" in text for text in errors), errors
    assert deleted_trusts == []


def test_a_deletion_that_succeeded_deletes_its_trust_and_a_failed_one_keeps_it():
    from fornace.common.consumer import Delivery
    deleted: list[str] = []
    cloud = SimulatedCloud()

    def run_deletion(env_id: str, trust_id: str, fail: bool) -> None:
        daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                             engine=Settings(agent_timeout=1),
                                             delete_trust=deleted.append),
                           lambda task: (FailingDelete() if fail
                                         else cloud.executors()[0]))
        body = contract.deletion_task_body(env_id, "x", None, "t1", job_id="j-" + env_id,
                                           trust_id=trust_id)
        daemon.handle_task(body, Delivery(message_id="t-" + env_id, queue=contract.TASKS))

    run_deletion("d" + uuid.uuid4().hex[:8], "trust-ok", fail=False)
    run_deletion("d" + uuid.uuid4().hex[:8], "trust-kept", fail=True)
    assert deleted == ["trust-ok"]


class FailingDelete(UnreachableStacks):
    def __init__(self) -> None:
        super().__init__("Heat said no")


def test_a_lock_release_during_a_short_database_outage_is_retried(tmp_path, monkeypatch,
                                                                    caplog):
    """Regression (issue 29): PostgreSQL gone for 2 s as a job released its lock
    left the ended job holding it until it went stale, and the environment's
    next jobs were refused.  The release is tried again (bounded, logged)."""
    from sqlalchemy.exc import OperationalError
    from fornace.common.consumer import Delivery
    from fornace.common.db import outages
    from fornace.common.db.engine import upgrade
    from fornace.conductor.jobs.lock import Grant, JobLock
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    env_id = "d" + uuid.uuid4().hex[:8]
    monkeypatch.setattr(outages, "BACKOFF", (0.0, 0.0, 0.0))
    release, failures = JobLock.release, []

    def flaky_release(self, grant, done=True):
        if len(failures) < 2:
            failures.append(grant.job_id)
            raise OperationalError("UPDATE job_locks", {}, Exception("server closed the "
                                                                    "connection"))
        return release(self, grant, done)
    monkeypatch.setattr(JobLock, "release", flaky_release)
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA, database_url=url,
                                         engine=Settings(agent_timeout=0.5)),
                       lambda task: SimulatedCloud().executors()[0])
    with caplog.at_level("WARNING", logger="fornace.common.db.outages"):
        daemon.handle_task(one_unit_task(env_id), Delivery(message_id="t-" + env_id,
                                                           queue=contract.TASKS))
    assert failures == ["t-" + env_id] * 2
    assert "releasing the lock failed (OperationalError" in caplog.text
    with JobLock(url) as lock:
        assert lock.holder(env_id) is None
        assert isinstance(lock.acquire(env_id, "next-job", "c"), Grant)


def test_queues_written_down_during_a_short_database_outage_are_retried(tmp_path, monkeypatch):
    """Regression (issue 29, found by tools/chaos.py restart-database): PostgreSQL
    restarting as a job began lost the record of its units' queues ("could not
    write down its queues"), so deleting the environment left its results queue
    on the broker.  Writing them down is tried again (bounded, logged)."""
    from sqlalchemy.exc import OperationalError
    from fornace.common.consumer import Delivery
    from fornace.common.db import outages, queues
    from fornace.common.db.engine import make_engine, upgrade
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    env_id = "q" + uuid.uuid4().hex[:8]
    monkeypatch.setattr(outages, "BACKOFF", (0.0, 0.0, 0.0))
    record, failures = queues.record, []

    def flaky_record(connection, environment_id, names):
        if len(failures) < 2:
            failures.append(environment_id)
            raise OperationalError("INSERT INTO agent_queues", {},
                                   Exception("the database system is starting up"))
        return record(connection, environment_id, names)
    monkeypatch.setattr(queues, "record", flaky_record)
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA, database_url=url,
                                         engine=Settings(agent_timeout=0.5)),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.handle_task(one_unit_task(env_id), Delivery(message_id="t-" + env_id,
                                                       queue=contract.TASKS))
    assert failures == [env_id] * 2
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            kept = queues.of_environment(connection, env_id)
    finally:
        engine.dispose()
    assert any(name.startswith(f"e{env_id}-") for name in kept), kept


def test_simulated_agents_have_no_queues_to_write_down(tmp_path):
    """``--agents simulator``: no agent, no queue on the broker; a 1000-unit job
    wrote 1000 names nobody would delete (a twentieth of its time on PostgreSQL)."""
    from fornace.common.consumer import Delivery
    from fornace.common.db import queues
    from fornace.common.db.engine import make_engine, upgrade
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    env_id = "q" + uuid.uuid4().hex[:8]
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA, database_url=url,
                                         agents="simulator"),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.handle_task(one_unit_task(env_id), Delivery(message_id="t-" + env_id,
                                                       queue=contract.TASKS))
    with Broker("memory://") as broker:
        assert any(m == "t-" + env_id for _, m in broker.drain(contract.RESULTS, timeout=0.5))
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            assert queues.of_environment(connection, env_id) == []
    finally:
        engine.dispose()


def test_a_job_whose_lock_stays_out_of_reach_goes_back_to_the_queue_unrun(tmp_path, monkeypatch):
    """Regression (issue 29): a database out of reach past the retries of
    taking the lock ran the job without it ("running job ... without it"), so
    a second conductor could run it too.  The task now goes back to the queue
    (Requeue) with nothing run and no result sent."""
    from sqlalchemy.exc import OperationalError
    from fornace.common.consumer import Delivery, Requeue
    from fornace.common.db import outages
    from fornace.common.db.engine import upgrade
    from fornace.conductor.jobs.lock import JobLock
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    env_id = "u" + uuid.uuid4().hex[:8]
    monkeypatch.setattr(outages, "BACKOFF", (0.0, 0.0))
    tries = []

    def unreachable(self, *args, **kwargs):
        tries.append(args[0])
        raise OperationalError("SELECT deployments.finished", {},
                               Exception("connection refused"))
    monkeypatch.setattr(JobLock, "acquire", unreachable)
    broker_url = "memory://"
    daemon = Conductor(ConductorSettings(broker_url=broker_url, data_dir=DATA, database_url=url,
                                         engine=Settings(agent_timeout=0.5)),
                       lambda task: SimulatedCloud().executors()[0])
    with pytest.raises(Requeue, match="the job lock is out of reach"):
        daemon.handle_task(one_unit_task(env_id), Delivery(message_id="t-" + env_id,
                                                           queue=contract.TASKS))
    assert tries == [env_id] * 3   # the first try and the two retries
    with Broker(broker_url) as broker:   # (memory:// is shared by the process's tests)
        sent = [body for body, _ in broker.drain(contract.RESULTS, timeout=0.2)]
    assert [body for body in sent if env_id in repr(body)] == []
