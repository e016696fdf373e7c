"""Plan ids: a rerun of the same task sends the same ids, a new deployment new ones."""
from __future__ import annotations

from fornace.conductor.plans import PlanIds


def plan(port: str = "80") -> dict:
    return {"Scripts": ["YQ=="], "Commands": [{"Name": "a.sh", "Arguments": {"port": port}}],
            "ID": "random"}


def sequence(seed: str | None) -> list[str]:
    ids = PlanIds(seed)
    return [ids.assign("svc/u1", plan()), ids.assign("svc/u2", plan()),
            ids.assign("svc/u1", plan()), ids.assign("svc/u1", plan("81"))]


def test_a_rerun_of_the_same_task_sends_the_same_ids():
    first, again = sequence("task-1"), sequence("task-1")
    assert first == again
    assert len(set(first)) == 4          # units, repeats and contents all differ
    assert all(len(i) == 32 for i in first)


def test_another_deployment_gets_other_ids():
    assert not set(sequence("task-1")) & set(sequence("task-2"))


def test_without_a_seed_ids_are_random():
    assert sequence(None) != sequence(None)


def test_the_id_is_set_on_the_plan():
    body = plan()
    assert PlanIds("t").assign("svc/u1", body) == body["ID"] != "random"
