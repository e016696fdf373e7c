"""The stock command lines of python-muranoclient 2.8 against Fornace, run as
their users run them (subprocesses, no Keystone): the ``openstack
environment ...`` plugin (``--os-auth-type admin_token --os-token T
--os-endpoint URL --murano-url URL``) and the ``murano`` command
(``--os-no-client-auth --os-auth-token T --murano-url URL``), through create,
list, show, rename, session create, apps edit (a JSON patch with ids in
``"?"`` headers and ``===id1===`` placeholders), model show with ``--path``,
deploy, deployment list and delete; and create with ``--join-net-id`` /
``--join-subnet-id`` then ``model edit`` (a JSON patch of the model) and
deploy.  The API runs on a real port with a
conductor in this process (simulated stacks and agents, in-memory broker):
the deployments succeed."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Callable

import pytest

from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors.simulator import SimulatedCloud
from fornace.conductor.session import Settings
from serving import serving
from services import import_or_require
from waiting import wait_for

import_or_require("muranoclient.osc.plugin")
import_or_require("openstackclient.shell")

DATA = Path(__file__).resolve().parents[2] / "data"
BIN = Path(sys.executable).parent
SERVICE_ID = "5e41ce0f8b6d4c3fa8a6f1d3c2b1a090"
TOKEN = "cli-token"


@pytest.fixture(scope="module")
def fornace(tmp_path_factory):
    """The API's URL: the API on a real port, a conductor on simulated stacks
    and agents, one private in-memory broker."""
    root = tmp_path_factory.mktemp("muranoclient-cli")
    url = f"memory://{uuid.uuid4().hex[:8]}"
    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("url", url, group="broker")
    conf.set_override("state_dir", str(root / "state"), group="api")
    api = ApiService(conf, f"sqlite:///{root / 'cli.sqlite'}")
    assert api.start_consumers().ready.wait(10)
    daemon = Conductor(ConductorSettings(broker_url=url, data_dir=DATA, max_environments=2,
                                         agents="simulator", engine=Settings(agent_timeout=30)),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.start()
    assert daemon.wait_ready()
    try:
        with serving(api.app) as served:
            yield served
    finally:
        daemon.shutdown()
        api.stop()


def command(name: str) -> str:
    found = BIN / name
    if found.exists():
        return str(found)
    on_path = shutil.which(name)
    if on_path is None:
        pytest.skip(f"no {name} command (pip install python-openstackclient "
                    f"python-muranoclient)")
    return on_path


def run(argv: list[str], home: Path) -> str:
    """What the command printed; a failure names the command and its output."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={"HOME": str(home), "PATH": f"{BIN}:/usr/bin:/bin",
                               "LANG": "C.UTF-8"})
    assert done.returncode == 0, f"{' '.join(argv[1:])}: {done.stdout}{done.stderr}"
    return done.stdout


def openstack(url: str, home: Path, *args: str) -> str:
    return run([command("openstack"), "--os-auth-type", "admin_token", "--os-token", TOKEN,
                "--os-endpoint", url, "--murano-url", url, *args], home)


def murano(url: str, home: Path, *args: str) -> str:
    return run([command("murano"), "--os-no-client-auth", "--os-auth-token", TOKEN,
                "--murano-url", url, *args], home)


def json_in(output: str) -> object:
    """The JSON document ``murano`` printed after its log lines (it says on
    stdout that it made no Glance client: there is no Glance here)."""
    lines = output.splitlines()
    for start in range(len(lines)):
        try:
            return json.loads("\n".join(lines[start:]))
        except ValueError:
            continue
    raise AssertionError(f"no JSON in {output!r}")


def patch_file(home: Path) -> Path:
    """What ``environment apps edit`` takes: a JSON patch adding a web site whose
    id is in its ``"?"`` header and whose unit's is a placeholder."""
    patch = [{"op": "add", "path": "/-", "value": {
        "?": {"id": SERVICE_ID, "type": "linuxWebServer"},
        "name": "site", "unitNamingPattern": "web#", "osImage": {"name": "debian-12"},
        "units": [{"?": {"id": "===id1==="}}]}}]
    path = home / "patch.json"
    path.write_text(json.dumps(patch))
    return path


def status_of(show: str) -> str:
    return json.loads(show)["status"]


def osc_deployed(osc: Callable[..., str], env_id: str, session: str) -> dict:
    """``openstack environment deploy``, then ``show`` until the environment is
    ready: what it shows then."""
    osc("environment", "deploy", "--session-id", session, env_id, "-f", "json")
    return wait_for(lambda: (lambda shown: shown if shown["status"] == "ready" else None)(
        json.loads(osc("environment", "show", env_id, "-f", "json"))),
        "the environment deployed", timeout=120)


def osc_deleted(osc: Callable[..., str], env_id: str) -> None:
    """``openstack environment delete``, then ``list`` until it is gone."""
    osc("environment", "delete", env_id, "-f", "json")
    wait_for(lambda: env_id not in {e["ID"] for e in json.loads(
        osc("environment", "list", "-f", "json"))}, "the environment deleted", timeout=120)


