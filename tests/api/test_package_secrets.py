"""A field an uploaded workflow package's type declares secret (``writeOnly``
in its ``types.json``) is kept as a password is: masked in every answer
(services, environment, deployments, jobs, reports, task events, traces),
in the description a job stores, and never quoted by a validation error --
while the task the conductor runs with carries the real value."""
from __future__ import annotations

import base64
import json
import zlib

import pytest
from sqlalchemy import select

from apikit import Published
from fornace.common import contract
from fornace.common.db.models import Job
from packagekit import zip_of
from test_packages_api import packages_api, uploaded

SIGNATURE = "sig-only-mine-4217"   # named like no password: only its type says it is secret
SIGNED = {"extends": "linuxService",
          "schema": {"required": ["signature"],
                     "properties": {"signature": {"type": "string", "writeOnly": True,
                                                  "pattern": "^sig-[a-z0-9-]+$"}}}}
WORKFLOW = "<workflow/>"


def package() -> bytes:
    return zip_of({"package.json": json.dumps({"name": "signer", "version": "1.0.0"}).encode(),
                   "workflows/Sign.xml": WORKFLOW.encode(),
                   "types.json": json.dumps({"types": {"signedNote": SIGNED}}).encode()})


def service(**fields) -> dict:
    return {"type": "signedNote", "name": "memo", "signature": SIGNATURE,
            "osImage": {"name": "local", "type": "linux"}, "units": [{}], **fields}


@pytest.fixture
def api(tmp_path):
    made = packages_api(f"sqlite:///{tmp_path / 'secrets.sqlite'}")
    made.published = Published()
    made.store._publish = made.published
    uploaded(made, package())
    return made


