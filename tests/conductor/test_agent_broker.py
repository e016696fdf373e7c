"""Where agents reach the broker: ``[rabbitmq]``, and what it leaves unset from
``[broker] url`` (so that agents share the conductor's virtual host)."""
from __future__ import annotations

from pathlib import Path

from oslo_config import cfg

from fornace.conductor.config import agent_broker, register


def conf_of(tmp_path: Path, text: str) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    register(conf)
    path = tmp_path / "fornace.conf"
    path.write_text(text)
    conf(["--config-file", str(path)], project="fornace", default_config_files=[],
         default_config_dirs=[])
    return conf


def test_an_amqp_broker_url_gives_the_agents_its_host_vhost_and_login(tmp_path):
    conf = conf_of(tmp_path, "[broker]\nurl = amqp://fornace:s%40cret@mq.example:5673/tenant-a\n")
    assert agent_broker(conf) == {"host": "mq.example", "port": 5673, "login": "fornace",
                                  "password": "s@cret", "virtual_host": "tenant-a",
                                  "ssl": False}


def test_rabbitmq_options_that_are_set_win(tmp_path):
    conf = conf_of(tmp_path, "[broker]\nurl = amqps://u:p@10.0.0.5/vh\n"
                             "[rabbitmq]\nhost = mq.public.example\nvirtual_host = /\n")
    assert agent_broker(conf) == {"host": "mq.public.example", "port": 5672, "login": "u",
                                  "password": "p", "virtual_host": "/", "ssl": True}


def test_without_an_amqp_url_the_rabbitmq_options_alone(tmp_path):
    conf = conf_of(tmp_path, "[broker]\nurl = filesystem:///tmp/b\n[rabbitmq]\nlogin = a\n")
    assert agent_broker(conf) == {"host": "127.0.0.1", "port": 5672, "login": "a",
                                  "password": "guest", "virtual_host": "/", "ssl": False}