def test_the_openstack_environment_commands_deploy_and_delete(fornace, tmp_path):
    url, home = fornace, tmp_path

    def osc(*args: str) -> str:
        return openstack(url, home, *args)
    [created] = json.loads(osc("environment", "create", "--region", "RegionOne", "osc-env",
                               "-f", "json"))
    env_id = created["Id"]
    assert created["Name"] == "osc-env" and created["Status"] == "ready"
    listed = json.loads(osc("environment", "list", "-f", "json"))
    assert {"osc-env"} <= {e["Name"] for e in listed}
    shown = json.loads(osc("environment", "show", env_id, "-f", "json"))
    assert shown["region"] == "RegionOne" and shown["services"] == "[]"
    renamed = json.loads(osc("environment", "rename", env_id, "osc-renamed", "-f", "json"))
    assert [e["Name"] for e in renamed] == ["osc-renamed"]

    session = json.loads(osc("environment", "session", "create", env_id, "-f", "json"))["id"]
    osc("environment", "apps", "edit", "--session-id", session, env_id, str(patch_file(home)))
    service = json.loads(osc("environment", "model", "show", env_id, "--session-id", session,
                             "--path", f"/services/{SERVICE_ID}", "-f", "json"))
    assert service["id"] == SERVICE_ID and service["?"]["id"] == SERVICE_ID
    unit_id = service["units"][0]["id"]
    assert len(unit_id) == 32 and "=" not in unit_id and service["units"][0]["?"]["id"] == unit_id
    header = json.loads(osc("environment", "model", "show", env_id, "--session-id", session,
                            "--path", f"/services/{SERVICE_ID}/?", "-f", "json"))
    assert header == {"id": SERVICE_ID, "type": "linuxWebServer"}
    whole = json.loads(osc("environment", "model", "show", env_id, "--session-id", session,
                           "-f", "json"))
    assert whole["region"] == "RegionOne" and whole["name"] == "osc-renamed"

    ready = osc_deployed(osc, env_id, session)
    [unit] = json.loads(ready["services"])[0]["units"]
    assert unit["state"]["hostname"] == "web1" and unit["state"]["siteDeployed"] is True
    [deployment] = json.loads(osc("deployment", "list", env_id, "-f", "json"))
    assert deployment["State"] == "success"

    osc_deleted(osc, env_id)


def test_the_murano_command_deploys_and_deletes(fornace, tmp_path):
    url, home = fornace, tmp_path

    def cli(*args: str) -> str:
        return murano(url, home, *args)
    created = cli("environment-create", "--region", "RegionOne", "cli-env")
    assert "cli-env" in created
    env_id = next(line.split("|")[1].strip() for line in created.splitlines()
                  if "cli-env" in line)
    assert env_id in cli("environment-list")
    assert "RegionOne" in cli("environment-show", env_id)
    assert "cli-renamed" in cli("environment-rename", env_id, "cli-renamed")
    session = next(line.split("|")[2].strip() for line in cli(
        "environment-session-create", env_id).splitlines() if "| id " in line)

    cli("environment-apps-edit", "--session-id", session, env_id, str(patch_file(home)))
    services = json_in(cli("environment-model-show", env_id, "--session-id", session,
                           "--path", "/services"))
    assert [s["id"] for s in services] == [SERVICE_ID]
    assert json_in(cli("environment-model-show", env_id, "--session-id", session,
                       "--path", "/region")) == "RegionOne"

    cli("environment-deploy", env_id, "--session-id", session)
    wait_for(lambda: "| ready" in cli("environment-show", env_id) or None,
             "the environment deployed", timeout=120)
    # 2.8's murano sends a null X-Configuration-Session without --session-id
    # (and fails itself): the deployed model through a new session
    session = next(line.split("|")[2].strip() for line in cli(
        "environment-session-create", env_id).splitlines() if "| id " in line)
    model = json_in(cli("environment-model-show", env_id, "--session-id", session, "--path",
                        f"/services/{SERVICE_ID}/units/0/state"))
    assert model["siteDeployed"] is True
    deployments = cli("deployment-list", env_id)
    assert "| success" in deployments

    cli("environment-delete", env_id)
    wait_for(lambda: env_id not in cli("environment-list"), "the environment deleted",
             timeout=120)


def test_the_clients_see_a_clear_error_for_a_bad_region(fornace, tmp_path):
    done = subprocess.run([command("openstack"), "--os-auth-type", "admin_token",
                           "--os-token", TOKEN, "--os-endpoint", fornace, "--murano-url",
                           fornace, "environment", "create", "--region", "x" * 300, "bad"],
                          capture_output=True, text=True, timeout=120,
                          env={"HOME": str(tmp_path), "PATH": f"{BIN}:/usr/bin:/bin"})
    assert done.returncode == 1
    assert "region: String should have at most 255 characters" in done.stderr


