"""The folder broker's reading: in order, shared by readers, quick on a backlog."""
from __future__ import annotations

import kombu

from fornace.common import folderbroker
from fornace.common.broker import Broker, kombu_queue
from waiting import wait_for


def reader(url: str, queue: str):
    """A connection and ``queue`` bound to a channel of it (one channel: one listing kept)."""
    conn = kombu.Connection(transport=folderbroker.Transport,
                            transport_options=folderbroker.transport_options(url))
    bound = kombu_queue(queue)(conn.channel())
    bound.declare()
    return conn, bound


def take(bound, count: int, wait: bool = False) -> list[int]:
    """Up to ``count`` messages: those there now, or (``wait``) asking an empty
    queue again until ``count`` came (a consumer polls: what came after a
    listing is seen at the next one)."""
    got: list[int] = []

    def taken() -> bool:
        while len(got) < count and (message := bound.get(no_ack=True)) is not None:
            got.append(message.payload["n"])
        return len(got) >= count
    if wait:
        wait_for(taken, f"{count} message(s) of the queue, none lost",
                 explain=lambda: f"got {got}")
    else:
        taken()
    return got


def test_interleaved_queues_come_out_in_order_with_messages_written_after_a_listing(tmp_path):
    url = f"filesystem:///{tmp_path}/broker"
    broker = Broker(url)
    for n in range(30):
        broker.publish("a", {"n": n})
        broker.publish("b", {"n": n})
    conn, a = reader(url, "a")
    other, b = reader(url, "b")
    try:
        got = take(a, 10)                 # one listing, then its share of it
        broker.publish("a", {"n": 30})    # written after that listing
        got += take(a, 21, wait=True)
        assert got == list(range(31))
        assert take(b, 40) == list(range(30))
        assert a.get(no_ack=True) is None
    finally:
        conn.release()
        other.release()


def test_two_readers_share_a_queue_without_losing_or_doubling_a_message(tmp_path):
    url = f"filesystem:///{tmp_path}/broker"
    broker = Broker(url)
    for n in range(40):
        broker.publish("q", {"n": n})
    (c1, first), (c2, second) = reader(url, "q"), reader(url, "q")
    taken: list[int] = []
    try:
        taken += take(first, 1) + take(second, 1)     # both have listed the same files
        turn = 0
        while len(taken) < 40:                         # claims decide who gets each
            got = take((first, second)[turn % 2], 1, wait=True)
            taken += got
            turn += 1
    finally:
        c1.release()
        c2.release()
    assert sorted(taken) == list(range(40))
