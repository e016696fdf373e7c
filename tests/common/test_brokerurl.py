"""``[broker] url`` with several hosts (kombu's failover form, ``;`` between
URLs): what it names, how it is shown, and the errors of a bad one."""
from __future__ import annotations

import pytest

from fornace.common.broker import Broker
from fornace.common.brokerurl import BrokerUrlError, hosts, masked

CLUSTER = ("amqp://fornace:s3cret-one@mq1.example:5672/prod;"
           "amqp://fornace:s3cret-two@mq2.example:5673/prod;"
           "amqp://fornace:s3cret-three@mq3.example/prod")


def test_every_host_of_a_failover_url_is_named_with_its_port():
    found = hosts(CLUSTER)
    assert [(h.host, h.port, h.login, h.password, h.virtual_host) for h in found] == [
        ("mq1.example", 5672, "fornace", "s3cret-one", "prod"),
        ("mq2.example", 5673, "fornace", "s3cret-two", "prod"),
        ("mq3.example", 5672, "fornace", "s3cret-three", "prod")]


def test_spaces_around_the_separators_are_allowed():
    assert [h.host for h in hosts(" amqp://u:p@a// ; amqp://u:p@b// ")] == ["a", "b"]


def test_the_display_masks_the_password_of_every_host():
    shown = Broker(CLUSTER).display
    for secret in ("s3cret-one", "s3cret-two", "s3cret-three"):
        assert secret not in shown and secret not in repr(Broker(CLUSTER))
    assert shown == ("amqp://fornace:**@mq1.example:5672/prod;"
                     "amqp://fornace:**@mq2.example:5673/prod;"
                     "amqp://fornace:**@mq3.example/prod")
    assert masked("amqp://u:p%40ss@h//") == "amqp://u:**@h//"
    assert masked("filesystem:///tmp/broker") == "filesystem:///tmp/broker"


@pytest.mark.parametrize("url, message", [
    ("amqp://u:p@h1:5672//;amqp://u:p@h2:56x2//",
     "[broker] url, host 2 of 2 (amqp://u:**@h2:56x2//): the port '56x2' is not a number "
     "from 1 to 65535"),
    ("amqp://u:p@h1:5672//;amqp://u:p@:5672//",
     "[broker] url, host 2 of 2 (amqp://u:**@:5672//): no host name"),
    ("amqp://u:p@h1//;;amqp://u:p@h3//",
     "[broker] url, host 2 of 3: empty (two ';' in a row, or one at an end)"),
    ("amqp://u:p@h1//;",
     "[broker] url, host 2 of 2: empty (two ';' in a row, or one at an end)"),
    ("amqp://u:p@h1//;h2:5672",
     "[broker] url, host 2 of 2 (h2:5672): not a URL (scheme://user:password@host:port/vhost)"),
    ("amqp://u:p@h1//;redis://u:p@h2//",
     "[broker] url, host 2 of 2 (redis://u:**@h2//): the scheme 'redis' is not one of "
     "amqp, amqps, pyamqp"),
    ("amqp://u:p@h1/a;amqp://u:p@h2/b",
     "[broker] url, host 2 of 2 (amqp://u:**@h2/b): the virtual host 'b' is not that of "
     "host 1 ('a'): the hosts of one URL are one cluster"),
    ("memory://;amqp://u:p@h2//",
     "[broker] url, host 1 of 2 (memory://): memory:// and filesystem:// take no other host"),
    ("amqp://u:p@h1:99999//",
     "[broker] url (amqp://u:**@h1:99999//): the port '99999' is not a number from 1 to 65535"),
    ("ftp://h1/",
     "[broker] url (ftp://h1/): the scheme 'ftp' is not one of memory, filesystem, amqp, "
     "amqps, pyamqp"),
])
def test_a_bad_url_is_refused_naming_the_host_and_what_is_wrong(url, message):
    with pytest.raises(BrokerUrlError) as caught:
        hosts(url)
    assert str(caught.value) == message
    assert "p@" not in str(caught.value)
    with pytest.raises(BrokerUrlError):   # and so is a Broker made of it
        Broker(url)


def test_one_host_urls_stay_as_they_were():
    assert [h.host for h in hosts("amqp://guest:guest@127.0.0.1:5672//")] == ["127.0.0.1"]
    assert hosts("memory://") == [] and hosts("filesystem:///tmp/b") == []
    assert hosts("amqp://h1")[0].virtual_host == "/"


@pytest.mark.parametrize("command", ["conductor", "api"])
def test_a_daemon_with_a_bad_url_stops_at_once_naming_the_part(tmp_path, capsys, command):
    """Not a daemon that starts and retries a URL it can never use."""
    from fornace.cli.main import main
    from waiting import returns
    config = tmp_path / "fornace.conf"
    config.write_text("[broker]\nurl = amqp://u:s3cret@h1:5672//;amqp://u:s3cret@h2:x//\n"
                      f"[api]\nstate_dir = {tmp_path}\n")
    code = returns(lambda: main(["--config-file", str(config), command]),
                   f"fornace {command} to stop", timeout=60)
    assert code == 2
    err = capsys.readouterr().err
    assert "[broker] url, host 2 of 2 (amqp://u:**@h2:x//): the port 'x' is not a number" \
        in err, err
    assert "s3cret" not in err
