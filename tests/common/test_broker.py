"""Tests of fornace.common.broker and fornace.common.consumer: in memory, and against the RabbitMQ of this machine.

The RabbitMQ tests each use a virtual host of their own (the ``amqp_vhost``
fixture: skip, or fail under ``FORNACE_REQUIRE_SERVICES=1``, when RabbitMQ is
absent), and a small TCP proxy to cut connections the
way a broker restart or a network failure does.

Every test of the ``consumers`` fixture runs twice: with a handler per
message, and with a batch handler that goes through its batch message by
message (the consumer's guarantees must hold for batches too).
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import amqp
import kombu
import pytest

from fornace.common import broker as broker_module
from fornace.common.broker import Broker, kombu_queue
from fornace.common.consumer import Consumer, Delivery, Requeue
from fornace.common.contract import TASKS, ContractError, parse_report, report_body
from cutproxy import Proxy
from waiting import returns, wait_for

WAIT = 10.0  # upper bound for anything that should happen "soon"


def unique(prefix: str = "test") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def one_by_one(handler: Any) -> Any:
    """A batch handler calling ``handler(body, delivery)`` for each message:
    its ContractError drops that message alone, another exception fails it
    and (untried) every later one, so the queue's order holds."""
    def handle(items: list[tuple[Any, Delivery]]) -> list[BaseException | None]:
        outcomes: list[BaseException | None] = []
        failure: BaseException | None = None
        for body, delivery in items:
            if failure is not None:
                outcomes.append(failure)
                continue
            try:
                handler(body, delivery)
                outcomes.append(None)
            except ContractError as exc:
                outcomes.append(exc)
            except Exception as exc:  # noqa: BLE001 -- the consumer requeues it
                outcomes.append(failure := exc)
        return outcomes
    return handle


class Running:
    """A Consumer in a thread, with the calls its handlers got.

    ``batch`` makes the queues batch queues: ``handler`` is then called for
    each message of a batch (see :func:`one_by_one`), or ``batch_handler``
    gets the batches; ``batches`` keeps the message ids of each batch.
    """

    def __init__(self, broker: Broker, queues: list[str], handler: Any = None,
                 batch: bool = False, batch_handler: Any = None, **options: Any) -> None:
        self.calls: list[tuple[Any, Delivery]] = []
        self.batches: list[list[str | None]] = []
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.handler = handler
        self.batch_handler = batch_handler
        options = {"requeue_delay": 0.05, "poll_interval": 0.1, **options}
        if batch or batch_handler is not None:
            self.consumer = Consumer(broker, {}, self.stop,
                                     batch_handlers={q: self._handle_batch for q in queues},
                                     **options)
        else:
            self.consumer = Consumer(broker, {q: self._handle for q in queues}, self.stop,
                                     **options)
        self.thread = threading.Thread(target=self.consumer.run, daemon=True)
        self.thread.start()
        assert self.consumer.ready.wait(WAIT), "the consumer did not subscribe"

    def _record(self, items: list[tuple[Any, Delivery]]) -> None:
        with self.changed:
            self.calls.extend(items)
            self.changed.notify_all()

    def _handle(self, body: Any, delivery: Delivery) -> None:
        self._record([(body, delivery)])
        if self.handler is not None:
            self.handler(body, delivery)

    def _handle_batch(self, items: list[tuple[Any, Delivery]]) -> Any:
        with self.changed:
            self.batches.append([d.message_id for _, d in items])
        if self.batch_handler is None:
            return one_by_one(self._handle)(items)
        self._record(items)
        return self.batch_handler(items)

    def wait_calls(self, count: int, timeout: float = WAIT) -> list[tuple[Any, Delivery]]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.calls) >= count, timeout), \
                f"{len(self.calls)} handler calls, expected {count}"
            return list(self.calls)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the consumer did not stop"


def _starter(**defaults: Any) -> Any:
    started: list[Running] = []

    def start(*args: Any, **kwargs: Any) -> Running:
        running = Running(*args, **{**defaults, **kwargs})
        started.append(running)
        return running

    yield start
    for running in started:
        running.close()


@pytest.fixture(params=["single", "batch"])
def consumers(request):
    """Start a :class:`Running` (per message, then in batches); stopped after the test."""
    yield from _starter(batch=request.param == "batch")


@pytest.fixture
def batching():
    """Start a :class:`Running` on batch queues; stopped after the test."""
    yield from _starter(batch=True)


def record_acks(monkeypatch, log: list) -> None:
    original = kombu.message.Message.ack

    def ack(self, *args, **kwargs):
        log.append(("ack", self.properties.get("message_id")))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(kombu.message.Message, "ack", ack)


# ======================================================= both transports

@pytest.fixture(params=["memory", "folder", "rabbitmq"])
def url(request, tmp_path) -> str:
    if request.param == "folder":
        return f"filesystem://{tmp_path}/broker"
    return "memory://" if request.param == "memory" else request.getfixturevalue("amqp_vhost")


@pytest.fixture
def queue(url):
    """A unique queue name, deleted after the test."""
    names: list[str] = []

    def make(prefix: str = "test") -> str:
        names.append(unique(prefix))
        return names[-1]

    yield make
    with Broker(url) as cleaner:
        for name in names:
            cleaner.delete(name)


def test_publish_then_consume_in_another_thread(url, queue, consumers):
    name = queue()
    with Broker(url) as broker:
        first = broker.publish(name, {"n": 1})
        second = broker.publish(name, {"n": 2}, message_id="my-id-2")
    assert second == "my-id-2" and len(first) == 32
    running = consumers(Broker(url), [name])
    calls = running.wait_calls(2)
    assert [(body, d.message_id, d.queue) for body, d in calls] == [
        ({"n": 1}, first, name), ({"n": 2}, "my-id-2", name)]


