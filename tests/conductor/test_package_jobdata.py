"""The workflow packages a task names, as a conductor loads them (contract 1.8):
by id from the database, checked by sha256, read once per version, their
files beside the conductor's own (replacing same-named ones), their
templates first, their types joined; what cannot be loaded says why."""
from __future__ import annotations

import json

import pytest

from packagekit import Archives, package_files
from standins import drain_reports
from fornace.common.catalog import builtin_catalog
from fornace.common.resources import BUILTIN_DATA
from fornace.conductor.workflowfiles import load_workflows
from fornace.conductor.packages.jobdata import JobData, PackageData, PackageUnavailable
from fornace.conductor.templates import TemplateStore


@pytest.fixture(scope="module")
def base() -> JobData:
    return JobData(load_workflows(BUILTIN_DATA / "workflows"), TemplateStore(BUILTIN_DATA),
                   builtin_catalog())


@pytest.fixture
def library(base):
    archives = Archives()
    data = PackageData(base, archives)
    data.archives = archives
    yield data
    data.close()


def test_a_task_without_packages_runs_the_conductors_own_data(library, base):
    assert library.for_task([]) is base


def test_a_packages_workflows_join_and_each_version_is_read_once(library, base):
    ref = library.archives.add("p1", package_files())
    job = library.for_task([ref])
    names = [w.path.name for w in job.workflows]
    assert names == sorted({w.path.name for w in base.workflows} | {"hello.xml"})
    assert job.store.agent_template("Hello")["Scripts"] == ["hello.sh"]     # the package's
    assert "Resources" in job.store.heat_template("LinuxInstance")         # the conductor's
    assert job.store.script("hello.sh") == b"#!/bin/sh\necho hello\n"
    library.for_task([ref])
    assert library.archives.reads == ["p1"]


def test_a_package_file_replaces_the_conductors_file_of_that_name(library, base):
    files = package_files()
    files["workflows/Common.xml"] = files.pop("workflows/hello.xml")
    job = library.for_task([library.archives.add("p1", files)])
    [common] = [w for w in job.workflows if w.path.name == "Common.xml"]
    assert common.path.parent.parent != BUILTIN_DATA
    assert len(job.workflows) == len(base.workflows)


def test_a_packages_types_join_the_catalog(library):
    files = package_files()
    files["types.json"] = json.dumps({"types": {"helloService": {
        "extends": "linuxService", "schema": {"properties": {"greeting": {"type": "string"}}}}}
    }).encode()
    job = library.for_task([library.archives.add("p1", files)])
    assert job.catalog.is_a("helloService", "linuxService")
    assert not builtin_catalog().known("helloService")


def test_what_cannot_be_loaded_says_which_package_and_why(library, base):
    ref = library.archives.add("p1", package_files())
    with pytest.raises(PackageUnavailable, match="hello 1.0.0: its archive does not match"):
        library.for_task([{**ref, "digest": "0" * 64}])
    with pytest.raises(PackageUnavailable, match=r"hello 1.0.0 \(id gone\) is not in the "
                                                 r"database: it was deleted"):
        library.for_task([{**ref, "id": "gone"}])
    broken = package_files(version="2.0.0", workflow="<workflow><rule match='$'>"
                                                    "<nothing-like-it/></rule></workflow>")
    with pytest.raises(PackageUnavailable,
                       match=r"^package hello 2\.0\.0: workflows/hello\.xml:1: ") as caught:
        library.for_task([library.archives.add("p2", broken)])
    assert "hello 2.0.0: " in str(caught.value) and "hello.xml:1" in str(caught.value)
    assert "/tmp" not in str(caught.value)        # the conductor's folders stay its own
    nodb = PackageData(base, None)
    with pytest.raises(PackageUnavailable, match="no database"):
        nodb.for_task([ref])
    nodb.close()


def test_only_the_last_versions_stay_loaded(base):
    archives = Archives()
    library = PackageData(base, archives, keep=2)
    refs = [archives.add(f"p{n}", package_files(version=f"1.0.{n}")) for n in range(3)]
    for ref in refs:
        library.for_task([ref])
    library.for_task([refs[0]])            # forgotten: read again
    library.for_task([refs[2]])            # kept
    assert archives.reads == ["p0", "p1", "p2", "p0"]
    library.close()


def test_a_task_naming_a_missing_package_ends_with_why(tmp_path):
    """Not retried for ever: the job ends with an error report naming the package."""
    import uuid

    from fornace.common import contract
    from fornace.common.broker import Broker
    from fornace.common.db.engine import upgrade
    from fornace.conductor.daemon import Conductor, ConductorSettings
    from fornace.conductor.executors.simulator import SimulatedCloud
    from waiting import wait_for

    url = f"sqlite:///{tmp_path / 'conductor.sqlite'}"
    upgrade(url)
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=BUILTIN_DATA,
                                         agents="simulator", database_url=url),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.start()
    env_id = "p" + uuid.uuid4().hex[:8]
    ref = {"id": "gone", "name": "greet", "version": "1.0.1", "digest": "0" * 64}
    reports: list[dict] = []
    try:
        assert daemon.wait_ready()
        with Broker("memory://") as broker:
            broker.publish(contract.TASKS, contract.task_body(
                {"id": env_id, "name": "pinned", "services": []}, None, "t1",
                contract.job_section("j-" + env_id, "deploy", {}), packages=[ref]),
                "task-" + env_id)
            results: list = []

            def ended() -> bool:
                results.extend(m for _, m in broker.drain(contract.RESULTS, timeout=0.1)
                               if m == "task-" + env_id)
                reports.extend(b for b, m in drain_reports(broker, timeout=0.1)
                               if m.startswith("task-" + env_id))
                return bool(results)
            wait_for(ended, "the job's result", timeout=30)
    finally:
        daemon.shutdown()
    [error] = [r for r in reports if r["level"] == "error"]
    assert error["text"].startswith("deploy failed: package greet 1.0.1 (id gone) is not in "
                                    "the database"), error
