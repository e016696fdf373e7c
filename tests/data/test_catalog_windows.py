"""The Windows catalog: activeDirectory, IIS services, SQL Server, SQL clusters.

Runs the shipped workflows (``data/workflows``) on the simulated cloud with
the Windows example (``data/examples/windows-domain.json``) and checks what
a deployment issues, in which order, what it records in the model, how it
fails and how it handles a later deployment; then checks the catalog
statically: ``fornace workflow check``, the agent templates against the
PowerShell functions they call (no PowerShell needed, see ``pscheck``), and
the workflows' mappings against the templates' placeholders.
"""
from __future__ import annotations

import base64
import copy
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import pscheck
from fornace.api.specs import validate_create
from fornace.common.catalog import load_catalog, with_type_views
from fornace.conductor.dsl.trace import RecordingTrace
from fornace.conductor.executors.simulator import Fault, SimulatedCloud
from fornace.conductor.session import Outcome, Session, Settings
from fornace.conductor.templates import TemplateStore
from fornace.conductor.workflowcheck import check
from fornace.conductor.workflowfiles import load_workflows

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
EXAMPLE = DATA / "examples" / "windows-domain.json"
SCRIPTS = DATA / "templates" / "agent" / "scripts"
AGENT_TEMPLATES = DATA / "templates" / "agent" / "Windows"
WINDOWS_WORKFLOWS = ("Windows.xml", "ActiveDirectory.xml", "DomainMembership.xml",
                     "WebServer.xml", "SqlServer.xml", "SqlCluster.xml")
HEAT_TEMPLATES = ("WindowsInstance", "FarmLoadBalancer", "FarmMember")

DNS_IP = "10.0.0.10"
OUTPUTS = {"lb-farm0001": "10.0.0.100", "dc1": "10.0.0.10", "dc2": "10.0.0.11",
           "shop1": "10.0.0.21", "shop2": "10.0.0.22", "portal1": "10.0.0.31",
           "sql1": "10.0.0.41"}
AD_PASSWORD = "Dom@in-Adm1n-2024"

PHASES = {
    "WindowsInstance": "instance", "FarmLoadBalancer": "instance",
    "Windows/SetDomainAdminPassword": "password", "Windows/SetLocalAdminPassword": "password",
    "Windows/CreatePrimaryDC": "primary DC", "Windows/GetDnsIp": "DNS IP",
    "Windows/JoinDomain": "domain join", "Windows/CreateSecondaryDC": "secondary DC",
    "Windows/InstallIIS": "IIS", "Windows/DeployWebApp": "app deployment",
    "FarmMember": "load-balancer registration", "Windows/InstallSqlServer": "SQL Server install",
    "Windows/LeaveDomain": "domain leave",
}
MEMBERS = ("shop0001", "shop0002", "portal01", "sqlu0001")


def example() -> dict[str, Any]:
    return json.loads(EXAMPLE.read_text(encoding="utf-8"))


def service(model: dict[str, Any], service_id: str) -> dict[str, Any]:
    return next(s for s in model["services"] if s["id"] == service_id)


@dataclass
class Deployment:
    outcome: Outcome
    trace: RecordingTrace
    stacks: Any
    agents: Any

    @property
    def model(self) -> dict[str, Any]:
        return self.outcome.model

    def units(self) -> dict[str, dict[str, Any]]:
        return {u["id"]: u for s in self.model["services"] for u in s["units"]}

    def target(self, action: dict[str, Any]) -> str:
        """The unit an action is for (Heat instance/member actions: by hostname)."""
        if action["unit"]:
            return action["unit"]
        hostname = (action["mappings"] or {}).get("instanceName")
        if hostname:
            return next(uid for uid, u in self.units().items()
                        if u["state"]["hostname"] == hostname)
        return "(service)"

    def actions(self) -> list[tuple[int, str, str]]:
        """(round, template, unit id) of every action, in the order issued."""
        return [(r["round"], a["template"], self.target(a))
                for r in self.trace.rounds for a in r["actions"]]

    def phases_by_round(self) -> list[set[str]]:
        found: dict[int, set[str]] = {}
        for number, template, _ in self.actions():
            found.setdefault(number, set()).add(PHASES[template])
        return [found[n] for n in sorted(found)]

    def sequence(self, unit_id: str) -> list[str]:
        return [t for _, t, u in self.actions() if u == unit_id]

    def reports(self, level: str | None = None, entity: str | None = None,
                id: str | None = None) -> list[str]:
        return [r["text"] for r in self.outcome.reports
                if (level is None or r["level"] == level)
                and (entity is None or r["entity"] == entity)
                and (id is None or r["id"] == id)]

    def plans(self, template: str) -> dict[str, dict[str, Any]]:
        """unit id -> the last plan of ``template`` sent to it."""
        return {p.unit: p.plan for p in self.agents.plans if p.template == template}


