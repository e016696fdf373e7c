"""Broker.publish_many: a batch of messages, one confirmation for all of them.

Each message stays an AMQP message of its own with its id (a consumer reads
them one by one); the batch is confirmed once; a batch whose confirmation
is lost with the connection is sent again, whole, with the same ids.
"""
from __future__ import annotations

import threading
import uuid

import amqp
import pytest

from fornace.common.broker import Broker
from cutproxy import proxy_to

WAIT = 30


def unique() -> str:
    return f"batch-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["memory", "folder", "rabbitmq"])
def url(request, tmp_path) -> str:
    if request.param == "folder":
        return f"filesystem://{tmp_path}/broker"
    return "memory://" if request.param == "memory" else request.getfixturevalue("amqp_vhost")


def numbered(count: int, prefix: str = "m") -> list[tuple[dict, str]]:
    return [({"n": n, "text": "x" * n}, f"{prefix}{n}") for n in range(count)]


def test_a_batch_arrives_in_order_each_message_with_its_id(url):
    queue = unique()
    sent = numbered(50)
    with Broker(url) as broker:
        broker.publish_many(queue, sent[:20])
        broker.publish_many(queue, [])              # nothing to send: nothing sent
        broker.publish(queue, *sent[20])            # single publishes mix with batches
        broker.publish_many(queue, sent[21:])
        assert broker.drain(queue, timeout=1, count=50) == sent
        broker.delete(queue)


class Confirms:
    """Counts, on py-amqp's channels, the messages published and the waits for
    a publisher confirm."""

    def __init__(self, monkeypatch) -> None:
        self.waits = 0
        self.published = 0
        wait, publish = amqp.Channel.wait, amqp.Channel._basic_publish

        def counting_wait(channel, method, *args, **kwargs):
            if isinstance(method, list) and amqp.spec.Basic.Ack in method:
                self.waits += 1
            return wait(channel, method, *args, **kwargs)

        def counting_publish(channel, *args, **kwargs):
            self.published += 1
            return publish(channel, *args, **kwargs)
        monkeypatch.setattr(amqp.Channel, "wait", counting_wait)
        monkeypatch.setattr(amqp.Channel, "_basic_publish", counting_publish)


def test_a_batch_waits_for_the_broker_once(amqp_vhost, monkeypatch):
    queue = unique()
    sent = numbered(200)
    with Broker(amqp_vhost) as broker:
        broker.connect([queue])
        confirms = Confirms(monkeypatch)
        broker.publish_many(queue, sent[:100])
        broker.publish_many(queue, sent[100:])
        # the broker may ack a batch in several frames (then a few more waits,
        # never one per message)
        assert confirms.published == 200
        assert 1 <= confirms.waits <= 20
        assert broker.drain(queue, timeout=1, count=200) == sent
        broker.delete(queue)


def test_a_single_publish_still_waits_for_its_own_confirm(amqp_vhost, monkeypatch):
    queue = unique()
    with Broker(amqp_vhost) as broker:
        broker.connect([queue])
        confirms = Confirms(monkeypatch)
        broker.publish(queue, {"n": 1}, "one")
        broker.publish(queue, {"n": 2}, "two")
        assert (confirms.published, confirms.waits) == (2, 2)
        broker.delete(queue)


def test_a_nacked_batch_raises_after_its_retries(amqp_vhost, monkeypatch):
    queue = unique()
    tries: list[int] = []

    def nacked(self, channel, tags):
        tries.append(len(tags))
        raise amqp.exceptions.MessageNacked("refused")
    monkeypatch.setattr(Broker, "_await_confirms", nacked)
    with Broker(amqp_vhost, retry_policy={"interval_start": 0, "interval_step": 0,
                                           "max_retries": 2}) as broker:
        with pytest.raises(Exception, match="refused"):
            broker.publish_many(queue, numbered(3))
        broker.close()
    assert tries and set(tries) == {3}


def test_a_batch_cut_off_before_its_confirm_is_sent_again_whole(amqp_vhost, monkeypatch):
    """The connection breaks while the batch waits for its confirmation: the
    batch goes again on a new connection with the same ids; the consumer sees
    every id (some twice: its storage keeps one per id)."""
    proxy = proxy_to(amqp_vhost)
    queue = unique()
    sent = numbered(60)
    waits = []
    await_confirms = Broker._await_confirms

    def cut_first(self, channel, tags):
        waits.append(list(tags))
        if len(waits) == 1:     # the messages left; the confirm will not come
            proxy.cut()
        return await_confirms(self, channel, tags)
    monkeypatch.setattr(Broker, "_await_confirms", cut_first)
    try:
        with Broker(proxy.url(amqp_vhost), retry_policy={"interval_start": 0.1}) as broker:
            broker.publish_many(queue, sent[:30])
            broker.publish_many(queue, sent[30:])
    finally:
        proxy.close()
    assert len(waits) == 3
    assert waits[0] == waits[1] and len(waits[1]) == 30   # again, whole, on a new channel
    assert waits[1][0] == 1
    with Broker(amqp_vhost) as reader:
        got = reader.drain(queue, timeout=1)
        reader.delete(queue)
    assert {message_id for _, message_id in got} == {message_id for _, message_id in sent}
    # what came twice came with its own body; the second batch in order after the first
    assert dict((i, b) for b, i in got) == dict((i, b) for b, i in sent)
    assert [i for _, i in got][-30:] == [i for _, i in sent[30:]]


def test_batches_from_several_threads_stay_whole(amqp_vhost):
    queue = unique()
    with Broker(amqp_vhost) as broker:
        broker.connect([queue])
        threads = [threading.Thread(target=broker.publish_many,
                                    args=(queue, numbered(40, prefix=f"t{t}-")))
                   for t in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        got = [i for _, i in broker.drain(queue, timeout=1, count=120)]
        broker.delete(queue)
    for t in range(3):
        assert [i for i in got if i.startswith(f"t{t}-")] == [f"t{t}-{n}" for n in range(40)]