def test_ack_comes_only_after_the_handler_returned(url, queue, consumers, monkeypatch):
    name = queue()
    log: list = []
    record_acks(monkeypatch, log)
    turns: list = []      # the consumer loop reads the broker while the handler runs
    pump = Consumer._pump
    monkeypatch.setattr(Consumer, "_pump",
                        lambda self, *args: (turns.append(1), pump(self, *args))[1])

    def handler(body, delivery):
        log.append(("start", delivery.message_id))
        seen = len(turns)
        wait_for(lambda: len(turns) >= seen + 3, "several turns of the consumer loop")
        log.append(("end", delivery.message_id))

    running = consumers(Broker(url), [name], handler)
    with Broker(url) as broker:
        broker.publish(name, {"x": 1}, message_id="m1")
    running.wait_calls(1)
    wait_for(lambda: ("ack", "m1") in log, "the ack of m1", explain=lambda: str(log))
    assert log == [("start", "m1"), ("end", "m1"), ("ack", "m1")]


def acked(log: list, message_id: str, times: int = 1) -> bool:
    """Wait (on the consumer's own acks, with a timeout) until ``message_id`` was
    acknowledged ``times`` times: the barrier for "it was not requeued"."""
    return bool(wait_for(lambda: log.count(("ack", message_id)) >= times, timeout=WAIT))


def test_contract_error_drops_the_message(url, queue, consumers, caplog, monkeypatch):
    name = queue()
    acks: list = []
    record_acks(monkeypatch, acks)

    def handler(body, delivery):
        if body.get("bad"):
            raise ContractError("report message: field 'level' must be a string")

    running = consumers(Broker(url), [name], handler)
    with caplog.at_level(logging.ERROR, logger="fornace.common.consumer"), Broker(url) as broker:
        broker.publish(name, {"bad": True, "token": "tok-secret-123"}, message_id="poison")
        broker.publish(name, {"good": True}, message_id="fine")
        calls = running.wait_calls(2)
        assert acked(acks, "poison") and acked(acks, "fine")   # dropped = acked, not requeued
    assert [d.message_id for _, d in running.calls] == ["poison", "fine"]
    assert [d.message_id for _, d in calls] == ["poison", "fine"]
    dropped = [r.getMessage() for r in caplog.records if "dropping" in r.getMessage()]
    assert dropped == [f"dropping bad message poison on {name!r}: "
                       "report message: field 'level' must be a string"]
    assert "tok-secret-123" not in caplog.text
    assert Broker(url).drain(name, timeout=0.05) == []


def test_a_body_that_is_not_json_is_dropped_without_calling_the_handler(
        url, queue, consumers, caplog):
    name = queue()
    with Broker(url) as broker:
        broker.publish(name, {"ok": 1}, message_id="before")  # declares the queue
    with Broker(url).connection() as conn:
        kombu.Producer(conn).publish("{not json", exchange="", routing_key=name,
                                     serializer=None, content_type="text/plain",
                                     content_encoding="utf-8", message_id="garbage")
    with caplog.at_level(logging.ERROR, logger="fornace.common.consumer"):
        with Broker(url) as broker:
            broker.publish(name, {"ok": 2}, message_id="after")
        running = consumers(Broker(url), [name])
        calls = running.wait_calls(2)
    assert [d.message_id for _, d in calls] == ["before", "after"]
    assert f"dropping bad message garbage on {name!r}" in caplog.text
    assert "invalid JSON at line 1:2" in caplog.text


def test_bad_messages_are_set_aside_and_one_that_keeps_failing_too(url, queue, consumers,
                                                                    monkeypatch):
    """With a dead-letter store (``set_aside``): a body that is not JSON, a
    ContractError and a message that failed ``max_failures`` times in a row
    are handed to it and acked; the message behind them is handled.  While
    the store is out of reach (it raises) they are requeued, not lost."""
    name = queue()
    acks: list = []
    record_acks(monkeypatch, acks)
    kept: list[tuple[Any, str | None, str]] = []
    tries = {"set_aside": 0}

    def set_aside(messages):
        tries["set_aside"] += 1
        if tries["set_aside"] == 1:
            raise ConnectionError("the dead-letter store is out of reach")
        kept.extend((body, delivery.message_id, str(why)) for body, delivery, why in messages)

    def handler(body, delivery):
        if body.get("bad"):
            raise ContractError("report message: field 'level' must be a string")
        if body.get("always"):
            raise RuntimeError("the store trips on it")

    with Broker(url) as broker:
        broker.publish(name, {"bad": True}, message_id="bad")
        with broker.connection() as conn:
            kombu.Producer(conn).publish("{not json", exchange="", routing_key=name,
                                         serializer=None, content_type="text/plain",
                                         content_encoding="utf-8", message_id="garbage")
        broker.publish(name, {"always": True}, message_id="always")
        broker.publish(name, {"n": 1}, message_id="fine")
    consumers(Broker(url), [name], handler, set_aside=set_aside, max_failures=3)
    assert all(acked(acks, m) for m in ("bad", "garbage", "always", "fine"))
    reasons = {message_id: why for _, message_id, why in kept}
    assert sorted(reasons) == ["always", "bad", "garbage"]     # each once
    assert reasons["bad"] == "report message: field 'level' must be a string"
    assert "invalid JSON" in reasons["garbage"]
    assert reasons["always"] == ("failed 3 times in a row, last with RuntimeError: the "
                                 "store trips on it")
    assert [body for body, message_id, _ in kept if message_id == "garbage"] == ["{not json"]
    assert Broker(url).drain(name, timeout=0.05) == []