def deploy(model: dict[str, Any], *, fail: tuple[str, ...] = (),
           outputs: dict[str, Any] | None = None) -> Deployment:
    cloud = SimulatedCloud(stack_outputs=dict(OUTPUTS if outputs is None else outputs),
                           command_results={"Windows/GetDnsIp": DNS_IP},
                           failures=[Fault.parse(f) for f in fail])
    stacks, agents = cloud.executors()
    trace = RecordingTrace()
    with_type_views(model, load_catalog(DATA / "types.json"))   # as run_job does
    outcome = Session(model, load_workflows(DATA / "workflows"), TemplateStore(DATA),
                      stacks, agents, Settings(), trace=trace).run()
    return Deployment(outcome, trace, stacks, agents)


@pytest.fixture(scope="module")
def full() -> Deployment:
    return deploy(example())


# -- the example deployment ----------------------------------------------------

def test_example_is_what_the_api_accepts():
    model = example()
    for item in model["services"]:
        validate_create(item)
        for index, unit in enumerate(item["units"]):
            assert unit["name"] == f"{item['name']}_instance_{index}"
    types = {s["type"] for s in model["services"]}
    assert types == {"activeDirectory", "aspNetAppFarm", "webServer", "msSqlServer"}
    directory = service(model, "ad000001")
    assert [u["isMaster"] for u in directory["units"]] == [True, False]
    assert all(s.get("domain") == directory["domain"] for s in model["services"])


def test_example_issues_the_steps_in_order(full):
    assert full.outcome.status == "success"
    assert full.reports("error") == [] and full.reports("warning") == []
    assert full.phases_by_round() == [
        {"instance"},
        {"password"},
        {"primary DC"},
        {"DNS IP"},
        {"domain join"},
        {"secondary DC", "IIS", "SQL Server install"},
        {"app deployment"},
        {"load-balancer registration"},
    ]
    actions = full.actions()
    # one instance per unit and the farm's load balancer, all in the first round
    assert sorted(u for n, t, u in actions if t == "WindowsInstance") == sorted(full.units())
    assert [(n, u) for n, t, u in actions if t == "FarmLoadBalancer"] == [(1, "(service)")]
    # every member unit (and the secondary DC) joins once the DNS address is known
    dns_round = next(n for n, t, _ in actions if t == "Windows/GetDnsIp")
    joins = [(n, u) for n, t, u in actions if t == "Windows/JoinDomain"]
    assert sorted(u for _, u in joins) == sorted(("addc0002",) + MEMBERS)
    assert {n for n, _ in joins} == {dns_round + 1}
    # each unit's own steps, in order
    assert full.sequence("addc0001") == ["WindowsInstance", "Windows/SetDomainAdminPassword",
                                         "Windows/CreatePrimaryDC", "Windows/GetDnsIp"]
    assert full.sequence("addc0002") == ["WindowsInstance", "Windows/SetLocalAdminPassword",
                                         "Windows/JoinDomain", "Windows/CreateSecondaryDC"]
    for unit in ("shop0001", "shop0002"):
        assert full.sequence(unit) == ["WindowsInstance", "Windows/SetLocalAdminPassword",
                                       "Windows/JoinDomain", "Windows/InstallIIS",
                                       "Windows/DeployWebApp", "FarmMember"]
    assert full.sequence("portal01") == ["WindowsInstance", "Windows/SetLocalAdminPassword",
                                         "Windows/JoinDomain", "Windows/InstallIIS"]
    assert full.sequence("sqlu0001") == ["WindowsInstance", "Windows/SetLocalAdminPassword",
                                         "Windows/JoinDomain", "Windows/InstallSqlServer"]


