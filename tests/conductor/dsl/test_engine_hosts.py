"""generate-hostname and prepare-user-data."""
from __future__ import annotations

import base64
import re

import pytest

from enginekit import UNITS, sample_model

HOSTNAME = ('<set path="state.hostname"><generate-hostname pattern="{pattern}">'
            '<parameter name="service_id"><select path="::id"/></parameter>'
            '</generate-hostname></set>')


def hostnames(run) -> list:
    return [u.get("state", {}).get("hostname") for s in run.model["services"] for u in s["units"]]


# ------------------------------------------------------------ generate-hostname

def test_pattern_counter_per_service(catalog):
    catalog.rules(f'<rule match="{UNITS}">'
                  '<rule match="$[?(@.state.hostname is None)]">'
                  '<set path="state.hostname"><generate-hostname>'
                  '<parameter name="pattern"><select path="::name"/>#</parameter>'
                  '<parameter name="service_id"><select path="::id"/></parameter>'
                  '</generate-hostname></set></rule></rule>')
    run = catalog.run()
    assert run.status == "success", run.reports
    assert hostnames(run) == ["web1", "web2", "db1"]


def test_same_pattern_in_two_services_never_repeats(catalog):
    catalog.rules(f'<rule match="{UNITS}"><rule match="$[?(@.state.hostname is None)]">'
                  + HOSTNAME.format(pattern="node#") + '</rule></rule>')
    run = catalog.run()
    # the second service starts its own counter at 1, but node1 is taken
    assert hostnames(run) == ["node1", "node2", "node3"]


def test_only_first_hash_replaced(catalog):
    catalog.rules(f'<rule match="{UNITS}"><rule match="$[?(@.state.hostname is None)]">'
                  + HOSTNAME.format(pattern="a#b#") + '</rule></rule>')
    assert hostnames(catalog.run())[:2] == ["a1b#", "a2b#"]


def test_pattern_without_hash_used_as_is(catalog):
    catalog.rules(f'<rule match="{UNITS}"><rule match="$[?(@.state.hostname is None)]">'
                  + HOSTNAME.format(pattern="fixed-name") + '</rule></rule>')
    assert hostnames(catalog.run()) == ["fixed-name"] * 3


def test_no_pattern_gives_random_unique_names(catalog):
    catalog.rules(f'<rule match="{UNITS}"><rule match="$[?(@.state.hostname is None)]">'
                  '<set path="state.hostname"><generate-hostname/></set></rule></rule>')
    names = hostnames(catalog.run())
    assert all(re.fullmatch(r"[a-z][a-z0-9]{13}", n) for n in names), names
    assert len(set(names)) == 3


def test_skips_hostnames_already_in_the_model(catalog):
    model = sample_model()
    model["services"][0]["units"][0]["state"] = {"hostname": "web2"}
    model["services"][1]["units"][0]["state"] = {"hostname": "web1"}
    model["services"][0]["units"].append({"id": "uA3", "name": "web_instance_3"})
    catalog.rules(f'<rule match="{UNITS}"><rule match="$[?(@.state.hostname is None)]">'
                  + HOSTNAME.format(pattern="web#") + '</rule></rule>')
    run = catalog.run(model)
    assert hostnames(run) == ["web2", "web3", "web4", "web1"]


def test_counter_keeps_going_across_rounds(catalog):
    catalog.agent("Tpl")
    # one unit per round: the name is stored only when the command succeeded
    catalog.rules('<rule match="$.services[0].units[?(@.state.hostname is None)]" limit="1">'
                  '<set path="#h"><generate-hostname pattern="w#" service_id="SvcA"/></set>'
                  '<send-command template="Tpl" service="SvcA"><parameter name="unit">'
                  '<select path="id"/></parameter><success><set path="state.hostname">'
                  '<select path="#h"/></set></success></send-command></rule>')
    run = catalog.run()
    assert run.status == "success", run.reports
    assert hostnames(run) == ["w1", "w2", None]
    assert run.outcome.rounds == 3


