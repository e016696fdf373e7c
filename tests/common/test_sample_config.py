"""``etc/fornace.conf.sample`` is what oslo-config-generator makes of the options
today: regenerate it (command in etc/fornace-config-generator.conf) when an
option changes."""
from __future__ import annotations

from pathlib import Path

from oslo_config import generator

ROOT = Path(__file__).resolve().parents[2]
GENERATOR_CONF = ROOT / "etc" / "fornace-config-generator.conf"
SAMPLE = ROOT / "etc" / "fornace.conf.sample"


def test_the_committed_sample_is_current(tmp_path):
    fresh = tmp_path / "fornace.conf.sample"
    generator.main(["--config-file", str(GENERATOR_CONF), "--output-file", str(fresh)])
    assert fresh.read_text() == SAMPLE.read_text(), (
        "etc/fornace.conf.sample is stale: run "
        "oslo-config-generator --config-file etc/fornace-config-generator.conf")


def test_the_sample_names_no_path_of_this_machine():
    text = SAMPLE.read_text()
    assert str(ROOT) not in text and str(Path.home()) not in text


def test_every_namespace_of_the_generator_is_an_entry_point():
    from importlib.metadata import entry_points
    namespaces = [line.split("=", 1)[1].strip() for line in GENERATOR_CONF.read_text().splitlines()
                  if line.startswith("namespace")]
    declared = {e.name for e in entry_points(group="oslo.config.opts")}
    assert namespaces and set(namespaces) <= declared