def test_example_final_state(full):
    model = full.model
    units = full.units()
    base = {"adminPasswordSet": True, "domain": "acme.local"}
    assert units["addc0001"]["state"] == {
        "hostname": "dc1", "address": "10.0.0.10", "domainAdminPasswordSet": True,
        "primaryDc": True, "domain": "acme.local"}
    assert units["addc0002"]["state"] == {
        "hostname": "dc2", "address": "10.0.0.11", **base, "secondaryDc": True}
    for unit, hostname, address in (("shop0001", "shop1", "10.0.0.21"),
                                    ("shop0002", "shop2", "10.0.0.22")):
        assert units[unit]["state"] == {
            "hostname": hostname, "address": address, **base, "iisInstalled": True,
            "appDeployed": True, "appRepository": "https://git.example.org/acme/shop.git",
            "lbRegistered": True}
    assert units["portal01"]["state"] == {
        "hostname": "portal1", "address": "10.0.0.31", **base, "iisInstalled": True}
    assert units["sqlu0001"]["state"] == {
        "hostname": "sql1", "address": "10.0.0.41", **base, "sqlInstalled": True}
    assert service(model, "ad000001")["state"] == {"dnsIp": DNS_IP}
    farm = service(model, "farm0001")
    assert farm["state"] == {"address": "10.0.0.100"}
    assert farm["uri"] == "http://10.0.0.100:8080/"
    assert "state" not in service(model, "web00001") and "state" not in service(model, "sql00001")
    assert all("temp" not in s and all("temp" not in u for u in s["units"])
               for s in model["services"])
    assert full.reports("info", "service") == [
        "Creating the load balancer of farm shop on port 8080",
        "Load balancer of farm shop created: address 10.0.0.100, port 8080",
        "Farm shop answers at http://10.0.0.100:8080/",
        "Domain acme.local is ready (service acme, DNS 10.0.0.10)",
        "Service db is ready",
        "Service portal is ready",
        "Farm shop is ready: http://10.0.0.100:8080/",
    ]


def test_every_step_is_reported_per_unit_by_hostname(full):
    units = full.units()
    for unit_id, unit in units.items():
        texts = full.reports(entity="unit", id=unit_id)
        assert texts and all(unit["state"]["hostname"] in text for text in texts), texts
        # a report before and one after each of the unit's commands and stack updates
        assert len(texts) >= 2 * len(full.sequence(unit_id))
    dc1 = full.reports(entity="unit", id="addc0001")
    assert "Creating the primary domain controller of acme.local on dc1" in dc1
    assert "Primary domain controller of acme.local created on dc1" in dc1
    assert "Domain acme.local answers DNS at 10.0.0.10 (domain controller dc1)" in dc1
    assert "Unit sql1 joined domain acme.local" in full.reports(id="sqlu0001")


def test_plans_and_stack_get_the_model_values(full):
    placeholder = re.compile(r"^\$[A-Za-z_]\w*$")

    def strings(value: Any):
        if isinstance(value, dict):
            for key, item in value.items():
                yield key
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)
        elif isinstance(value, str):
            yield value

    for request in full.agents.plans:
        assert "FormatVersion" not in request.plan  # 0.2 PowerShell plans
        assert not [s for s in strings(request.plan["Commands"]) if placeholder.match(s)]
    stack = full.stacks.stacks["ewin00001"]
    assert not [s for s in strings(stack) if placeholder.match(s)]

    join = full.plans("Windows/JoinDomain")["shop0001"]["Commands"][0]
    assert join == {"Name": "Join-FornaceDomain", "Arguments": {
        "DomainName": "acme.local", "UserName": "Administrator", "Password": AD_PASSWORD,
        "DnsServer": DNS_IP, "Hostname": "shop1"}}
    primary = full.plans("Windows/CreatePrimaryDC")["addc0001"]["Commands"][0]["Arguments"]
    assert primary == {"DomainName": "acme.local", "SafeModePassword": "Rec0very-Primary!"}
    secondary = full.plans("Windows/CreateSecondaryDC")["addc0002"]["Commands"][0]["Arguments"]
    assert secondary["SafeModePassword"] == "Rec0very-Second!"
    assert full.plans("Windows/SetDomainAdminPassword")["addc0001"]["Commands"][0][
        "Arguments"] == {"Password": AD_PASSWORD}
    sql = full.plans("Windows/InstallSqlServer")["sqlu0001"]
    assert sql["Commands"][0]["Arguments"] == {"MixedModeAuth": True,
                                               "SaPassword": "Sa-Passw0rd-Db!"}
    assert sql["RebootOnCompletion"] == 1
    assert sql["ScriptNames"] == ["WindowsCore.ps1", "SqlServer.ps1"]
    app = full.plans("Windows/DeployWebApp")["shop0002"]["Commands"][0]["Arguments"]
    assert app == {"Repository": "https://git.example.org/acme/shop.git", "SiteName": "shop"}

    resources = stack["Resources"]
    servers = {name for name, r in resources.items() if r["Type"] == "OS::Nova::Server"}
    assert servers == {"dc1", "dc2", "shop1", "shop2", "portal1", "sql1"}
    dc1 = resources["dc1"]["Properties"]
    assert dc1["image"] == "ws-2019-std" and dc1["flavor"] == "m1.medium"
    assert "Rename-Computer -NewName 'dc1'" in dc1["user_data"]  # init.ps1
    config = re.search(r"FromBase64String\('([^']+)'\)", dc1["user_data"]).group(1)
    assert "input_queue = ewin00001-ad000001-addc0001" in base64.b64decode(config).decode()
    assert resources["lb-farm0001-listener"]["Properties"]["protocol_port"] == 8080
    members = {name: r["Properties"] for name, r in resources.items()
               if r["Type"] == "OS::Octavia::PoolMember"}
    assert members == {f"lb-farm0001-shop{n}": {
        "pool": {"Ref": "lb-farm0001-pool"}, "protocol_port": 80,
        "address": {"Fn::GetAtt": [f"shop{n}", "first_address"]},
        "subnet": {"Ref": "FarmSubnet"}} for n in (1, 2)}
    assert set(stack["Outputs"]) == {"dc1", "dc2", "shop1", "shop2", "portal1", "sql1",
                                     "lb-farm0001"}


