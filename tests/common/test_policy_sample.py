"""``etc/policy.yaml.sample`` is what oslopolicy-sample-generator makes of the
API's rules today (:mod:`fornace.api.policy`): regenerate it (command in
etc/fornace-policy-generator.conf) when a rule changes."""
from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

from oslo_config import cfg
from oslo_policy import generator

ROOT = Path(__file__).resolve().parents[2]
GENERATOR_CONF = ROOT / "etc" / "fornace-policy-generator.conf"
SAMPLE = ROOT / "etc" / "policy.yaml.sample"


def test_the_committed_policy_sample_is_current(tmp_path):
    fresh = tmp_path / "policy.yaml.sample"
    generator.generate_sample(["--config-file", str(GENERATOR_CONF),
                               "--output-file", str(fresh)], conf=cfg.ConfigOpts())
    assert fresh.read_text() == SAMPLE.read_text(), (
        "etc/policy.yaml.sample is stale: run "
        "oslopolicy-sample-generator --config-file etc/fornace-policy-generator.conf")


def test_the_entry_points_name_the_rules_and_the_enforcer():
    """The sample generator finds the rules, oslopolicy-checker and
    oslopolicy-policy-generator the enforcer (pip install -e . declares them)."""
    rules = {e.name: e for e in entry_points(group="oslo.policy.policies")}
    enforcers = {e.name: e for e in entry_points(group="oslo.policy.enforcer")}
    assert rules["fornace"].value == "fornace.api.policy:list_rules"
    assert enforcers["fornace"].value == "fornace.api.policy:get_enforcer"
    names = {rule.name for rule in rules["fornace"].load()()}
    assert {"cloud_admin", "environment:show", "job:run_action"} <= names
    assert set(enforcers["fornace"].load()().registered_rules) == names
