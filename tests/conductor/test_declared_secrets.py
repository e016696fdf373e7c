"""A field a service type's schema declares secret (``writeOnly``) is masked by
the conductor as passwords are: its value never reaches a report, a log line
or the trace, even when a workflow writes it into a report's text."""
from __future__ import annotations

from fornace.common.catalog import builtin_catalog, catalog_with
from fornace.common.secrets import find_secrets, mask_text

NOTE = {"extends": "linuxService",
        "schema": {"properties": {"signature": {"type": "string", "writeOnly": True}}}}


def test_declared_secret_fields_are_found_like_passwords():
    catalog = catalog_with(builtin_catalog(), {"linuxNote": NOTE})
    assert "signature" in catalog.secret_fields
    assert "signature" not in builtin_catalog().secret_fields
    model = {"services": [{"type": "linuxNote", "signature": "s1gn3d-by-me",
                           "adminPassword": "P@ssw0rd1", "name": "memo"}]}
    assert find_secrets(model) == {"P@ssw0rd1"}
    found = find_secrets(model, keys=catalog.secret_fields)
    assert found == {"P@ssw0rd1", "s1gn3d-by-me"}
    assert mask_text("signed s1gn3d-by-me", found) == "signed ***"


SIGN = """<workflow>
  <rule match="$.services[?(@.type == 'linuxNote' and not @.temp.told)]" desc="tell">
    <set path="temp.told"><true/></set>
    <report entity="service"><parameter name="id"><select path="id"/></parameter>
      <parameter name="text">signed with <select path="signature"/></parameter>
      <parameter name="details"><select path="$"/></parameter></report>
  </rule>
</workflow>
"""


def test_a_jobs_reports_and_trace_mask_the_fields_its_catalog_declares_secret(tmp_path):
    """The session's own reports (what a workflow composes) go to the API as
    they are: the conductor masks them with the catalog's declared secrets."""
    import copy

    from fornace.common import contract
    from fornace.common.resources import BUILTIN_DATA
    from fornace.conductor.executors.simulator import SimulatedCloud
    from fornace.conductor.jobs.lifecycle import Job, run_job
    from fornace.conductor.jobs.records import JobRecorder
    from fornace.conductor.jobs.tracing import JobTrace
    from fornace.conductor.session import Settings
    from fornace.conductor.templates import TemplateStore
    from fornace.conductor.workflowfiles import load_workflows

    (tmp_path / "Sign.xml").write_text(SIGN)
    catalog = catalog_with(builtin_catalog(), {"linuxNote": NOTE})
    model = {"id": "envsig01", "name": "signed", "services": [
        {"id": "note1", "type": "linuxNote", "name": "memo", "signature": "s1gn3d-by-me",
         "osImage": {"name": "local", "type": "linux"}, "units": []}]}
    task = contract.parse_task(contract.task_body(
        copy.deepcopy(model), None, "tenant", job=contract.job_section("j1", "deploy", {})))
    stacks, agents = SimulatedCloud().executors()
    reports: list[dict] = []
    trace = JobTrace()
    outcome = run_job(Job(task=task, workflows=load_workflows(tmp_path),
                          store=TemplateStore(BUILTIN_DATA), catalog=catalog, stacks=stacks,
                          agents=agents, recorder=JobRecorder("envsig01", "j1"),
                          engine=Settings(), reporter=reports.append, trace=trace))
    assert outcome.status == "success", outcome.reports
    told = [r for r in reports if r["entity"] == "service"]
    assert told and told[0]["text"] == "signed with ***"
    assert "s1gn3d-by-me" not in repr(reports)
    assert "s1gn3d-by-me" not in repr(trace.document("envsig01", "j1", "deploy"))