# -- failures ------------------------------------------------------------------

def test_primary_dc_failure_stops_everything_that_needs_the_domain():
    run = deploy(example(), fail=("Windows/CreatePrimaryDC",))
    errors = run.reports("error", "unit", "addc0001")
    assert errors == ["Unable to create the primary domain controller of acme.local on dc1: "
                      "simulated failure of Windows/CreatePrimaryDC on unit addc0001"]
    failed_round = next(n for n, t, _ in run.actions() if t == "Windows/CreatePrimaryDC")
    assert [a for a in run.actions() if a[0] > failed_round] == []
    assert run.reports("error", "service", "ad000001") == [
        "Domain acme.local is not available: its primary domain controller dc1 failed"]
    units = run.units()
    assert units["addc0001"]["state"]["failed"] == "primaryDomainController"
    assert service(run.model, "ad000001")["state"] == {
        "failed": "primary domain controller dc1 failed"}
    for unit_id in ("addc0002",) + MEMBERS:
        state = units[unit_id]["state"]
        assert state["failed"] == "domainUnavailable" and "domain" not in state
        [error] = run.reports("error", "unit", unit_id)
        assert state["hostname"] in error and "primary domain controller dc1 failed" in error
    assert not any("ready" in text for text in run.reports(entity="service"))


def test_primary_dc_failure_leaves_units_outside_the_domain_alone():
    model = example()
    model["services"].append({
        "id": "web00002", "name": "kiosk", "type": "webServer", "unitNamingPattern": "kiosk#",
        "osImage": "ws-2019-std", "units": [{"id": "kiosk001", "name": "kiosk_instance_0"}]})
    run = deploy(model, fail=("Windows/CreatePrimaryDC",))
    failed_round = next(n for n, t, _ in run.actions() if t == "Windows/CreatePrimaryDC")
    later = [(t, u) for n, t, u in run.actions() if n > failed_round]
    assert all(u == "kiosk001" for _, u in later)
    assert run.sequence("kiosk001") == ["WindowsInstance", "Windows/InstallIIS"]
    assert run.units()["kiosk001"]["state"] == {"hostname": "kiosk1", "address": None,
                                                "iisInstalled": True}
    assert "Service kiosk is ready" in run.reports(entity="service")
    assert run.units()["shop0001"]["state"]["failed"] == "domainUnavailable"


def test_a_failed_step_fails_its_unit_only_and_the_next_deployment_retries_it():
    first = deploy(example(), fail=("Windows/InstallIIS:portal1",))
    portal = first.units()["portal01"]["state"]
    assert portal["failed"] == "installIIS" and "iisInstalled" not in portal
    assert first.reports("error", "unit", "portal01") == [
        "Unable to install IIS on portal1: simulated failure of Windows/InstallIIS on "
        "unit portal01"]
    assert "Service portal is ready" not in first.reports()
    assert first.units()["shop0001"]["state"]["lbRegistered"] is True

    second = deploy(copy.deepcopy(first.model))
    commands = [(t, u) for _, t, u in second.actions() if t.startswith("Windows/")]
    assert commands == [("Windows/InstallIIS", "portal01")]
    assert ("Unit portal1 failed in an earlier deployment (step installIIS); trying again"
            in second.reports("info", "unit", "portal01"))
    state = second.units()["portal01"]["state"]
    assert state["failed"] is None and state["iisInstalled"] is True
    assert "Service portal is ready" in second.reports()