def test_other_errors_requeue_and_redeliver_with_the_same_id(url, queue, consumers, caplog,
                                                              monkeypatch):
    name = queue()
    acks: list = []
    record_acks(monkeypatch, acks)
    failures = {"count": 0}

    def handler(body, delivery):
        if failures["count"] < 2:
            failures["count"] += 1
            raise RuntimeError(f"database down, token was {body['token']}")

    running = consumers(Broker(url), [name], handler)
    with caplog.at_level(logging.ERROR, logger="fornace.common.consumer"), Broker(url) as broker:
        broker.publish(name, {"token": "tok-secret-456"}, message_id="retry-me")
        calls = running.wait_calls(3)
    assert [d.message_id for _, d in calls] == ["retry-me"] * 3
    # every broker says so (a conductor tells the API a job runs only on a redelivery)
    assert [d.redelivered for _, d in calls] == [False, True, True]
    assert "RuntimeError: database down, token was ***" in caplog.text
    assert "tok-secret-456" not in caplog.text
    assert acked(acks, "retry-me")
    assert len(running.calls) == 3  # acked after the success
    assert Broker(url).drain(name, timeout=0.05) == []



def test_a_message_given_back_on_purpose_is_requeued_quietly_and_never_set_aside(
        url, queue, consumers, caplog, monkeypatch):
    """A handler's :class:`Requeue` (its process is stopping) gives the message
    back: no error, no traceback in the log, and it does not count towards
    ``max_failures`` (given back more often than that, it is still handled)."""
    name = queue()
    acks: list = []
    record_acks(monkeypatch, acks)
    given_back = {"count": 0}
    kept: list = []

    def handler(body, delivery):
        if given_back["count"] < 3:
            given_back["count"] += 1
            raise Requeue("the conductor is stopping")

    running = consumers(Broker(url), [name], handler, set_aside=kept.extend, max_failures=2)
    with caplog.at_level(logging.INFO, logger="fornace.common.consumer"), Broker(url) as broker:
        broker.publish(name, {"n": 1}, message_id="later")
        running.wait_calls(4)
    wait_for(lambda: acked(acks, "later"), what="the message acked once handled")
    assert kept == []
    assert "Traceback" not in caplog.text and "ERROR" not in caplog.text
    assert "given back: the conductor is stopping" in caplog.text

def test_one_consumer_serves_several_queues(url, queue, consumers):
    reports, results = queue("reports"), queue("results")
    running = consumers(Broker(url), [reports, results])
    with Broker(url) as broker:
        body = report_body("u1", "unit", "hello", "info", "E1")
        broker.publish(reports, body, message_id="r1")
        broker.publish(results, {"id": "E1"}, message_id="s1")
    calls = running.wait_calls(2)
    seen = {d.queue: (b, d.message_id) for b, d in calls}
    assert seen == {reports: (body, "r1"), results: ({"id": "E1"}, "s1")}
    assert parse_report(seen[reports][0]).text == "hello"


