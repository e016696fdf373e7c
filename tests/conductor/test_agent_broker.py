"""Where agents reach the broker: ``[rabbitmq]``, and what it leaves unset from
``[broker] url`` (so that agents share the conductor's virtual host)."""
from __future__ import annotations

from pathlib import Path

from oslo_config import cfg

from fornace.conductor.config import agent_broker, register
from fornace.conductor.dsl.functions.hosts import agent_broker_url

ONE_CLASSIC = {"alternates": [], "queue_type": "classic"}   # one host, classic queues


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
                                  "ssl": False, **ONE_CLASSIC}


def test_rabbitmq_options_that_are_set_win(tmp_path):
    conf = conf_of(tmp_path, "[broker]\nurl = amqps://u:p@10.0.0.5/vh\n"
                             "[rabbitmq]\nhost = mq.public.example\nvirtual_host = /\n")
    assert agent_broker(conf) == {"host": "mq.public.example", "port": 5672, "login": "u",
                                  "password": "p", "virtual_host": "/", "ssl": True,
                                  **ONE_CLASSIC}


def test_without_an_amqp_url_the_rabbitmq_options_alone(tmp_path):
    conf = conf_of(tmp_path, "[broker]\nurl = filesystem:///tmp/b\n[rabbitmq]\nlogin = a\n")
    assert agent_broker(conf) == {"host": "127.0.0.1", "port": 5672, "login": "a",
                                  "password": "guest", "virtual_host": "/", "ssl": False,
                                  **ONE_CLASSIC}


def test_agents_get_every_host_of_a_failover_url_with_the_rabbitmq_login(tmp_path):
    """[broker] url names a cluster: the agents' URL names every node (kombu's
    failover form), each with the agents' own login, in the conductor's vhost."""
    conf = conf_of(tmp_path, "[broker]\nurl = amqp://fornace:c0nductor@mq1:5672/tenant;"
                             "amqp://fornace:c0nductor@mq2:5673/tenant\nqueue_type = quorum\n"
                             "[rabbitmq]\nlogin = agent\npassword = p@ss\n")
    broker = agent_broker(conf)
    assert (broker["host"], broker["port"], broker["virtual_host"]) == ("mq1", 5672, "tenant")
    assert broker["queue_type"] == "quorum"
    assert agent_broker_url(broker) == ("amqp://agent:p%40ss@mq1:5672/tenant;"
                                        "amqp://agent:p%40ss@mq2:5673/tenant")


def test_a_rabbitmq_host_that_is_set_is_the_agents_only_host(tmp_path):
    """Agents that reach the broker by another address ([rabbitmq] host) get that
    one: the cluster's addresses in [broker] url are the conductor's."""
    conf = conf_of(tmp_path, "[broker]\nurl = amqp://u:p@10.0.0.1//;amqp://u:p@10.0.0.2//\n"
                             "[rabbitmq]\nhost = mq.public.example\n")
    broker = agent_broker(conf)
    assert agent_broker_url(broker) == "amqp://u:p@mq.public.example:5672//"
    assert broker["queue_type"] == "classic"