def test_a_domain_without_its_directory_service_fails_the_unit():
    model = example()
    web = service(model, "web00001")
    web["domain"] = "other.local"
    run = deploy(model)
    assert run.sequence("portal01") == ["WindowsInstance", "Windows/SetLocalAdminPassword"]
    assert run.reports("error", "unit", "portal01") == [
        "Unit portal1 cannot join domain other.local: no activeDirectory service of that "
        "domain in this environment"]
    assert run.units()["portal01"]["state"]["failed"] == "domainUnavailable"
    assert run.units()["shop0001"]["state"]["lbRegistered"] is True


def test_units_without_domain_or_password_go_straight_to_their_role():
    model = {"id": "solo0001", "name": "solo", "services": [{
        "id": "app00001", "name": "intranet", "type": "aspNetApp",
        "repository": "https://git.example.org/acme/intranet.git", "osImage": "ws-2019-std",
        "units": [{"id": "intra001", "name": "intranet_instance_0"}]}]}
    validate_create(copy.deepcopy(model["services"][0]))
    run = deploy(model)
    assert run.actions() == [(1, "WindowsInstance", "intra001"),
                             (2, "Windows/InstallIIS", "intra001"),
                             (3, "Windows/DeployWebApp", "intra001")]
    hostname = run.units()["intra001"]["state"]["hostname"]
    assert run.stacks.stacks["esolo0001"]["Resources"][hostname]["Properties"]["image"] == \
        "ws-2019-std"
    assert run.reports(entity="service") == ["Service intranet is ready"]


# -- later deployments ---------------------------------------------------------

def test_a_second_deployment_sends_no_commands(full):
    again = deploy(copy.deepcopy(full.model))
    assert [t for _, t, _ in again.actions() if t.startswith("Windows/")] == []
    assert again.phases_by_round() == [{"instance"}, {"load-balancer registration"}]
    assert again.model == full.model
    assert "Farm shop is ready: http://10.0.0.100:8080/" in again.reports()


def test_units_leave_a_domain_removed_from_their_service(full):
    model = copy.deepcopy(full.model)
    del service(model, "web00001")["domain"]
    run = deploy(model)
    commands = [(n, t, u) for n, t, u in run.actions() if t.startswith("Windows/")]
    assert commands == [(2, "Windows/LeaveDomain", "portal01")]
    leave = run.plans("Windows/LeaveDomain")["portal01"]
    assert leave["Commands"] == [{"Name": "Remove-FornaceDomainMembership", "Arguments": {
        "DomainName": "acme.local", "UserName": "Administrator", "Password": AD_PASSWORD}}]
    assert leave["RebootOnCompletion"] == 1
    assert run.units()["portal01"]["state"]["domain"] is None
    assert run.units()["shop0001"]["state"]["domain"] == "acme.local"
    assert run.reports("info", "unit", "portal01")[-1] == "Unit portal1 left domain acme.local"
    assert "Service portal is ready" in run.reports()

    # removed from the environment as well: the units leave without credentials
    model = copy.deepcopy(full.model)
    model["services"] = [s for s in model["services"] if s["type"] != "activeDirectory"]
    for item in model["services"]:
        item.pop("domain", None)
    run = deploy(model)
    leaves = run.plans("Windows/LeaveDomain")
    assert sorted(leaves) == sorted(MEMBERS)
    assert {p["Commands"][0]["Arguments"]["Password"] for p in leaves.values()} == {""}
    assert all(u["state"]["domain"] is None for u in run.units().values())


def test_a_service_added_later_joins_the_existing_domain(full):
    model = copy.deepcopy(full.model)
    model["services"].append({
        "id": "web00002", "name": "wiki", "type": "webServer", "domain": "acme.local",
        "adminPassword": "L0cal-Adm1n-Wiki", "osImage": "ws-2019-std",
        "unitNamingPattern": "wiki#", "units": [{"id": "wiki0001", "name": "wiki_instance_0"}]})
    run = deploy(model)
    commands = [(n, t, u) for n, t, u in run.actions() if t.startswith("Windows/")]
    assert commands == [(2, "Windows/SetLocalAdminPassword", "wiki0001"),
                        (3, "Windows/JoinDomain", "wiki0001"),
                        (4, "Windows/InstallIIS", "wiki0001")]
    assert run.units()["wiki0001"]["state"]["domain"] == "acme.local"
    assert "Service wiki is ready" in run.reports()