def test_publishers_in_several_threads(url, queue, consumers):
    name = queue()
    sent: list[str] = []
    lock = threading.Lock()

    def publish(thread: int) -> None:
        with Broker(url) as broker:  # one Broker per thread
            for n in range(10):
                message_id = broker.publish(name, {"thread": thread, "n": n})
                with lock:
                    sent.append(message_id)

    threads = [threading.Thread(target=publish, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    running = consumers(Broker(url), [name], prefetch=5)
    calls = running.wait_calls(40)
    assert sorted(d.message_id for _, d in calls) == sorted(sent)
    for t in range(4):  # order is kept per publisher
        assert [b["n"] for b, _ in calls if b["thread"] == t] == list(range(10))


def test_drain(url, queue):
    name = queue()
    with Broker(url) as broker:
        ids = [broker.publish(name, {"n": n}) for n in range(3)]
        # count reached: no waiting (the hour's timeout would fail the wait)
        assert returns(lambda: broker.drain(name, timeout=3600, count=2),
                       "drain to return at its count") == [({"n": 0}, ids[0]),
                                                           ({"n": 1}, ids[1])]
        assert broker.drain(name, timeout=0.1) == [({"n": 2}, ids[2])]
        assert broker.drain(name, timeout=0.05) == []


def test_an_inbox_returns_messages_as_they_come(url, queue):
    name = queue("inbox")
    with Broker(url) as publisher, Broker(url).inbox(name) as inbox:
        started = time.monotonic()
        assert inbox.get(timeout=0.3) is None
        assert time.monotonic() - started >= 0.3    # its timeout is honoured, never cut short
        publisher.publish(name, {"n": 1}, "m1")
        assert inbox.get(timeout=WAIT) == ({"n": 1}, "m1")
        waiting = threading.Event()                 # the second get waits before m2 is sent
        later = threading.Thread(target=lambda: waiting.wait(WAIT) and publisher.publish(
            name, {"n": 2}, "m2"), daemon=True)
        later.start()
        # a message sent while get waits ends the wait (tools/bench_startup.py: how soon)
        assert returns(lambda: waiting.set() or inbox.get(timeout=3600),
                       "the inbox to return the message sent while it waited") == (
            {"n": 2}, "m2")
    assert Broker(url).drain(name, timeout=0.2) == []   # both were acked


def test_two_folder_brokers_in_one_process_each_route_the_tasks_exchange(tmp_path):
    # kombu's filesystem transport keeps one binding state per process; ours one per folder
    for name in ("one", "two"):
        url = f"filesystem://{tmp_path / name}"
        with Broker(url) as broker:
            broker.publish(TASKS, {"folder": name}, name)
            assert broker.drain(TASKS, timeout=0.3) == [({"folder": name}, name)]


def test_stop_ends_an_idle_consumer_quickly(url, queue):
    stop = threading.Event()
    consumer = Consumer(Broker(url), {queue(): lambda b, d: None}, stop, poll_interval=0.1)
    thread = threading.Thread(target=consumer.run)
    thread.start()
    assert consumer.ready.wait(WAIT)
    stop.set()       # how quickly: tools/bench_startup.py
    wait_for(lambda: not thread.is_alive(), "the idle consumer to stop")
    assert not consumer.ready.is_set()


def test_a_stop_lets_the_running_handler_finish_and_acks_it(url, queue):
    name = queue()
    stop = threading.Event()
    started, done = threading.Event(), []

    def handler(body, delivery):
        started.set()
        stop.wait()  # the handler watches the same event
        done.append(delivery.message_id)

    consumer = Consumer(Broker(url), {name: handler}, stop, poll_interval=0.1)
    thread = threading.Thread(target=consumer.run)
    thread.start()
    with Broker(url) as broker:
        broker.publish(name, {"x": 1}, message_id="long")
        broker.publish(name, {"x": 2}, message_id="next")
        assert started.wait(WAIT)
        stop.set()
        thread.join(WAIT)
        assert done == ["long"]
        # the finished one was acked, the one not started is still there
        assert broker.drain(name, timeout=WAIT, count=1) == [({"x": 2}, "next")]
        assert broker.drain(name, timeout=0.05) == []


# ================================================= batches, on every transport

def publish_numbered(url: str, name: str, count: int, prefix: str = "m") -> list[str]:
    """``count`` messages ``{"n": i}`` with ids ``m0``, ``m1``..., waiting in ``name``."""
    with Broker(url) as broker:
        return [broker.publish(name, {"n": n}, message_id=f"{prefix}{n}") for n in range(count)]


def handled_ids(running: Running) -> list[str | None]:
    return [d.message_id for _, d in running.calls]


def test_a_batch_handler_gets_the_waiting_messages_in_order(url, queue, batching):
    name = queue()
    sent = publish_numbered(url, name, 25)
    running = batching(Broker(url), [name], batch_size=10)
    running.wait_calls(25)
    assert handled_ids(running) == sent                        # the queue's order
    assert [m for batch in running.batches for m in batch] == sent
    assert all(1 <= len(batch) <= 10 for batch in running.batches)
    assert len(running.batches) < 25                           # waiting ones came together
    assert running.consumer.batch_prefetch == 20
    assert Broker(url).drain(name, timeout=0.05) == []         # all acked


def test_a_batch_is_acked_only_after_its_handler_returned(url, queue, batching, monkeypatch):
    name = queue()
    log: list = []
    record_acks(monkeypatch, log)
    started, release = threading.Event(), threading.Event()

    def handler(items):
        log.append(("start", [d.message_id for _, d in items]))
        started.set()
        assert release.wait(WAIT)
        log.append(("end", [d.message_id for _, d in items]))

    sent = publish_numbered(url, name, 3)
    running = batching(Broker(url), [name], batch_handler=handler)
    assert started.wait(WAIT)
    assert not [entry for entry in log if entry[0] == "ack"]   # the handler still runs
    release.set()
    running.wait_calls(3)
    assert all(acked(log, message_id) for message_id in sent)
    for message_id in sent:
        end = next(i for i, (what, ids) in enumerate(log) if what == "end" and message_id in ids)
        assert log.index(("ack", message_id)) > end


def test_a_bad_message_in_a_batch_is_dropped_alone(url, queue, batching, caplog, monkeypatch):
    name = queue()
    acks: list = []
    record_acks(monkeypatch, acks)
    with Broker(url) as broker:
        broker.publish(name, {"n": 1}, message_id="good-1")
        with broker.connection() as conn:
            kombu.Producer(conn).publish("{not json", exchange="", routing_key=name,
                                         serializer=None, content_type="text/plain",
                                         content_encoding="utf-8", message_id="garbage")
        broker.publish(name, {"n": 2}, message_id="good-2")
        broker.publish(name, {"bad": True, "token": "tok-secret-789"}, message_id="poison")
        broker.publish(name, {"n": 3}, message_id="good-3")

    def handler(items):
        return [ContractError("report message: field 'level' must be a string")
                if body.get("bad") else None for body, _ in items]

    with caplog.at_level(logging.ERROR, logger="fornace.common.consumer"):
        running = batching(Broker(url), [name], batch_handler=handler)
        running.wait_calls(4)
        assert all(acked(acks, m) for m in ("good-1", "garbage", "good-2", "poison", "good-3"))
    assert handled_ids(running) == ["good-1", "good-2", "poison", "good-3"]
    dropped = [r.getMessage() for r in caplog.records if "dropping" in r.getMessage()]
    assert len(dropped) == 2
    assert dropped[0].startswith(f"dropping bad message garbage on {name!r}: ")
    assert dropped[1] == (f"dropping bad message poison on {name!r}: "
                          "report message: field 'level' must be a string")
    assert "tok-secret-789" not in caplog.text
    assert Broker(url).drain(name, timeout=0.05) == []


def test_a_failing_batch_handler_requeues_the_whole_batch(url, queue, batching, caplog):
    name = queue()
    failed: list[list[str | None]] = []
    done: list[str | None] = []

    def handler(items):
        if not failed:
            failed.append([d.message_id for _, d in items])
            raise RuntimeError(f"database down, token was {items[0][0]['token']}")
        done.extend(d.message_id for _, d in items)

    with Broker(url) as broker:
        sent = [broker.publish(name, {"n": n, "token": "tok-secret-321"}, message_id=f"m{n}")
                for n in range(4)]
    with caplog.at_level(logging.ERROR, logger="fornace.common.consumer"):
        running = batching(Broker(url), [name], batch_handler=handler)
        running.wait_calls(4 + len(sent))
    with running.changed:
        assert running.changed.wait_for(lambda: len(done) == 4, WAIT)
    assert done == sent                          # each stored once, in the queue's order
    redelivered = [d.message_id for _, d in running.calls if d.redelivered]
    if url.startswith("amqp"):
        assert redelivered == failed[0]
    assert "RuntimeError: database down, token was ***" in caplog.text
    assert "tok-secret-321" not in caplog.text
    assert f"handler for messages {', '.join(failed[0][:5])}" in caplog.text or \
        f"handler for message {failed[0][0]} " in caplog.text
    assert Broker(url).drain(name, timeout=0.05) == []


def test_a_batch_handler_can_fail_only_some_messages(url, queue, batching, monkeypatch):
    """The handler stored m0 and m1, then failed at m2: only m2 and what
    follows come again."""
    name = queue()
    acks: list = []
    record_acks(monkeypatch, acks)
    stored: list[str | None] = []
    failures: list[str | None] = []

    def handler(items):
        outcomes: list[BaseException | None] = []
        for _, delivery in items:
            if delivery.message_id == "m2" and not failures or outcomes and outcomes[-1]:
                failures.append(delivery.message_id)
                outcomes.append(outcomes[-1] if outcomes and outcomes[-1]
                                else RuntimeError("deadlock"))
            else:
                stored.append(delivery.message_id)
                outcomes.append(None)
        return outcomes

    sent = publish_numbered(url, name, 5)
    running = batching(Broker(url), [name], batch_handler=handler)
    with running.changed:
        assert running.changed.wait_for(lambda: len(stored) == 5, WAIT), stored
    assert stored == sent
    assert failures[0] == "m2"
    assert all(acked(acks, m) for m in sent)
    assert acks.count(("ack", "m0")) == acks.count(("ack", "m1")) == 1   # not again
    assert Broker(url).drain(name, timeout=0.05) == []


def test_a_stop_lets_the_running_batch_finish_and_acks_it(url, queue):
    name = queue()
    stop = threading.Event()
    started, done = threading.Event(), []

    def handler(items):
        started.set()
        stop.wait()
        done.extend(d.message_id for _, d in items)

    sent = publish_numbered(url, name, 3)
    consumer = Consumer(Broker(url), {}, stop, batch_handlers={name: handler}, batch_size=2,
                        poll_interval=0.1)
    thread = threading.Thread(target=consumer.run)
    thread.start()
    assert started.wait(WAIT)
    stop.set()
    thread.join(WAIT)
    assert not thread.is_alive()
    left = Broker(url).drain(name, timeout=0.5)
    # what was handled is acked; the rest (given back) is still there
    assert sorted(done + [m for _, m in left]) == sent and done and len(done) <= 2


def test_batch_and_single_queues_in_one_consumer(url, queue):
    batched, single = queue("batched"), queue("single")
    got: list[tuple[str, list[Any]]] = []
    changed = threading.Condition()

    def record(kind: str, bodies: list[Any]) -> None:
        with changed:
            got.append((kind, bodies))
            changed.notify_all()

    publish_numbered(url, batched, 6)
    publish_numbered(url, single, 3, prefix="s")
    stop = threading.Event()
    consumer = Consumer(Broker(url), {single: lambda body, d: record("single", [body["n"]])},
                        stop, batch_handlers={batched: lambda items: record(
                            "batch", [body["n"] for body, _ in items])}, poll_interval=0.1)
    thread = threading.Thread(target=consumer.run)
    thread.start()
    try:
        with changed:
            assert changed.wait_for(lambda: sum(len(b) for _, b in got) == 9, WAIT), got
    finally:
        stop.set()
        thread.join(WAIT)
    assert [n for kind, b in got if kind == "batch" for n in b] == list(range(6))
    assert [b for kind, b in got if kind == "single"] == [[0], [1], [2]]


# ============================================================ memory only

def test_memory_tasks_exchange_routing():
    with Broker() as broker:
        broker.delete(TASKS)
        try:
            message_id = broker.publish(TASKS, {"id": "E1", "tenant_id": "t", "token": None})
            assert broker.drain(TASKS, timeout=0.1) == [
                ({"id": "E1", "tenant_id": "t", "token": None}, message_id)]
        finally:
            broker.delete(TASKS)


def test_kombu_queue_definitions():
    tasks = kombu_queue(TASKS)
    assert (tasks.name, tasks.exchange.name, tasks.exchange.type, tasks.routing_key) == (
        "tasks", "tasks", "direct", "tasks")
    assert tasks.durable and tasks.exchange.durable
    agent = kombu_queue("eenv-svc-unit")
    assert (agent.exchange.name, agent.routing_key, agent.durable) == (
        "", "eenv-svc-unit", True)


def test_broker_repr_masks_the_password():
    assert "s3cret" not in repr(Broker("amqp://user:s3cret@localhost:5672//"))
    assert repr(Broker()) == "Broker('memory://')"


def test_consumer_needs_handlers():
    with pytest.raises(ValueError, match="a consumer needs at least one queue handler"):
        Consumer(Broker(), {}, threading.Event())
    with pytest.raises(ValueError, match="both a handler and a batch handler: q"):
        Consumer(Broker(), {"q": lambda b, d: None}, threading.Event(),
                 batch_handlers={"q": lambda items: None})
    with pytest.raises(ValueError, match="batch_size"):
        Consumer(Broker(), {}, threading.Event(), batch_handlers={"q": lambda items: None},
                 batch_size=0)
    assert Consumer(Broker(), {}, threading.Event(), batch_handlers={"q": lambda items: None},
                    batch_size=100, prefetch=1).batch_prefetch == 200


# ========================================================== RabbitMQ only

@pytest.fixture
def rabbit(amqp_vhost) -> str:
    return amqp_vhost


@pytest.fixture
def rabbit_queue(rabbit):
    names: list[str] = []

    def make(prefix: str = "test") -> str:
        names.append(unique(prefix))
        return names[-1]

    yield make
    with Broker(rabbit) as cleaner:
        for name in names:
            cleaner.delete(name)


@pytest.fixture
def proxy(rabbit):
    parts = urlsplit(rabbit)
    running = Proxy((parts.hostname or "127.0.0.1", parts.port or 5672))
    yield running
    running.close()


def test_durable_queue_and_persistent_message_outlive_the_connection(rabbit, rabbit_queue):
    name = rabbit_queue()
    with Broker(rabbit) as broker:
        message_id = broker.publish(name, {"plan": 1})
    with kombu.Connection(rabbit) as conn:  # a new connection
        channel = conn.channel()
        with pytest.raises(conn.channel_errors, match="durable"):
            kombu.Queue(name, kombu.Exchange(""), routing_key=name,
                        durable=False)(channel).declare()
    with kombu.Connection(rabbit) as conn:
        message = kombu_queue(name)(conn.channel()).get(no_ack=False)
        assert message.properties["delivery_mode"] == 2
        assert message.properties["message_id"] == message_id
        assert message.content_type == "application/json"
        assert message.decode() == {"plan": 1}
        message.ack()


def test_a_message_not_acked_by_a_dead_consumer_comes_back(rabbit, rabbit_queue):
    name = rabbit_queue()
    with Broker(rabbit) as broker:
        message_id = broker.publish(name, {"plan": 2})
        with kombu.Connection(rabbit) as conn:
            message = kombu_queue(name)(conn.channel()).get(no_ack=False)
            assert message.properties["message_id"] == message_id
            # the connection closes without an ack
        assert broker.drain(name, timeout=WAIT, count=1) == [({"plan": 2}, message_id)]


def test_a_handler_cut_off_from_the_broker_is_redelivered(rabbit, rabbit_queue, proxy,
                                                          consumers):
    """The ack is lost with the connection: the message goes to another consumer."""
    name = rabbit_queue()
    started, release = threading.Event(), threading.Event()

    def slow(body, delivery):
        started.set()
        assert release.wait(WAIT)

    consumers(Broker(proxy.url(rabbit)), [name], slow)
    with Broker(rabbit) as broker:
        message_id = broker.publish(name, {"deploy": "E1"})
    assert started.wait(WAIT)
    proxy.refusing = True  # the first consumer stays away
    proxy.cut()
    second = consumers(Broker(rabbit), [name])
    calls = second.wait_calls(1)
    assert [(b, d.message_id, d.redelivered) for b, d in calls] == [
        ({"deploy": "E1"}, message_id, True)]
    release.set()


def test_the_consumer_reconnects_after_the_broker_went_away(rabbit, rabbit_queue, proxy,
                                                            consumers):
    name = rabbit_queue()
    running = consumers(Broker(proxy.url(rabbit)), [name])
    with Broker(rabbit) as broker:
        broker.publish(name, {"n": 1}, message_id="one")
        running.wait_calls(1)
        proxy.cut()
        wait_for(lambda: not running.consumer.ready.is_set(), timeout=WAIT)
        broker.publish(name, {"n": 2}, message_id="two")
    with running.changed:  # after the reconnection backoff (0.5 s)
        assert running.changed.wait_for(
            lambda: "two" in [d.message_id for _, d in running.calls], WAIT)
    # "one" comes again if the cut took its ack with it: at least once
    assert [d.message_id for _, d in running.calls][-1] == "two"
    assert {d.message_id for _, d in running.calls} == {"one", "two"}


def test_a_failed_batch_keeps_the_queues_order_on_rabbitmq(rabbit, rabbit_queue, batching):
    """RabbitMQ puts a requeued message back at its place: the failed batch and
    what came after it (already here, given back behind it) come again in order."""
    name = rabbit_queue()
    stored: list[str | None] = []
    failed = threading.Event()

    def handler(items):
        ids = [d.message_id for _, d in items]
        if "m12" in ids and not failed.is_set():
            failed.set()
            at = ids.index("m12")
            stored.extend(ids[:at])
            error = RuntimeError("deadlock")
            return [None] * at + [error] * (len(ids) - at)
        stored.extend(ids)
        return None

    sent = publish_numbered(rabbit, name, 30)
    running = batching(Broker(rabbit), [name], batch_handler=handler, batch_size=5)
    with running.changed:
        assert running.changed.wait_for(lambda: len(stored) >= 30, WAIT), stored
    assert failed.is_set() and stored == sent


@pytest.mark.parametrize("heartbeat", [0, 2], ids=["no-heartbeat", "heartbeat"])
def test_an_inbox_reconnects_after_the_broker_went_away(rabbit, rabbit_queue, proxy,
                                                        heartbeat):
    """(With a heartbeat: regression of issue 29, a cluster node killed under a
    job: the heartbeat check of the dead connection raised kombu's
    OperationalError out of the inbox and failed the job's plans.)"""
    name = rabbit_queue("inbox")
    with Broker(proxy.url(rabbit)).inbox(name, heartbeat=heartbeat) as inbox, \
            Broker(rabbit) as publisher:
        publisher.publish(name, {"n": 1}, "before")
        assert inbox.get(timeout=WAIT) == ({"n": 1}, "before")
        proxy.refusing = True   # a node gone: the reconnection fails for a while
        proxy.cut()
        assert inbox.get(timeout=1.0) is None
        proxy.refusing = False
        publisher.publish(name, {"n": 2}, "after")
        got = []

        def after_came() -> bool:
            received = inbox.get(timeout=1.0)
            if received is not None:
                got.append(received)
            return "after" in [m for _, m in got]
        wait_for(after_came, "the message sent after the cut", timeout=WAIT,
                 explain=lambda: str(got))
        # an ack lost with the connection means "before" may come again (at least once)
        assert got[-1] == ({"n": 2}, "after")
        assert set(m for _, m in got) <= {"before", "after"}


def test_publish_retries_through_a_lost_connection(rabbit, rabbit_queue, proxy):
    name = rabbit_queue()
    with Broker(proxy.url(rabbit)) as broker:
        broker.publish(name, {"n": 1}, message_id="one")
        proxy.cut()
        broker.publish(name, {"n": 2}, message_id="two")  # reconnects and sends
    assert Broker(rabbit).drain(name, timeout=WAIT, count=2) == [
        ({"n": 1}, "one"), ({"n": 2}, "two")]


def test_two_consumers_on_one_queue_share_the_messages(rabbit, rabbit_queue, consumers):
    name = rabbit_queue()

    def work(body, delivery):   # held until the other consumer has a message too
        wait_for(lambda: one.calls and two.calls, "both consumers to have a message",
                 timeout=WAIT)

    one = consumers(Broker(rabbit), [name], work)
    two = consumers(Broker(rabbit), [name], work)
    with Broker(rabbit) as broker:
        sent = {broker.publish(name, {"n": n}) for n in range(10)}
    wait_for(lambda: len(one.calls) + len(two.calls) >= 10, timeout=WAIT)
    got = [d.message_id for _, d in one.calls + two.calls]
    assert sorted(got) == sorted(sent)  # each message exactly once
    assert one.calls and two.calls      # and both had some


def test_a_long_handler_keeps_the_heartbeats_going(rabbit, rabbit_queue, consumers,
                                                   monkeypatch):
    """A deployment can last longer than two heartbeats without losing its message."""
    name = rabbit_queue()
    acks: list = []
    record_acks(monkeypatch, acks)
    finished = threading.Event()
    beats: dict[int, int] = {}      # heartbeats sent, by connection
    send = amqp.Connection.send_heartbeat
    monkeypatch.setattr(amqp.Connection, "send_heartbeat", lambda self: (
        beats.__setitem__(id(self), beats.get(id(self), 0) + 1), send(self))[1])

    def deploy(body, delivery):
        # RabbitMQ drops a connection silent for 3 s at heartbeat=1: the handler
        # lasts eight heartbeats (one each 0.5 s) of its connection (checked:
        # this test fails when the consumer does not pump while waiting)
        seen = dict(beats)
        wait_for(lambda: any(n >= seen.get(c, 0) + 8 for c, n in beats.items()),
                 "eight heartbeats while the handler runs", timeout=WAIT)
        finished.set()

    running = consumers(Broker(rabbit, heartbeat=1), [name], deploy, poll_interval=0.2)
    with Broker(rabbit) as broker:
        broker.publish(name, {"deploy": 1}, message_id="long")
        assert finished.wait(WAIT)
        assert acked(acks, "long")     # the ack came (a lost connection would redeliver)
        assert [d.message_id for _, d in running.calls] == ["long"]
        assert running.consumer.ready.is_set()
        assert broker.drain(name, timeout=0.1) == []  # acked


def test_the_tasks_exchange_routes_to_the_tasks_queue(rabbit):
    """``tasks`` is a shared name: only our own message is taken out of it."""
    with Broker(rabbit) as broker:
        message_id = broker.publish(TASKS, {"id": "E-test", "tenant_id": "t", "token": None})
    with kombu.Connection(rabbit) as conn:
        channel = conn.channel()
        queue = kombu_queue(TASKS)(channel)
        found, others = None, []

        def ours() -> Any:
            message = queue.get(no_ack=False)
            if message is not None and message.properties.get("message_id") != message_id:
                others.append(message)
                return None
            return message
        found = wait_for(ours, timeout=WAIT, interval=0.02)
        for other in others:
            other.requeue()
        assert found is not None
        assert found.delivery_info["exchange"] == "tasks"
        assert found.delivery_info["routing_key"] == "tasks"
        assert found.decode() == {"id": "E-test", "tenant_id": "t", "token": None}
        found.ack()
        # the exchange is a durable direct one: declaring it otherwise fails
        with pytest.raises(conn.channel_errors, match="inequivalent arg 'type'"):
            kombu.Exchange(TASKS, "fanout", durable=True)(conn.channel()).declare()


def test_confirms_are_on_for_amqp():
    rabbit = "amqp://guest:guest@127.0.0.1:5672//"
    assert Broker(rabbit).connection().transport_options.get("confirm_publish") is True
    assert "confirm_publish" not in Broker(rabbit, confirm=False).connection().transport_options
    assert broker_module.RETRY_POLICY["max_retries"] >= 10


# ======================================================= the folder broker's consumers

def test_folder_broker_counts_live_consumers_and_forgets_killed_ones(tmp_path):
    """The local cloud without RabbitMQ tells a gone agent by its consumer
    count too: a consumer killed with -9 leaves its file, which no longer counts."""
    import signal
    import subprocess
    import sys

    url = f"filesystem://{tmp_path}/broker"
    listener = subprocess.Popen([sys.executable, "-c", (
        "import sys, threading\n"
        "from fornace.common.broker import Broker\n"
        f"broker = Broker({url!r})\n"
        "with broker.inbox('agent-q') as inbox:\n"
        "    inbox.open()\n"
        "    print('listening', flush=True)\n"
        "    threading.Event().wait()\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "listening"
        broker = Broker(url)
        assert broker.consumers(["agent-q", "other"]) == {"agent-q": 1, "other": 0}
        listener.send_signal(signal.SIGKILL)
        listener.wait(timeout=10)
        assert broker.consumers(["agent-q"]) == {"agent-q": 0}
    finally:
        listener.kill()
        listener.wait()


def test_folder_broker_delete_removes_the_queues_messages(tmp_path):
    url = f"filesystem://{tmp_path}/broker"
    with Broker(url) as broker:
        broker.publish("gone-q", {"n": 1}, "m1")
        broker.publish("kept-q", {"n": 2}, "m2")
        broker.delete("gone-q")
        assert broker.drain("gone-q", timeout=0.2) == []
        assert broker.drain("kept-q", timeout=0.5) == [({"n": 2}, "m2")]


def test_connect_opens_the_publishing_channel_and_declares_the_queues(rabbit):
    """The agent connects at start so that its first answer waits for no handshake."""
    broker = Broker(rabbit)
    try:
        broker.connect(["answers-q"])
        assert broker._connection is not None and broker._connection.connected
        conn = broker.connection(heartbeat=0)
        try:   # a passive declare fails for a queue that does not exist
            declared = conn.channel().queue_declare(queue="answers-q", passive=True)
            assert declared.message_count == 0
        finally:
            conn.release()
        broker.publish("answers-q", {"n": 1}, "m1")
        assert broker.drain("answers-q", timeout=5, count=1) == [({"n": 1}, "m1")]
    finally:
        broker.close()


_FROZEN_INBOX = r"""
import os, signal, sys
from pathlib import Path
from fornace.common.broker import Broker
url, queue, heartbeat, marker = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
inbox = Broker(url).inbox(queue, prefetch=10, heartbeat=heartbeat)
inbox.open()
while len(inbox._buffer) < 3:          # pushed to it, none returned (so none acked)
    inbox._conn.drain_events(timeout=30)
marker.write_text("holding")
os.kill(os.getpid(), signal.SIGSTOP)   # a frozen conductor waiting for its answers
"""


def test_answers_pushed_to_a_frozen_inbox_go_to_the_other_subscriber(rabbit, rabbit_queue,
                                                                     tmp_path):
    """Regression (issue 29, found by tools/chaos.py freeze-conductor with plans
    running): the answers RabbitMQ had pushed to a frozen conductor's results
    subscription stayed there until it woke, so the conductor that took its job
    over waited for them.  With a heartbeat the broker drops the frozen
    subscription and gives its unreturned messages to the other subscriber."""
    import os
    import signal
    import subprocess
    import sys
    name = rabbit_queue("frozen")
    with Broker(rabbit) as publisher:
        for number in range(3):
            publisher.publish(name, {"n": number}, f"answer-{number}")
    marker = tmp_path / "holding"
    frozen = subprocess.Popen([sys.executable, "-c", _FROZEN_INBOX, rabbit, name, "2",
                               str(marker)])
    try:
        wait_for(marker.exists, "the inbox to hold the three answers and freeze")
        taken: list[str | None] = []
        with Broker(rabbit).inbox(name) as successor:
            def three() -> bool:
                got = successor.get(timeout=0.5)
                if got is not None:
                    taken.append(got[1])
                return len(taken) == 3
            wait_for(three, "the frozen inbox's answers to come to the other subscriber",
                     timeout=60)
        assert sorted(taken) == ["answer-0", "answer-1", "answer-2"]
    finally:
        os.kill(frozen.pid, signal.SIGKILL)
        frozen.wait()


def test_a_publish_on_a_failover_url_waits_for_a_node_rather_than_failing_fast(
        rabbit, rabbit_queue):
    """Regression (issue 29, tools/chaos.py --cluster kill-rabbit-node): with
    several hosts kombu switches host without waiting, so its retries were
    spent in milliseconds while the cluster elected new queue leaders, and
    the job's plans failed with OperationalError.  A publish now keeps trying
    (with backoff) for as long as a one-host publish would."""
    name = rabbit_queue("failover")
    parts = urlsplit(rabbit)
    target = (parts.hostname or "127.0.0.1", parts.port or 5672)
    first, second = Proxy(target), Proxy(target)
    first.refusing = second.refusing = True            # no node takes connections
    broker = Broker(f"{first.url(rabbit)};{second.url(rabbit)}",
                    retry_policy={"max_retries": 3})
    failure: list[BaseException] = []

    def publish() -> None:
        try:
            broker.publish(name, {"n": 1}, "m-1")
        except BaseException as exc:  # noqa: BLE001 -- the test reports it
            failure.append(exc)
    try:
        published = threading.Thread(target=publish, daemon=True)
        published.start()
        # kombu's own three retries over both hosts take milliseconds: wait past them
        wait_for(lambda: failure or first.refused + second.refused > 8,
                 "the publish to try the hosts several times")
        second.refusing = False                          # a node comes back
        published.join(60)
        assert not published.is_alive() and failure == [], failure
        with Broker(rabbit) as reader:
            assert reader.drain(name, timeout=WAIT, count=1) == [({"n": 1}, "m-1")]
    finally:
        broker.close()
        first.close()
        second.close()
