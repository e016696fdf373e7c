"""Job traces through the API: stored from trace events (contract 1.7), read
with GET .../jobs/{job_id}/trace -- on SQLite and on the real PostgreSQL."""
from __future__ import annotations

import base64
import zlib

import pytest
from sqlalchemy import delete, func, select

from fornace.common import contract
from fornace.common.db.models import Job, JobTrace
from fornace.conductor.dsl.pending import Action
from fornace.conductor.jobs.tracing import JobTrace as Recorder, encode
from test_jobs_api import _api, deployed


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    yield from _api(request.param, tmp_path)


def deploy_job(api) -> tuple[str, str]:
    env_id, _ = deployed(api)
    job_id = api.client.get(f"/environments/{env_id}/jobs").json()["jobs"][0]["id"]
    return env_id, job_id


def a_trace(leak: str = "") -> dict:
    trace = Recorder()
    trace.round_started(1)
    trace.pass_started(2)
    trace.action_queued(Action(kind="send-command", where="Deploy.xml:12", rule_id="deploy-site",
                               template="DeploySite", unit="u1"))
    trace.reported({"level": "info", "text": f"deployed with {leak}"})
    return trace.document("e", "j", "deploy")


def send(api, env_id, job_id, document, message_id="m-trace"):
    api.store.job_events.apply(contract.trace_event_body(env_id, job_id, encode(document)),
                               message_id)


def test_a_trace_is_stored_compressed_and_read_back_masked(api):
    env_id, job_id = deploy_job(api)
    send(api, env_id, job_id, a_trace(leak="P@ssw0rd-web"))   # the job's own secret
    response = api.client.get(f"/environments/{env_id}/jobs/{job_id}/trace")
    assert response.status_code == 200, response.text
    found = response.json()
    assert (found["job_id"], found["environment_id"], found["action"]) == (
        job_id, env_id, "deploy")
    events = found["rounds"][0]["events"]
    assert events[0] == {"e": "queued", "n": 1, "kind": "send-command", "rule": "deploy-site",
                         "at": "Deploy.xml:12", "template": "DeploySite", "unit": "u1"}
    assert events[1]["text"] == "deployed with ***"
    assert found["size"]["json"] > found["size"]["compressed"] > 0
    with api.store._sessions() as db:
        row = db.get(JobTrace, job_id)
        assert zlib.decompress(row.data) and row.stored == len(row.data)
    send(api, env_id, job_id, {**a_trace(), "rounds": []}, "m-trace-again")   # replaced
    assert api.client.get(f"/environments/{env_id}/jobs/{job_id}/trace").json()["rounds"] == []


def test_a_job_without_a_trace_is_404_and_another_tenant_403(api):
    env_id, job_id = deploy_job(api)
    response = api.client.get(f"/environments/{env_id}/jobs/{job_id}/trace")
    assert response.status_code == 404
    assert "has no trace" in response.json()["error"]["message"]
    send(api, env_id, job_id, a_trace())
    other = api.as_tenant("t2", "u2")
    assert api.client.get(f"/environments/{env_id}/jobs/{job_id}/trace",
                          headers=other).status_code == 403
    assert api.client.get(f"/environments/{env_id}/jobs/nope/trace").status_code == 404


def test_traces_that_are_not_traces_are_dropped(api, caplog):
    env_id, job_id = deploy_job(api)
    not_zlib = {"encoding": "zlib+base64", "size": 3,
                "data": base64.b64encode(b"abc").decode()}
    not_json = {"encoding": "zlib+base64", "size": 3,
                "data": base64.b64encode(zlib.compress(b"{{{")).decode()}
    for number, trace in enumerate((not_zlib, not_json)):
        api.store.job_events.apply({"environment_id": env_id, "job_id": job_id, "kind": "trace",
                                    "trace": trace}, f"bad-{number}")
    assert "is not zlib data" in caplog.text and "is not JSON once expanded" in caplog.text
    assert api.client.get(f"/environments/{env_id}/jobs/{job_id}/trace").status_code == 404


def test_a_trace_goes_with_its_job(api):
    env_id, job_id = deploy_job(api)
    send(api, env_id, job_id, a_trace())
    with api.store._sessions.begin() as db:
        db.execute(delete(Job).where(Job.id == job_id))
    with api.store._sessions() as db:
        assert db.scalar(select(func.count()).select_from(JobTrace)) == 0


def test_storing_looks_at_a_trace_and_reading_parses_it(api):
    """Stored without being parsed (a thousand units' trace is megabytes of
    JSON, and the result waits behind it): the truncated flag is found after
    the rounds, not in a text quoting it; a trace that is no JSON inside is
    kept, and reading it says it is not readable."""
    env_id, job_id = deploy_job(api)

    def truncated() -> bool:
        with api.store._sessions() as db:
            return db.get(JobTrace, job_id).truncated
    send(api, env_id, job_id, a_trace('"truncated": true'))
    assert truncated() is False
    send(api, env_id, job_id, {**a_trace(), "truncated": True}, "m-trace-2")
    assert truncated() is True
    broken = {"encoding": "zlib+base64", "size": 14,
              "data": base64.b64encode(zlib.compress(b'{"rounds": [}')).decode()}
    api.store.job_events.apply({"environment_id": env_id, "job_id": job_id, "kind": "trace",
                                "trace": broken}, "m-trace-3")
    answer = api.client.get(f"/environments/{env_id}/jobs/{job_id}/trace")
    assert answer.status_code == 404 and "is not JSON once expanded" in answer.text


def test_a_trace_is_read_after_the_api_forgot_the_job_s_secrets(api):
    """The job's lookup reads the environment without its description; the
    secrets the trace is masked with are read from the environment when the
    API no longer keeps them (after a restart): the description is then read."""
    from fornace.api import jobsecrets
    env_id, job_id = deploy_job(api)
    send(api, env_id, job_id, a_trace())
    jobsecrets.forget_all()
    answer = api.client.get(f"/environments/{env_id}/jobs/{job_id}/trace")
    assert answer.status_code == 200, answer.text
    jobsecrets.forget_all()
    assert api.client.get(f"/environments/{env_id}/jobs/{job_id}/tasks.tsv").status_code \
        in (200, 404)