def test_a_changed_domain_is_left_then_the_new_one_joined(full):
    model = copy.deepcopy(full.model)
    other = copy.deepcopy(service(model, "ad000001"))
    other.update(id="ad000002", name="globex", domain="globex.local",
                 adminPassword="Gl0bex-Adm1n!", unitNamingPattern="gdc#")
    other.pop("state", None)
    other["units"] = [{"id": "gdc00001", "name": "globex_instance_0", "isMaster": True,
                       "recoveryPassword": "Rec0very-Globex!"}]
    model["services"].append(other)
    service(model, "sql00001")["domain"] = "globex.local"
    run = deploy(model)
    assert run.sequence("sqlu0001") == ["WindowsInstance", "Windows/LeaveDomain",
                                        "Windows/JoinDomain"]
    join = run.plans("Windows/JoinDomain")["sqlu0001"]["Commands"][0]["Arguments"]
    assert (join["DomainName"], join["Password"]) == ("globex.local", "Gl0bex-Adm1n!")
    assert run.units()["sqlu0001"]["state"]["domain"] == "globex.local"


# -- SQL Server cluster --------------------------------------------------------

def cluster_model() -> dict[str, Any]:
    model = example()
    model["services"] = [service(model, "ad000001"), {
        "id": "clu00001", "name": "orders", "type": "msSqlClusterServer",
        "domain": "acme.local", "adminPassword": "L0cal-Adm1n-Sql",
        "domainAdminUserName": "Administrator", "domainAdminPassword": AD_PASSWORD,
        "clusterName": "orders-clu", "clusterIP": "10.0.0.60", "agGroupName": "orders-ag",
        "agListenerName": "orders-db", "agListenerIP": "10.0.0.61",
        "sqlServiceUserName": "svc-sql", "sqlServicePassword": "Svc-Passw0rd!",
        "mixedModeAuth": True, "saPassword": "Sa-Cluster-Passw0rd!",
        "databases": ["orders", "billing"], "unitNamingPattern": "sqln#",
        "osImage": {"name": "ws-2019-sql2019"},
        "units": [{"id": "node0001", "name": "orders_instance_0", "isMaster": True, "isSync": True},
                  {"id": "node0002", "name": "orders_instance_1", "isMaster": False, "isSync": True},
                  {"id": "node0003", "name": "orders_instance_2", "isMaster": False}]}]
    return model


def test_sql_cluster_with_availability_group():
    model = cluster_model()
    validate_create(copy.deepcopy(model["services"][1]))
    run = deploy(model)
    assert run.outcome.status == "success" and run.reports("error") == []
    nodes = ("node0001", "node0002", "node0003")
    by_round = [(n, t) for n, t, u in run.actions() if u in nodes and t.startswith("Windows/")]
    rounds: dict[str, set[int]] = {}
    for number, template in by_round:
        rounds.setdefault(template, set()).add(number)
    order = ["Windows/SetLocalAdminPassword", "Windows/JoinDomain",
             "Windows/InstallClusterPrerequisites", "Windows/InstallSqlServerForAlwaysOn",
             "Windows/CreateCluster", "Windows/EnableAlwaysOn",
             "Windows/CreateAvailabilityGroup", "Windows/JoinAvailabilityGroup"]
    assert list(rounds) == order
    assert all(len(r) == 1 for r in rounds.values())  # every step in one round for all nodes
    assert [min(rounds[t]) for t in order] == sorted(min(rounds[t]) for t in order)
    assert [u for _, t, u in run.actions() if t == "Windows/CreateCluster"] == ["node0001"]
    assert [u for _, t, u in run.actions() if t == "Windows/JoinAvailabilityGroup"] == [
        "node0002", "node0003"]

    cluster = run.plans("Windows/CreateCluster")["node0001"]["Commands"][0]["Arguments"]
    assert cluster == {"ClusterName": "orders-clu", "StaticAddress": "10.0.0.60",
                       "Nodes": ["sqln1", "sqln2", "sqln3"], "DomainName": "acme.local",
                       "UserName": "Administrator", "Password": AD_PASSWORD}
    group = run.plans("Windows/CreateAvailabilityGroup")["node0001"]["Commands"][0]["Arguments"]
    assert group == {"GroupName": "orders-ag", "Replicas": ["sqln1", "sqln2", "sqln3"],
                     "SyncReplicas": ["sqln1", "sqln2"], "Databases": ["orders", "billing"],
                     "ListenerName": "orders-db", "ListenerAddress": "10.0.0.61",
                     "DomainName": "acme.local"}
    install = run.plans("Windows/InstallSqlServerForAlwaysOn")["node0003"]["Commands"]
    assert [c["Name"] for c in install] == ["New-FornaceDomainUser", "Install-FornaceSqlServer"]
    assert install[1]["Arguments"] == {
        "MixedModeAuth": True, "SaPassword": "Sa-Cluster-Passw0rd!", "DomainName": "acme.local",
        "ServiceUserName": "svc-sql", "ServicePassword": "Svc-Passw0rd!"}

    units = run.units()
    common = {"adminPasswordSet": True, "domain": "acme.local", "clusterPrerequisites": True,
              "sqlInstalled": True, "alwaysOnEnabled": True}
    assert units["node0001"]["state"] == {"hostname": "sqln1", "address": None, **common,
                                          "agReplica": "primary"}
    for unit, hostname in (("node0002", "sqln2"), ("node0003", "sqln3")):
        assert units[unit]["state"] == {"hostname": hostname, "address": None, **common,
                                        "agReplica": "secondary"}
    assert service(run.model, "clu00001")["state"] == {"clusterCreated": True, "agCreated": True}
    assert run.reports(entity="service", id="clu00001") == [
        "SQL Server cluster orders is ready: availability group orders-ag, listener "
        "orders-db (10.0.0.61)"]