# ------------------------------------------------------------ prepare-user-data

INIT = ("host=%RABBITMQ_HOST%\nport=%RABBITMQ_PORT%\nuser=%RABBITMQ_USER%\n"
        "queue=%RABBITMQ_INPUT_QUEUE%\nresults=%RESULT_QUEUE%\nname=%INTERNAL_HOSTNAME%\n"
        "config=%AGENT_CONFIG_BASE64%\nunknown=%NOT_A_KEY%\n")
CONFIG = ("[agent]\nhost=%RABBITMQ_HOST%\nvhost=%RABBITMQ_VHOST%\nssl=%RABBITMQ_SSL%\n"
          "input=%RABBITMQ_INPUT_QUEUE%\noutput=%RESULT_QUEUE%\npassword=%RABBITMQ_PASSWORD%\n")

USER_DATA = ('<rule match="$.services[0].units[0]"><set path="state.userData">'
             '<prepare-user-data{attrs}>'
             '<parameter name="hostname"><select path="state.hostname"/></parameter>'
             '<parameter name="service"><select path="::id"/></parameter>'
             '<parameter name="unit"><select path="id"/></parameter>'
             '</prepare-user-data></set></rule>')


def user_data_model():
    model = sample_model()
    model["services"][0]["units"][0]["state"] = {"hostname": "Web1"}
    return model