def model_patch_file(home: Path, service_id: str) -> Path:
    """What ``environment model edit`` takes: a JSON patch of the whole model,
    adding a web site (its unit's id a placeholder) and changing the subnet the
    environment joins."""
    patch = [{"op": "add", "path": "/services/-", "value": {
                 "?": {"id": service_id, "type": "linuxWebServer"},
                 "name": "site", "unitNamingPattern": "web#",
                 "osImage": {"name": "debian-12"}, "units": [{"?": {"id": "===id1==="}}]}},
             {"op": "add", "path": "/defaultNetworks/environment/internalSubnetworkName",
              "value": "subnet-2"}]
    path = home / "model-patch.json"
    path.write_text(json.dumps(patch))
    return path


def test_openstack_model_edit_and_join_net_deploy(fornace, tmp_path):
    """``environment create --join-net-id``, then the services added by ``model
    edit`` (a JSON patch of the model), deployed."""
    url, home = fornace, tmp_path
    service_id = uuid.uuid4().hex

    def osc(*args: str) -> str:
        return openstack(url, home, *args)
    [created] = json.loads(osc("environment", "create", "--join-net-id", "net-1",
                               "osc-joined", "-f", "json"))
    env_id = created["Id"]
    session = json.loads(osc("environment", "session", "create", env_id, "-f", "json"))["id"]
    networks = json.loads(osc("environment", "model", "show", env_id, "--session-id", session,
                              "--path", "/defaultNetworks", "-f", "json"))
    assert networks["flat"] is None and networks["environment"]["internalNetworkName"] == "net-1"
    header = networks["environment"]["?"]
    assert header["type"] == "io.murano.resources.ExistingNeutronNetwork"

    model = json.loads(osc("environment", "model", "edit", "--session-id", session, env_id,
                           str(model_patch_file(home, service_id)), "-f", "json"))
    assert [s["id"] for s in model["services"]] == [service_id]
    assert model["defaultNetworks"]["environment"]["internalSubnetworkName"] == "subnet-2"
    assert model["defaultNetworks"]["environment"]["?"] == header

    ready = osc_deployed(osc, env_id, session)
    [unit] = json.loads(ready["services"])[0]["units"]
    assert unit["state"]["siteDeployed"] is True and len(unit["id"]) == 32
    [deployment] = json.loads(osc("deployment", "list", env_id, "-f", "json"))
    assert deployment["State"] == "success"
    # the networks stay in the deployed model
    session = json.loads(osc("environment", "session", "create", env_id, "-f", "json"))["id"]
    networks = json.loads(osc("environment", "model", "show", env_id, "--session-id", session,
                              "--path", "/defaultNetworks/environment", "-f", "json"))
    assert networks["internalSubnetworkName"] == "subnet-2"

    osc_deleted(osc, env_id)


def test_murano_model_edit_and_join_subnet_deploy(fornace, tmp_path):
    url, home = fornace, tmp_path
    service_id = uuid.uuid4().hex

    def cli(*args: str) -> str:
        return murano(url, home, *args)
    created = cli("environment-create", "--join-net-id", "net-1", "--join-subnet-id",
                  "subnet-1", "cli-joined")
    env_id = next(line.split("|")[1].strip() for line in created.splitlines()
                  if "cli-joined" in line)
    session = next(line.split("|")[2].strip() for line in cli(
        "environment-session-create", env_id).splitlines() if "| id " in line)
    assert json_in(cli("environment-model-show", env_id, "--session-id", session, "--path",
                       "/defaultNetworks/environment/internalSubnetworkName")) == "subnet-1"

    model = json_in(cli("environment-model-edit", "--session-id", session, env_id,
                        str(model_patch_file(home, service_id))))
    assert [s["id"] for s in model["services"]] == [service_id]
    unit_id = model["services"][0]["units"][0]["id"]
    assert len(unit_id) == 32 and "=" not in unit_id

    cli("environment-deploy", env_id, "--session-id", session)
    wait_for(lambda: "| ready" in cli("environment-show", env_id) or None,
             "the environment deployed", timeout=120)
    assert "| success" in cli("deployment-list", env_id)

    cli("environment-delete", env_id)
    wait_for(lambda: env_id not in cli("environment-list"), "the environment deleted",
             timeout=120)


def test_the_clients_see_why_a_model_edit_is_refused(fornace, tmp_path):
    url, home = fornace, tmp_path
    [created] = json.loads(openstack(url, home, "environment", "create", "refused", "-f",
                                     "json"))
    session = json.loads(openstack(url, home, "environment", "session", "create",
                                   created["Id"], "-f", "json"))["id"]
    patch = home / "region.json"
    patch.write_text(json.dumps([{"op": "replace", "path": "/region", "value": "R2"}]))
    done = subprocess.run([command("openstack"), "--os-auth-type", "admin_token",
                           "--os-token", TOKEN, "--os-endpoint", url, "--murano-url", url,
                           "environment", "model", "edit", "--session-id", session,
                           created["Id"], str(patch)],
                          capture_output=True, text=True, timeout=120,
                          env={"HOME": str(home), "PATH": f"{BIN}:/usr/bin:/bin"})
    assert done.returncode == 1
    assert "/region cannot be changed: an environment's region is given when it is " \
           "created" in done.stderr