def test_a_failed_cluster_node_fails_the_cluster():
    run = deploy(cluster_model(), fail=("Windows/InstallSqlServerForAlwaysOn:sqln2",))
    assert not [t for _, t, _ in run.actions() if t in (
        "Windows/CreateCluster", "Windows/EnableAlwaysOn", "Windows/CreateAvailabilityGroup")]
    assert run.reports("error", "service", "clu00001") == [
        "SQL Server cluster orders-clu cannot be completed: unit sqln2 failed"]
    assert service(run.model, "clu00001")["state"]["failed"] == "unit sqln2 failed"


# -- Linux and Windows side by side --------------------------------------------

def test_windows_rules_leave_linux_services_alone():
    model = example()
    linux = json.loads((DATA / "examples" / "linux-web.json").read_text())
    model["services"] += linux["services"]
    run = deploy(model)
    linux_units = {u["id"] for s in linux["services"] for u in s["units"]}
    for _, template, unit in run.actions():
        is_windows = template in HEAT_TEMPLATES or template.startswith("Windows/")
        assert is_windows != (unit in linux_units), (template, unit)
    alone = deploy(json.loads((DATA / "examples" / "linux-web.json").read_text()))
    assert [(t, u) for _, t, u in run.actions() if u in linux_units] == [
        (t, u) for _, t, u in alone.actions()]


# -- static checks of the catalog ----------------------------------------------

def test_fornace_workflow_check_is_clean():
    assert check([DATA / "workflows"]) == []


def windows_templates() -> dict[str, dict[str, Any]]:
    return {f"Windows/{p.stem}": json.loads(p.read_text())
            for p in sorted(AGENT_TEMPLATES.glob("*.template"))}


def script_functions() -> dict[str, dict[str, pscheck.Function]]:
    return {p.name: pscheck.functions(p.read_text(encoding="utf-8"))
            for p in sorted(SCRIPTS.glob("*.ps1"))}


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.ps1")))
def test_powershell_scripts_are_well_formed(script):
    text = (SCRIPTS / script).read_text(encoding="utf-8")
    assert pscheck.scan(text).problems == []
    assert "\t" not in text and text.endswith("\n")


def test_powershell_scripts_parse_with_a_powershell_grammar():
    import tree_sitter
    import tree_sitter_powershell as grammar
    parser = tree_sitter.Parser(tree_sitter.Language(grammar.language()))

    def broken(node):
        if node.type == "ERROR" or node.is_missing:
            yield node.start_point
        for child in node.children:
            yield from broken(child)

    assert list(broken(parser.parse(b"function A {\n  if ($x -eq { }\n").root_node))
    for path in sorted(SCRIPTS.glob("*.ps1")):
        tree = parser.parse(path.read_bytes())
        assert list(broken(tree.root_node)) == [], path.name


