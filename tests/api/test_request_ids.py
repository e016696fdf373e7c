"""Request ids: ``x-openstack-request-id`` on every answer of the API, and the
same id on the log lines of that request -- the API's, and the conductor's
for the job the request started (an API and a conductor on one in-memory
broker, simulated cloud and agents, the lines formatted by oslo.log)."""
from __future__ import annotations

import asyncio
import re
import socket
import uuid
from pathlib import Path

import httpx
import pytest

from apikit import make_api
from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from fornace.common.contract import is_request_id
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors.simulator import SimulatedCloud
from fornace.conductor.session import Settings
from logkit import captured_lines
from serving import serving
from waiting import wait_for

DATA = Path(__file__).resolve().parents[2] / "data"
HEADER = "x-openstack-request-id"
SITE = {"type": "linuxWebServer", "name": "site", "port": 8080, "osImage": {"name": "local"},
        "units": [{}, {}]}


def request_id_of(answer: httpx.Response) -> str:
    ids = answer.headers.get_list(HEADER)
    assert len(ids) == 1 and is_request_id(ids[0]), (answer.status_code, ids)
    return ids[0]


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'ids.sqlite'}", max_body_size=2048)


def test_every_answer_names_a_request_of_its_own(api, monkeypatch):
    client = api.client
    env_id = client.post("/environments", json={"name": "ids"}).json()["id"]
    monkeypatch.setattr(api.store.environments, "get",
                        lambda *args: (_ for _ in ()).throw(RuntimeError("a bug")))
    answers = {
        "list": client.get("/v1/environments"),
        "versions": client.get("/"),
        "version": client.get("/v1/"),
        "to the dashboard": client.get("/", headers={"Accept": "text/html"},
                                       follow_redirects=False),
        "slash redirect": client.get("/environments/", follow_redirects=False),
        "unknown path": client.get("/no/such/path"),
        "unknown environment": client.delete("/environments/nope"),
        "bad body": client.post("/environments", json={"name": ""}),
        "wrong method": client.patch("/environments"),
        "crash": client.get(f"/environments/{env_id}"),
        "too large": client.post("/environments", content=b"{" + b" " * 4096 + b"}",
                                 headers={"Content-Type": "application/json"}),
        "cross-site": client.post("/environments", json={"name": "x"},
                                  headers={"Origin": "https://evil.example.net"}),
        "not JSON": client.post("/environments", content=b"name=x",
                                headers={"Content-Type": "text/plain"}),
        "unknown host": client.get("/environments", headers={"Host": "evil.example.net"}),
        "dashboard": client.get("/dashboard/"),
        "dashboard's asset": client.get("/dashboard/static/nothing.css"),
        "health": client.get("/healthcheck"),
        "health, HEAD": client.head("/healthcheck"),
    }
    statuses = {what: answer.status_code for what, answer in answers.items()}
    assert statuses == {"list": 200, "versions": 300, "version": 200, "to the dashboard": 302,
                        "slash redirect": 307, "unknown path": 404, "unknown environment": 404,
                        "bad body": 400, "wrong method": 405, "crash": 500, "too large": 413,
                        "cross-site": 403, "not JSON": 415, "unknown host": 400,
                        "dashboard": 200, "dashboard's asset": 404, "health": 200,
                        "health, HEAD": 204}
    ids = [request_id_of(answer) for answer in answers.values()]
    assert len(set(ids)) == len(ids)


def test_an_unparseable_request_is_answered_with_an_id_too(api):
    with serving(api.client.app) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(b"GET /environments HTTP/1.1\r\nHost: localhost\r\n"
                         b"X-Odd: a\x01b\r\n\r\n")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    assert head.startswith("http/1.1 400")
    found = re.findall(rf"^{HEADER}: (.*)$", head, re.M)
    assert len(found) == 1 and is_request_id(found[0].strip())


def test_the_api_s_lines_of_a_request_carry_its_id_and_caller(api, monkeypatch):
    monkeypatch.setattr(api.store.environments, "get",
                        lambda *args: (_ for _ in ()).throw(RuntimeError("a bug")))
    with captured_lines() as lines:
        answer = api.client.get("/environments/env-a", headers=api.as_tenant("t7", "u7"))
    assert answer.status_code == 500
    request_id = request_id_of(answer)
    logged = [line for line in lines() if "unexpected error on GET /environments/env-a" in line]
    assert len(logged) == 1
    # oslo.log's logging_context_format_string: [global id, id, user project - - -]
    assert f"[None {request_id} u7 t7 " in logged[0]


