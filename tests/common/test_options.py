"""The shared options (``fornace.common.options``): declared once, registered by
each service that reads them, twice without harm."""
from __future__ import annotations

from collections import Counter
from importlib.metadata import entry_points

import pytest
from oslo_config import cfg

from fornace.agent import config as agent_config
from fornace.api import config as api_config
from fornace.common import options
from fornace.conductor import config as conductor_config

SHARED = (("broker", "url"), (None, "data_dir"), ("database", "connection"),
          ("api", "state_dir"))


def _read(conf: cfg.ConfigOpts, group: str | None, name: str) -> object:
    return conf[name] if group is None else conf[group][name]


@pytest.mark.parametrize("service", [api_config, conductor_config])
def test_a_service_alone_has_the_shared_options_it_reads(service):
    conf = cfg.ConfigOpts()
    service.register(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    values = {name: _read(conf, group, name) for group, name in SHARED}
    assert values["url"] == "memory://" and values["connection"] is None
    assert values["data_dir"] and values["state_dir"]


def test_both_services_register_them_in_one_configuration(tmp_path):
    conf = cfg.ConfigOpts()
    for register in (api_config.register, conductor_config.register, api_config.register,
                     options.register_database, options.register_broker):
        register(conf)
    config_file = tmp_path / "fornace.conf"
    config_file.write_text(f"[api]\nstate_dir = {tmp_path / 'state'}\n")
    conf(["--config-file", str(config_file)], default_config_files=[], default_config_dirs=[])
    assert options.database_url(conf) == f"sqlite:///{tmp_path / 'state' / 'fornace.sqlite'}"


def test_the_agent_registers_none_of_them():
    conf = cfg.ConfigOpts()
    agent_config.register(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    with pytest.raises(cfg.NoSuchOptError, match="broker"):
        conf.broker.url


def test_every_option_is_listed_once_for_the_sample():
    listed: Counter[tuple[str, str]] = Counter()
    for entry in entry_points(group="oslo.config.opts"):
        if entry.name.startswith("fornace."):
            for group, opts in entry.load()():
                listed.update((group or "DEFAULT", opt.dest) for opt in opts)
    assert [key for key, count in listed.items() if count > 1] == []
    assert {("broker", "url"), ("DEFAULT", "data_dir"), ("database", "connection"),
            ("api", "state_dir"), ("conductor", "stacks")} <= set(listed)