def test_pscheck_finds_what_powershell_would_refuse():
    problems = pscheck.scan('function A {\n  param([String] $x\n  "a $x: b"\n}\n').problems
    assert problems == ['line 3: "$x:" is not a valid variable reference in a string '
                        '(write ${x}:)', "line 4: } does not close the ( opened on line 2",
                        "line 1: { never closed"]
    assert pscheck.scan("$a = @'\n  x\n '@\n").problems == [
        "line 1: here-string @' never closed (its end '@ must start a line)"]
    assert pscheck.scan("$a = 'it''s' + \"`\"q`\" $env:TEMP ${x}: $($b.Count)\"\n").problems == []
    assert pscheck.scan("if ($a) { $b = ($c]\n").problems[0] == \
        "line 1: ] does not close the ( opened on line 1"
    found = pscheck.functions("function Set-X {\n  param([Parameter(Mandatory = $true)] [String] "
                              "$Name, [String[]] $Items = @('a', 'b'))\n  Get-Y -Name $Name\n}\n")
    assert found["Set-X"].params == ["Name", "Items"]
    assert found["Set-X"].mandatory == ["Name"] and "Get-Y" in found["Set-X"].calls


def test_functions_are_defined_once():
    seen: dict[str, str] = {}
    for script, functions in script_functions().items():
        for name in functions:
            assert name not in seen, f"{name} in {script} and {seen[name]}"
            seen[name] = script


@pytest.mark.parametrize("name", sorted(windows_templates()))
def test_agent_template_calls_real_functions_with_their_parameters(name):
    plan = windows_templates()[name]
    assert set(plan) == {"Scripts", "Commands", "RebootOnCompletion"}
    assert plan["RebootOnCompletion"] in (0, 1, 2)
    scripts = script_functions()
    defined: dict[str, pscheck.Function] = {}
    for script in plan["Scripts"]:
        assert script in scripts, f"{name}: no script {script}"
        defined.update(scripts[script])
    assert plan["Commands"]
    for command in plan["Commands"]:
        function = defined.get(command["Name"])
        assert function is not None, f"{name}: {command['Name']} is not defined by {plan['Scripts']}"
        given = {key.lower() for key in command["Arguments"]}
        params = {p.lower() for p in function.params}
        assert given <= params, f"{name}: {sorted(given - params)} not parameters of {function.name}"
        assert {m.lower() for m in function.mandatory} <= given, f"{name}: mandatory missing"
        # the Fornace helpers it calls (and theirs) come with the plan's scripts
        todo, seen = [function.name], set()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            for call in defined[current].calls:
                if "-Fornace" in call:
                    assert call in defined, f"{name}: {current} calls {call}, not in {plan['Scripts']}"
                    todo.append(call)


def named_template(element: ET.Element) -> str:
    """The template a call names: its attribute, else the Windows types' instance
    template (``temp.instance.template``, what the catalog shows the workflows)."""
    name = element.get("template")
    if name is None:
        [given] = [p for p in element.findall("parameter") if p.get("name") == "template"]
        assert [s.get("path") for s in given.iter("select")] == ["::temp.instance.template"]
        name = load_catalog(DATA / "types.json").instance("windowsService")["template"]
    return name


def test_workflows_give_every_placeholder_of_their_templates():
    store = TemplateStore(DATA)
    placeholder = re.compile(r'"\$([A-Za-z_]\w*)"')
    used = set()
    for file in WINDOWS_WORKFLOWS:
        root = ET.parse(DATA / "workflows" / file).getroot()
        for element in root.iter():
            if element.tag not in ("send-command", "update-cf-stack"):
                continue
            template = named_template(element)
            used.add(template)
            path = store.agent_path(template) if element.tag == "send-command" \
                else store.heat_path(template)
            wanted = set(placeholder.findall(path.read_text()))
            given = {m.get("name") for p in element.findall("parameter")
                     if p.get("name") == "mappings" for m in p.find("map")}
            assert wanted <= given, f"{file}: {template} needs {sorted(wanted - given)}"
    # the lifecycle operations of the type catalog run the other Windows plans
    # (Lifecycle.ps1; checked in test_catalog_types.py)
    types = json.loads((DATA / "types.json").read_text())["types"].values()
    operations = [op for info in types for op in [*(info.get("operations") or {}).values(),
                                                  *(info.get("unlink") or [])] if op]
    used |= {op["template"] for op in operations if op["template"].startswith("Windows/")}
    assert used == set(windows_templates()) | set(HEAT_TEMPLATES)
