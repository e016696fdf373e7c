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


def test_each_queue_has_a_folder_of_its_own_and_older_flat_messages_are_read(tmp_path):
    """A reader lists its queue's folder only (not every queue's backlog); a
    message an older version wrote into the shared folder is still read, in
    its order; a queue whose name is no safe file name gets a digest folder."""
    url = f"filesystem:///{tmp_path}/broker"
    messages = tmp_path / "broker" / "messages"
    with Broker(url) as broker:
        broker.publish("source", {"n": 1}, "q1")
        broker.publish("busy", {"n": 0}, "b0")
        broker.publish("quiet", {"n": 2}, "q2")
        broker.publish("../odd queue", {"n": 7}, "odd")
    # as a version before the queue folders left it (older than q2)
    [written] = (messages / "source").iterdir()
    written.rename(messages / written.name.replace(".msg", ".quiet.msg"))
    (messages / "source").rmdir()
    assert sorted(p.name for p in messages.iterdir() if p.is_dir()) == sorted(
        ["busy", "quiet", folderbroker.queue_folder_name("../odd queue")])
    assert folderbroker.queue_folder_name("../odd queue").startswith("q-")
    with Broker(url) as broker:
        assert [b["n"] for b, _ in broker.drain("quiet", timeout=0.2)] == [1, 2]
        assert [b["n"] for b, _ in broker.drain("../odd queue", timeout=0.2)] == [7]
        broker.delete("quiet")
    assert not (messages / "quiet").exists()          # no folder left per deleted queue
    assert [p.name for p in (messages / "busy").iterdir()][0].endswith(".msg")
