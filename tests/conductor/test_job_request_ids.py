"""The conductor's log lines of a job name the API request that started it
(contract 1.13: ``request_id`` and ``global_request_id`` on the task), and
only that job's: the next job of the same consumer thread shows none."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.common.db.engine import upgrade
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors.simulator import SimulatedCloud
from fornace.conductor.session import Settings
from logkit import captured_lines
from test_daemon import collect, model

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture
def conductor(tmp_path):
    """One consumer thread (every job runs in it, one after the other), job
    locks in SQLite (a heartbeat thread per job), its own in-memory broker."""
    url = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    upgrade(url)
    broker_url = f"memory://{uuid.uuid4().hex[:8]}"
    daemon = Conductor(ConductorSettings(broker_url=broker_url, data_dir=DATA, agents="simulator",
                                         max_environments=1, database_url=url,
                                         engine=Settings(agent_timeout=60)),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.start()
    assert daemon.wait_ready()
    try:
        yield broker_url
    finally:
        daemon.shutdown()


def test_a_job_s_lines_carry_its_request_s_ids_and_the_next_job_s_do_not(conductor):
    ours, theirs = f"req-{uuid.uuid4()}", f"req-{uuid.uuid4()}"
    first, second = "r" + uuid.uuid4().hex[:8], "r" + uuid.uuid4().hex[:8]
    with captured_lines() as lines, Broker(conductor) as broker:
        broker.publish(contract.TASKS, contract.with_request(
            contract.task_body(model(first), None, "tenant-a"), ours, theirs), "task-" + first)
        broker.publish(contract.TASKS, contract.task_body(model(second), None, "tenant-b"),
                       "task-" + second)
        results = collect(broker, contract.RESULTS, lambda found: {
            "task-" + first, "task-" + second} <= {message_id for _, message_id in found})
    # the request's ids are not part of the model: they do not come back in the result
    result = next(body for body, message_id in results if message_id == "task-" + first)
    assert "request_id" not in result and "global_request_id" not in result
    text = lines()
    of_first = [line for line in text if first in line]
    of_second = [line for line in text if second in line]
    assert any("started" in line for line in of_first)
    assert any("ended: success" in line for line in of_first)
    assert all(f"[{theirs} {ours} - tenant-a " in line for line in of_first)
    assert of_second and not any("req-" in line for line in of_second)
    assert [line for line in text if ours in line] == of_first


def test_a_task_with_a_malformed_request_id_is_set_aside_unrun(conductor):
    env_id = "r" + uuid.uuid4().hex[:8]
    body = {**contract.task_body(model(env_id), None, "t1"),
            "request_id": "req-1 INJECTED into the logs"}
    with captured_lines() as lines, Broker(conductor) as broker:
        broker.publish(contract.TASKS, body, "task-" + env_id)
        check = "c" + uuid.uuid4().hex[:8]    # a good task after it: the bad one was handled
        broker.publish(contract.TASKS, contract.task_body(model(check), None, "t1"),
                       "task-" + check)
        results = collect(broker, contract.RESULTS,
                          lambda found: any(m == "task-" + check for _, m in found))
    assert "task-" + env_id not in {message_id for _, message_id in results}
    text = "\n".join(lines())
    assert "field 'request_id' must be req- followed by a UUID" in text
    assert "INJECTED" not in text