def pinned_session(api) -> tuple[str, str]:
    """An environment pinned to the package, and an open session holding a signed note."""
    env_id = api.client.post("/environments", json={"name": "signed"}).json()["id"]
    answer = api.client.put(f"/environments/{env_id}/packages/signer", content=b"",
                            headers={"Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    answer = api.client.post(f"/environments/{env_id}/services", json=service(),
                             headers={"X-Configuration-Session": session})
    assert answer.status_code == 200, answer.text
    return env_id, session


def deploy(api, env_id: str, session: str) -> tuple[dict, str]:
    answer = api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    assert answer.status_code == 200, answer.text
    return api.published.tasks[-1]


def test_the_answers_about_the_services_mask_it(api):
    env_id, session = pinned_session(api)
    headers = {"X-Configuration-Session": session}
    for path in (f"/environments/{env_id}", f"/v1/environments/{env_id}",
                 f"/environments/{env_id}/services", f"/v1/environments/{env_id}/services"):
        answer = api.client.get(path, headers=headers)
        assert answer.status_code == 200, (path, answer.text)
        assert SIGNATURE not in answer.text and '"signature":"***"' in answer.text.replace(
            " ", ""), path


def test_the_deployments_and_the_stored_job_mask_it_the_task_does_not(api):
    env_id, session = pinned_session(api)
    body, job_id = deploy(api, env_id, session)
    assert body["services"][0]["signature"] == SIGNATURE     # the conductor needs it
    for path in (f"/environments/{env_id}/deployments", f"/v1/environments/{env_id}/deployments",
                 "/deployments", "/v1/deployments"):
        answer = api.client.get(path)
        assert answer.status_code == 200, (path, answer.text)
        assert SIGNATURE not in answer.text, path
        shown = answer.json()["deployments"][0]["description"]["services"][0]
        assert shown["signature"] == "***", path
    with api.store.sessions() as db:
        stored = db.scalars(select(Job).where(Job.id == job_id)).one()
        assert SIGNATURE not in json.dumps(stored.description)


def test_a_job_an_action_starts_stores_it_masked(api):
    env_id, session = pinned_session(api)
    answer = api.client.post(f"/environments/{env_id}/actions/plan", json={},
                             headers={"X-Configuration-Session": session})
    assert answer.status_code == 202, answer.text
    body, job_id = api.published.tasks[-1]
    assert body["services"][0]["signature"] == SIGNATURE
    with api.store.sessions() as db:
        assert SIGNATURE not in json.dumps(db.get(Job, job_id).description)


def test_reports_task_events_and_the_trace_mask_it(api):
    env_id, session = pinned_session(api)
    _body, job_id = deploy(api, env_id, session)
    api.store.reports.add(contract.report_body(env_id, "environment",
                                               f"signed with {SIGNATURE}", "info", env_id),
                          f"{job_id}-report-1")
    api.store.job_events.apply(contract.task_event_body(
        env_id, job_id, {"change_id": "T1", "status": "running",
                         "summary": f"signing {SIGNATURE}", "log": [f"sig {SIGNATURE}"]}),
        None)
    rounds = [{"round": 1, "events": [{"set": "services[0].signature",
                                       "value": {"signature": "another-one-9876"}},
                                      {"text": f"quoted {SIGNATURE}"}]}]
    data = base64.b64encode(zlib.compress(json.dumps({"rounds": rounds}).encode())).decode()
    trace = contract.trace_event_body(env_id, job_id, {"encoding": "zlib+base64",
                                                       "data": data, "size": 10})
    api.store.job_events.apply(trace, None)
    reports = api.client.get(f"/environments/{env_id}/deployments/{job_id}")
    job = api.client.get(f"/environments/{env_id}/jobs/{job_id}")
    shown = api.client.get(f"/environments/{env_id}/jobs/{job_id}/trace")
    assert shown.status_code == 200, shown.text
    for answer in (reports, job, shown):
        assert answer.status_code == 200, answer.text
        assert SIGNATURE not in answer.text and "***" in answer.text
    assert "another-one-9876" not in shown.text     # a value under the secret key, masked


@pytest.mark.parametrize("wrong", ["not signed at all", "SIG-UPPER-CASE"])
def test_an_invalid_value_is_refused_without_being_quoted(api, wrong):
    env_id, session = pinned_session(api)
    answer = api.client.post(f"/environments/{env_id}/services",
                             json=service(name="memo2", signature=wrong),
                             headers={"X-Configuration-Session": session})
    assert answer.status_code == 400, answer.text
    assert wrong not in answer.text and "signature" in answer.text
    assert "match" in answer.text


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_jobs_stored_before_are_masked_by_the_migration(tmp_path, backend):
    """Migration 0012: a job stored in clear before declared secrets were masked
    (written here as an older Fornace left it) is masked, its other values kept."""
    from alembic import command
    from fornace.common.db.engine import alembic_config
    from apikit import reset_postgres
    from services import postgres_url

    url = f"sqlite:///{tmp_path / 'old.sqlite'}" if backend == "sqlite" else postgres_url()
    if backend == "postgresql":
        reset_postgres(url)
    try:
        made = packages_api(url)
        made.published = Published()
        made.store._publish = made.published
        uploaded(made, package())
        env_id, session = pinned_session(made)
        deploy(made, env_id, session)
        with made.store.sessions() as db, db.begin():
            job = db.scalars(select(Job).where(Job.environment_id == env_id)).one()
            clear = json.loads(json.dumps(job.description))
            clear["services"][0]["signature"] = SIGNATURE
            job.description = clear
            job.parameters = {"signature": SIGNATURE, "note": "kept"}
            job_id = job.id
        command.downgrade(alembic_config(url), "0011")
        command.upgrade(alembic_config(url), "head")
        with made.store.sessions() as db:
            job = db.get(Job, job_id)
            assert job.description["services"][0]["signature"] == "***"
            assert job.description["services"][0]["name"] == "memo"
            assert job.parameters == {"signature": "***", "note": "kept"}
    finally:
        if backend == "postgresql":
            reset_postgres(url)
