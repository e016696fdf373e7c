"""The dashboard with a field an uploaded package's type declares secret: its
service form takes it as a password, refuses a bad one without showing it, and
no page -- the environment, the service's form, the job, its trace, the
deployments -- ever holds its value."""
from __future__ import annotations

import re

from fornace.common import contract
from test_dashboard import Browser, field_error
from test_dashboard_packages import api, user  # noqa: F401
from test_package_secrets import SIGNATURE, package

MIA = {"X-Auth-Token": "mia"}


def note_form(**values: str) -> dict[str, str]:
    return {"type": "signedNote", "name": "memo", "signature": SIGNATURE, "units": "1",
            "osImage": '{"name": "local", "type": "linux"}', **values}


def test_no_page_shows_a_declared_secret(api):
    mia: Browser = user(api, "mia")
    assert api.client.post("/packages", content=package(), headers={
        **MIA, "Content-Type": "application/zip"}).status_code == 201
    env_id = api.client.post("/environments", json={"name": "signed"}, headers=MIA).json()["id"]
    assert api.client.put(f"/environments/{env_id}/packages/signer", content=b"", headers={
        **MIA, "Content-Type": "application/json"}).status_code == 200

    page = mia.get(f"/environments/{env_id}/services/new?type=signedNote")
    assert re.search(r'type="password"[^>]*name="signature"|name="signature"[^>]*'
                     r'type="password"', page), page
    bad = mia.post(f"/environments/{env_id}/services/new", note_form(signature="NOT-A-SIG"))
    assert bad.status_code == 400
    assert "NOT-A-SIG" not in bad.text and field_error(bad.text, "signature")
    made = mia.post(f"/environments/{env_id}/services/new", note_form())
    assert made.status_code == 303, made.text
    mia.follow(made)
    deployed = mia.post(f"/environments/{env_id}/deploy")
    assert deployed.status_code == 303, deployed.text
    job_id = api.client.get(f"/environments/{env_id}/deployments",
                            headers=MIA).json()["deployments"][0]["id"]
    api.store.reports.add(contract.report_body(env_id, "environment",
                                               f"signed with {SIGNATURE}", "info", env_id),
                          f"{job_id}-report-1")
    service_id = api.client.get(f"/environments/{env_id}/deployments", headers=MIA).json()[
        "deployments"][0]["description"]["services"][0]["id"]
    for path in (f"/environments/{env_id}", f"/environments/{env_id}/live",
                 f"/environments/{env_id}/jobs/{job_id}", "/deployments"):
        mia.get(path)
    mia.client.get(f"/dashboard/environments/{env_id}/services/{service_id}/edit")
    assert all(SIGNATURE not in text for text in mia.pages)
    assert any("signed with ***" in text for text in mia.pages)