def fields(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_prepare_user_data_renders_init_script_and_config(catalog):
    catalog.file("init-scripts/init.ps1", INIT)
    catalog.file("templates/agent-config/Default.template", CONFIG)
    catalog.rules(USER_DATA.format(attrs=""))
    broker = {"host": "mq.example", "port": 5671, "login": "murano", "password": "mqpass1",
              "virtual_host": "/murano", "ssl": True}
    run = catalog.run(user_data_model(), broker=broker)
    assert run.status == "success", run.reports
    data = fields(run.unit("uA1")["state"]["userData"])
    assert data["host"] == "mq.example" and data["port"] == "5671" and data["user"] == "murano"
    assert data["queue"] == "eenv1-svca-ua1"
    assert data["results"] == "-execution-results-eenv1"
    assert data["name"] == "Web1"
    assert data["unknown"] == "%NOT_A_KEY%"
    config = base64.b64decode(data["config"]).decode()
    assert fields(config) == {"host": "mq.example", "vhost": "/murano", "ssl": "True",
                              "input": "eenv1-svca-ua1", "output": "-execution-results-eenv1",
                              "password": "mqpass1"}


def test_prepare_user_data_broker_defaults_merge(catalog):
    catalog.file("init-scripts/init.ps1", INIT)
    catalog.file("templates/agent-config/Default.template", CONFIG)
    catalog.rules(USER_DATA.format(attrs=""))
    run = catalog.run(user_data_model(), broker={"host": "only-host"})
    data = fields(run.unit("uA1")["state"]["userData"])
    assert data["host"] == "only-host" and data["port"] == "5672" and data["user"] == "guest"


@pytest.mark.parametrize("broker, url", [
    ({"login": "mur ano", "password": "p@ss:/w", "virtual_host": "/murano", "port": 5671},
     "amqp://mur%20ano:p%40ss%3A%2Fw@127.0.0.1:5671/%2Fmurano"),
    ({}, "amqp://guest:guest@127.0.0.1:5672//"),
    ({"url": "filesystem:///var/lib/fornace/broker", "host": "ignored"},
     "filesystem:///var/lib/fornace/broker"),
])
def test_prepare_user_data_gives_agents_a_broker_url(catalog, broker, url):
    catalog.file("init-scripts/init.ps1", INIT)
    catalog.file("templates/agent-config/Default.template", "[DEFAULT]\nbroker_url=%BROKER_URL%\n")
    catalog.rules(USER_DATA.format(attrs=""))
    run = catalog.run(user_data_model(), broker=broker)
    config = base64.b64decode(fields(run.unit("uA1")["state"]["userData"])["config"]).decode()
    assert fields(config)["broker_url"] == url


def test_prepare_user_data_custom_files(catalog):
    catalog.file("init-scripts/linux-init.sh", "#!/bin/sh\nCFG=%AGENT_CONFIG_BASE64%\n")
    catalog.file("templates/agent-config/Linux.template", "queue %RABBITMQ_INPUT_QUEUE%")
    catalog.rules(USER_DATA.format(attrs=' initFile="linux-init.sh" template="Linux"'))
    run = catalog.run(user_data_model())
    text = run.unit("uA1")["state"]["userData"]
    assert text.startswith("#!/bin/sh\nCFG=")
    encoded = text.split("CFG=")[1].strip()
    assert base64.b64decode(encoded).decode() == "queue eenv1-svca-ua1"


def test_prepare_user_data_falls_back_to_builtin_data(catalog, tmp_path):
    builtin = tmp_path / "builtin"
    (builtin / "init-scripts").mkdir(parents=True)
    (builtin / "templates" / "agent-config").mkdir(parents=True)
    (builtin / "init-scripts" / "init.ps1").write_text("builtin %RESULT_QUEUE%")
    (builtin / "templates" / "agent-config" / "Default.template").write_text("cfg")
    catalog.file("templates/agent-config/Default.template", "catalog cfg")
    catalog.rules(USER_DATA.format(attrs=""))
    run = catalog.run(user_data_model(), fallback=builtin)
    assert run.unit("uA1")["state"]["userData"] == "builtin -execution-results-eenv1"


def test_prepare_user_data_uses_fornace_data_by_default(catalog):
    from fornace.common.resources import BUILTIN_DATA
    catalog.rules(USER_DATA.format(attrs=' initFile="linux_init.sh" template="Linux"'))
    run = catalog.run(user_data_model(), fallback=BUILTIN_DATA)
    assert run.status == "success", run.reports
    text = run.unit("uA1")["state"]["userData"]
    assert "%" not in text.replace("%%", "")  # every placeholder filled
    encoded = re.search(r"'([A-Za-z0-9+/=]{20,})'", text).group(1)
    assert "eenv1-svca-ua1" in base64.b64decode(encoded).decode()


def test_prepare_user_data_missing_file_is_an_error(catalog):
    catalog.file("templates/agent-config/Default.template", "cfg")
    catalog.rules(USER_DATA.format(attrs=' initFile="nope.ps1"'))
    run = catalog.run(user_data_model())
    assert run.status == "error"
    assert "nope.ps1 not found" in run.errors[0]


def test_prepare_user_data_refuses_escaping_names(catalog, tmp_path):
    (tmp_path / "outside.ps1").write_text("leaked %RESULT_QUEUE%")
    catalog.file("templates/agent-config/Default.template", "cfg")
    for name in ("../../outside.ps1", str(tmp_path / "outside.ps1")):
        catalog.rules(USER_DATA.format(attrs=f' initFile="{name}"'))
        run = catalog.run(user_data_model())
        assert run.status == "error", name
        assert "must stay inside" in run.errors[0]
        assert "leaked" not in repr(run.model)


def test_user_data_does_not_leak_broker_password_in_reports(catalog):
    catalog.file("init-scripts/init.ps1", "pw=%RABBITMQ_PASSWORD%")
    catalog.file("templates/agent-config/Default.template", "cfg")
    catalog.rules(USER_DATA.format(attrs="")
                  + '\n<rule match="$.services[0].units[0]"><report>'
                  '<select path="state.userData"/></report></rule>')
    run = catalog.run(user_data_model(), broker={"password": "brokerSecret"})
    assert run.texts() == ["pw=***"]
