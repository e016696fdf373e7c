"""Change detection covers what runs: the workflow file, template and scripts
that configured a unit, and the package version (or data folder) each came from.

The comparison itself (:func:`changed_sources`) is a pure function; the jobs
below run on the simulated cloud with a copy of the data folder whose script
is then edited, as an operator's would be.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from fornace.common import contract
from fornace.conductor.executors.simulator import SimulatedCloud
from fornace.conductor.jobs.lifecycle import Job, run_job
from fornace.conductor.jobs.records import JobRecorder
from fornace.conductor.jobs.sources import RunSources, changed_sources, workflow_file
from fornace.conductor.jobs.tracing import JobTrace
from fornace.conductor.session import Settings
from fornace.conductor.templates import TemplateStore
from fornace.conductor.workflowfiles import load_workflows
from fornace.common.catalog import load_catalog
from fornace.common.resources import BUILTIN_DATA

KV_10 = {"script deploy_kv.py": {"digest": "aaa", "from": "kvstore 1.0.0"},
         "template Kv/Deploy": {"digest": "bbb", "from": "kvstore 1.0.0"},
         "workflow file Kv.xml": {"digest": "ccc", "from": "kvstore 1.0.0"}}


def now(**digests: str):
    """The sources in effect: kvstore 1.1.0's, with these digests changed
    (``script``, ``template``, ``workflow``; ``gone``: that kind has no file)."""
    def current(key: str):
        kind = key.split(" ")[0]
        if digests.get("gone") == kind:
            return None
        return {"digest": digests.get(kind, KV_10[key]["digest"]), "from": "kvstore 1.1.0"}
    return current


def test_the_same_files_from_another_version_are_unchanged() -> None:
    assert changed_sources(KV_10, now()) is None


def test_a_changed_script_names_itself_and_both_versions() -> None:
    assert changed_sources(KV_10, now(script="ddd")) == \
        "script deploy_kv.py changed in kvstore 1.1.0 (was kvstore 1.0.0)"


def test_every_changed_source_is_named_scripts_first() -> None:
    assert changed_sources(KV_10, now(workflow="x", script="y", template="z")) == (
        "script deploy_kv.py changed in kvstore 1.1.0 (was kvstore 1.0.0); "
        "template Kv/Deploy changed in kvstore 1.1.0 (was kvstore 1.0.0); "
        "workflow file Kv.xml changed in kvstore 1.1.0 (was kvstore 1.0.0)")


def test_a_file_no_longer_there_is_a_change() -> None:
    assert changed_sources(KV_10, now(gone="template")) == \
        "template Kv/Deploy no longer found (it was in kvstore 1.0.0)"


def test_the_same_origin_is_not_repeated() -> None:
    recorded = {"script s.py": {"digest": "1", "from": "data folder"}}
    assert changed_sources(recorded, lambda key: {"digest": "2", "from": "data folder"}) == \
        "script s.py changed in data folder"


@pytest.mark.parametrize("recorded", [None, {}, "junk", {"what": {"digest": "1"}},
                                      {"script s.py": "junk"}])
def test_a_config_without_sources_is_not_known_to_have_changed(recorded) -> None:
    assert changed_sources(recorded, lambda key: None) is None


def test_the_workflow_file_of_an_action() -> None:
    assert workflow_file("/srv/fornace/data/workflows/Kv.xml:12") == "Kv.xml"
    assert workflow_file("nowhere") == ""


# -- jobs on the simulated cloud ------------------------------------------------------

CATALOG = load_catalog(BUILTIN_DATA / "types.json")


def data_copy(root: Path) -> Path:
    data = root / "data"
    shutil.copytree(BUILTIN_DATA, data, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]"))
    return data


class Cloud:
    """The simulated cloud, its stacks kept between jobs; each job runs ``data``."""

    def __init__(self) -> None:
        self.stacks, self.agents = SimulatedCloud().executors()

    def run(self, model: dict, data: Path, sources: bool = True,
            **parameters) -> tuple[dict, JobRecorder, JobTrace]:
        task = contract.parse_task(contract.task_body(
            copy.deepcopy(model), None, "tenant",
            job=contract.job_section("job1", "deploy", parameters)))
        recorder, trace = JobRecorder(task.environment_id, "job1"), JobTrace()
        workflows, store = load_workflows(data / "workflows"), TemplateStore(data)
        self.agents.plans.clear()
        outcome = run_job(Job(task=task, workflows=workflows, store=store, catalog=CATALOG,
                              stacks=self.stacks, agents=self.agents, recorder=recorder,
                              engine=Settings(), trace=trace,
                              sources=RunSources(workflows, store) if sources else None))
        return outcome.model, recorder, trace


def site() -> dict:
    return {"id": "envsim01", "name": "sim", "services": [
        {"id": "s1", "name": "site", "type": "linuxWebServer", "port": 8080,
         "osImage": {"name": "debian-12", "type": "linux"}, "unitNamingPattern": "web#",
         "units": [{"id": f"s1-u{i}", "name": f"site_instance_{i}"} for i in range(2)]}]}


def commands(recorder: JobRecorder) -> list[tuple[str, str, str]]:
    return sorted((t.target, t.reason, t.status) for t in recorder.tasks if t.target)


def edit_script(data: Path) -> None:
    script = data / "templates" / "agent" / "scripts" / "deploy_static_site.py"
    script.write_text(script.read_text() + "\n# edited by the operator\n")


def test_an_edited_script_reconfigures_each_unit_with_why(tmp_path) -> None:
    data, cloud = data_copy(tmp_path), Cloud()
    model, recorder, _ = cloud.run(site(), data)
    assert commands(recorder) == [("s1-u0", "new", "ok"), ("s1-u1", "new", "ok")]
    config = model["services"][0]["units"][0]["status"]["configs"][
        "Linux/DeployStaticSite@s1-u0"]
    assert set(config["sources"]) == {
        "workflow file LinuxWebServer.xml", "template Linux/DeployStaticSite",
        "script deploy_static_site.py", "script fornace_unit.py"}
    assert {s["from"] for s in config["sources"].values()} == {"data folder"}

    model, recorder, _ = cloud.run(model, data)      # nothing changed: nothing runs
    assert cloud.agents.plans == []

    edit_script(data)
    model, recorder, trace = cloud.run(model, data)
    why = "script deploy_static_site.py changed in data folder"
    assert commands(recorder) == [("s1-u0", why, "ok"), ("s1-u1", why, "ok")]
    assert {p.unit for p in cloud.agents.plans} == {"s1-u0", "s1-u1"}
    shown = trace.document("envsim01", "job1", "deploy")["reconfigured"]
    assert sorted((e["id"], e["name"], e["reason"]) for e in shown) == [
        ("s1-u0", "web1", why), ("s1-u1", "web2", why)]

    cloud.run(model, data)                            # the new digests are recorded
    assert cloud.agents.plans == []


def test_configs_recorded_before_sources_reconfigure_nothing(tmp_path) -> None:
    data, cloud = data_copy(tmp_path), Cloud()
    model, _, _ = cloud.run(site(), data, sources=False)   # as an older Fornace recorded
    assert "sources" not in model["services"][0]["units"][0]["status"]["configs"][
        "Linux/DeployStaticSite@s1-u0"]
    edit_script(data)
    cloud.run(model, data)
    assert cloud.agents.plans == []


@pytest.mark.parametrize("mode, expected", [("evaluate", {"s1-u1"}),
                                            ("always", {"s1-u0", "s1-u1"}),
                                            ("skip", set())])
def test_change_detection_modes_apply_to_sources(tmp_path, mode, expected) -> None:
    data, cloud = data_copy(tmp_path), Cloud()
    model, _, _ = cloud.run(site(), data)
    model["services"][0]["units"][0]["status"]["customized"] = True
    edit_script(data)
    cloud.run(model, data, change_detection=mode)
    assert {p.unit for p in cloud.agents.plans} == expected
