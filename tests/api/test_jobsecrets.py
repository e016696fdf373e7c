"""What the API keeps of a job's secrets (:mod:`fornace.api.jobsecrets`): bounded
in jobs and in characters, kept by the deploy request so that the job's first
reports read no description, and masked from what the job sends."""
from __future__ import annotations

import pytest

from fornace.api import jobsecrets
from fornace.common import contract
from apikit import web_server
from test_jobs_api import _api, new_env


@pytest.fixture(autouse=True)
def forgotten():
    jobsecrets.forget_all()
    yield
    jobsecrets.forget_all()


class _NoDatabase:
    """A session that fails any read: the secrets must come from what is kept."""

    def get(self, *_args, **_kwargs):
        raise AssertionError("the descriptions were read")


def _job(job_id: str):
    return type("Job", (), {"id": job_id, "environment_id": "e", "session_id": None})()


def _no_keys(_db, _env_id):
    raise AssertionError("the catalog was read")


def test_kept_secrets_are_bounded_by_characters_and_jobs(monkeypatch):
    monkeypatch.setattr(jobsecrets, "_CHARACTERS_KEPT", 100)
    monkeypatch.setattr(jobsecrets, "_JOBS_KEPT", 3)
    jobsecrets.remember("a", {"x" * 40})
    jobsecrets.remember("b", {"y" * 40})
    assert jobsecrets.job_secrets(_NoDatabase(), _job("a"), _no_keys) == {"x" * 40}
    jobsecrets.remember("c", {"z" * 40})      # 123 characters: the least recent goes
    assert set(jobsecrets._secrets_kept) == {"a", "c"}
    jobsecrets.remember("d", {"w" * 500})     # larger than the whole bound: not kept
    assert "d" not in jobsecrets._secrets_kept
    for name in "efg":
        jobsecrets.remember(name, {name * 10})
    assert list(jobsecrets._secrets_kept) == ["e", "f", "g"]   # at most 3 jobs
    assert jobsecrets._characters_kept == 33


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_deployment_s_reports_are_masked_with_the_secrets_its_request_kept(backend,
                                                                            tmp_path):
    for api in _api(backend, tmp_path):
        service = {**web_server(), "adminPassword": "s3cret-value!"}
        env_id, session = new_env(api.client, [service])
        deployed = api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
        assert deployed.status_code == 200, deployed.text
        job_id = api.client.get(f"/environments/{env_id}/jobs").json()["jobs"][0]["id"]
        assert "s3cret-value!" in jobsecrets._secrets_kept[job_id][1]
        body = contract.report_body("u1", "unit", "logged in with s3cret-value!", "info",
                                    env_id)
        api.store.reports.add(body, f"{job_id}-report-1")
        texts = [r["text"] for r in api.client.get(
            f"/environments/{env_id}/deployments/{job_id}").json()["reports"]]
        assert any(text.startswith("logged in with") for text in texts)
        assert all("s3cret-value!" not in text for text in texts)