def test_a_well_formed_caller_s_id_is_kept_as_the_global_id_and_no_other(api, monkeypatch):
    monkeypatch.setattr(api.store.environments, "get",
                        lambda *args: (_ for _ in ()).throw(RuntimeError("a bug")))
    theirs = f"req-{uuid.uuid4()}"
    sent = {"well formed": theirs, "upper case": theirs.upper(),
            "made up": "req-1234 INJECTED admin admin", "not an id": "hello",
            "an id and more": theirs + "x"}
    with captured_lines() as lines:
        answers = {what: api.client.get(f"/environments/{what.replace(' ', '-')}",
                                        headers={"X-Openstack-Request-Id": value})
                   for what, value in sent.items()}
    for what, answer in answers.items():
        ours = request_id_of(answer)
        assert ours != sent[what]         # the answer names this API's own request
        line, = [line for line in lines() if f"/environments/{what.replace(' ', '-')}" in line]
        shown = theirs if what == "well formed" else "None"
        assert f"[{shown} {ours} " in line, what
    text = "\n".join(lines())
    assert "INJECTED" not in text and "hello" not in text and theirs.upper() not in text


def test_concurrent_requests_each_log_their_own_id(api, monkeypatch):
    monkeypatch.setattr(api.store.environments, "get",
                        lambda *args: (_ for _ in ()).throw(RuntimeError("a bug")))
    transport = httpx.ASGITransport(app=api.client.app, raise_app_exceptions=False)

    async def all_at_once() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await asyncio.gather(*(c.get(f"/environments/e{n}") for n in range(20)))

    with captured_lines() as lines:
        answers = asyncio.run(all_at_once())
    for number, answer in enumerate(answers):
        line, = [line for line in lines() if f"GET /environments/e{number}:" in line]
        assert f" {request_id_of(answer)} " in line


# -- an API and a conductor ---------------------------------------------------------

@pytest.fixture
def api_and_conductor(tmp_path):
    """``fornace api`` and a conductor on one in-memory broker of their own."""
    broker_url = f"memory://{uuid.uuid4().hex[:8]}"
    conf = build_conf("api")
    conf(["api"], project="fornace", default_config_files=[])
    conf.set_override("url", broker_url, group="broker")
    service = ApiService(conf, f"sqlite:///{tmp_path / 'e2e.sqlite'}")
    conductor = Conductor(ConductorSettings(broker_url=broker_url, data_dir=DATA,
                                            agents="simulator",
                                            engine=Settings(agent_timeout=60)),
                          lambda task: SimulatedCloud().executors()[0])
    try:
        assert service.start_consumers().ready.wait(10)
        conductor.start()
        assert conductor.wait_ready()
        yield service
    finally:
        conductor.shutdown()
        service.stop()


def test_a_deployment_s_lines_carry_its_request_s_id_on_the_api_and_the_conductor(
        api_and_conductor):
    theirs = f"req-{uuid.uuid4()}"
    tenant = {"X-Tenant-Id": "t9", "X-User-Id": "u9"}
    with captured_lines() as lines, serving(api_and_conductor.app, access_log=True) as url:
        with httpx.Client(base_url=url, headers=tenant) as client:
            env_id = client.post("/environments", json={"name": "traced"}).json()["id"]
            session = client.post(f"/environments/{env_id}/configure").json()["id"]
            client.post(f"/environments/{env_id}/services", json=SITE,
                        headers={"X-Configuration-Session": session}).raise_for_status()
            deploy = client.post(f"/environments/{env_id}/sessions/{session}/deploy",
                                 headers={"X-Openstack-Request-Id": theirs})
            assert deploy.status_code == 200
            ours = request_id_of(deploy)
            job = wait_for(lambda: (lambda jobs: jobs[0] if jobs and jobs[0]["state"] not in (
                "queued", "running") else None)(
                client.get(f"/environments/{env_id}/jobs").json()["jobs"]),
                "the deployment to end", timeout=120)
            assert job["state"] == "success"
            later = request_id_of(client.get(f"/environments/{env_id}"))
    text = lines()
    # the API's line of the request: uvicorn's access log, with the caller
    access = [line for line in text if f"/sessions/{session}/deploy HTTP/1.1" in line]
    assert len(access) == 1 and f"[{theirs} {ours} u9 t9 " in access[0]
    # the conductor's lines of the job it started: the same ids, on the tenant's project
    conducted = [line for line in text if "fornace.conductor" in line and job["id"] in line]
    assert any("started" in line for line in conducted)
    assert any("ended: success" in line for line in conducted)
    assert conducted and all(f"[{theirs} {ours} - t9 " in line for line in conducted)
    # and no other line of the run names that request
    assert [line for line in text if ours in line] == access + conducted
    assert not any(later in line for line in conducted)
