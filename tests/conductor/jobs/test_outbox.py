"""A job's outbox: its messages in ordered batches, nothing lost when the broker fails."""
from __future__ import annotations

import logging
import threading
import uuid

import pytest

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.jobs.outbox import Outbox, runs
from cutproxy import proxy_to
from waiting import wait_for

REPORTS, RESULTS = "reports", "results"


class Sender:
    """Records each batch (queue, ids); fails the calls it is told to."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[str]]] = []
        self.failing = 0
        self.lock = threading.Lock()

    def __call__(self, queue, messages) -> None:
        with self.lock:
            if self.failing:
                self.failing -= 1
                raise ConnectionError("the broker went away")
            self.batches.append((queue, [message_id for _, message_id in messages]))

    def ids(self, queue: str | None = None) -> list[str]:
        with self.lock:
            return [i for q, ids in self.batches if queue in (None, q) for i in ids]


def test_messages_wait_for_their_batch_then_go_in_order_one_send_per_queue():
    sender = Sender()
    outbox = Outbox(sender, "job1", batch_seconds=3600)
    for n in range(3):
        outbox.put(REPORTS, {"n": n}, f"r{n}")
    outbox.put(RESULTS, {"e": 1}, "e1")
    outbox.put(REPORTS, {"n": 3}, "r3")
    assert sender.batches == []            # nothing is due yet
    outbox.flush()
    assert sender.batches == [(REPORTS, ["r0", "r1", "r2", "r3"]), (RESULTS, ["e1"])]


def test_a_batch_goes_by_itself_shortly_after_its_first_message():
    sender = Sender()
    outbox = Outbox(sender, "job1", batch_seconds=0.02)
    outbox.put(REPORTS, {"n": 0}, "r0")
    outbox.put(REPORTS, {"n": 1}, "r1")
    wait_for(lambda: sender.ids() == ["r0", "r1"], "the timer's batch")
    outbox.put(REPORTS, {"n": 2}, "r2")    # a later batch: the timer starts again
    wait_for(lambda: sender.ids() == ["r0", "r1", "r2"], "the next batch")


def test_a_full_batch_goes_at_once():
    sender = Sender()
    outbox = Outbox(sender, "job1", batch_seconds=3600, batch_size=3)
    for n in range(7):
        outbox.put(REPORTS, {"n": n}, f"r{n}")
    assert sender.batches == [(REPORTS, ["r0", "r1", "r2"]), (REPORTS, ["r3", "r4", "r5"])]


def test_the_result_goes_after_everything_put_before_it():
    sender = Sender()
    outbox = Outbox(sender, "job1", batch_seconds=3600)
    outbox.put(RESULTS, {"e": 1}, "e1")
    outbox.put(REPORTS, {"n": 0}, "r0")
    outbox.put(RESULTS, {"t": 1}, "trace")
    outbox.finish(RESULTS, {"result": 1}, "result")
    assert sender.batches == [(REPORTS, ["r0"]), (RESULTS, ["e1", "trace", "result"])]


def test_runs_keep_each_queue_in_order_and_a_final_message_last():
    entry = lambda queue, name, final=False: (queue, {}, name, final)   # noqa: E731
    batch = [entry("a", "a1"), entry("b", "b1"), entry("a", "a2"), entry("b", "end", True),
             entry("a", "a3")]
    assert [(q, [e[2] for e in es]) for q, es in runs(batch)] == [
        ("a", ["a1", "a2"]), ("b", ["b1", "end"]), ("a", ["a3"])]


def test_a_batch_the_broker_did_not_take_goes_again_with_the_next(caplog):
    sender = Sender()
    outbox = Outbox(sender, "job1", batch_seconds=3600)
    outbox.put(REPORTS, {"n": 0}, "r0")
    outbox.put(RESULTS, {"e": 0}, "e0")
    sender.failing = 1
    with caplog.at_level(logging.WARNING):
        outbox.flush()                        # a report that cannot be sent ends nothing
    assert "kept to be sent again" in caplog.text
    outbox.put(REPORTS, {"n": 1}, "r1")
    outbox.finish(RESULTS, {"result": 1}, "result")
    assert sender.batches == [(REPORTS, ["r0", "r1"]), (RESULTS, ["e0", "result"])]


def test_only_what_was_not_confirmed_goes_again():
    sender = Sender()
    outbox = Outbox(sender, "job1", batch_seconds=3600)
    outbox.put(REPORTS, {"n": 0}, "r0")
    outbox.put(RESULTS, {"e": 0}, "e0")
    calls = []

    def second_fails(queue, messages):
        calls.append(queue)
        if len(calls) == 2:
            raise ConnectionError("gone")
        sender(queue, messages)
    outbox.send = second_fails
    outbox.flush()
    outbox.flush()
    assert sender.batches == [(REPORTS, ["r0"]), (RESULTS, ["e0"])]


def test_a_result_the_broker_does_not_take_raises_and_close_sets_it_aside(caplog):
    sender = Sender()
    outbox = Outbox(sender, "job1", batch_seconds=3600)
    outbox.put(REPORTS, {"n": 0}, "r0")
    sender.failing = 3
    with pytest.raises(ConnectionError):
        outbox.finish(RESULTS, {"result": 1}, "result")
    with caplog.at_level(logging.WARNING):
        outbox.close()                        # tries once more, then sets them aside
    assert "2 message(s) set aside unsent" in caplog.text and "r0, result" in caplog.text
    outbox.flush()
    assert sender.batches == []               # never retried for ever


def test_while_the_broker_is_away_the_oldest_beyond_the_bound_are_set_aside(caplog):
    sender = Sender()
    outbox = Outbox(sender, "job1", batch_seconds=3600, max_kept=5)
    for n in range(8):
        outbox.put(REPORTS, {"n": n}, f"r{n}")
    sender.failing = 1
    with caplog.at_level(logging.WARNING):
        outbox.flush()
    assert "the oldest 3 set aside (r0, r1, r2)" in caplog.text
    outbox.flush()
    assert sender.ids() == ["r3", "r4", "r5", "r6", "r7"]


# ================================================= through RabbitMQ

def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_a_job_s_reports_are_on_the_broker_before_its_result(amqp_vhost):
    reports, results = unique("reports"), unique("results")
    with Broker(amqp_vhost) as broker:
        outbox = Outbox(broker.publish_many, "job1", batch_seconds=0.01, batch_size=7)
        for n in range(50):
            outbox.put(reports, contract.report_body(n, "unit", f"step {n}", "info", "env1"),
                       f"job1-report-{n}")
            if n % 10 == 0:
                outbox.put(results, {"kind": "tasks", "n": n}, f"job1-events-{n}")
        outbox.finish(results, {"result": "done"}, "job1")
        outbox.close()
        with Broker(amqp_vhost) as reader:
            got_results = reader.drain(results, timeout=1)
            # once the result is there, every report is: nothing waits behind it
            got_reports = reader.drain(reports, timeout=0)
        broker.delete(reports)
        broker.delete(results)
    assert [i for _, i in got_results] == [f"job1-events-{n}" for n in range(0, 50, 10)] + ["job1"]
    assert [i for _, i in got_reports] == [f"job1-report-{n}" for n in range(50)]


def test_nothing_is_lost_when_the_connection_breaks_under_a_batch(amqp_vhost, monkeypatch):
    """The connection is cut while batches wait for their confirms: they go
    again (same ids) and the consumer sees every id, in order (duplicates
    allowed: the API stores by message id)."""
    proxy = proxy_to(amqp_vhost)
    reports, results = unique("reports"), unique("results")
    waits = []
    await_confirms = Broker._await_confirms

    def cut_now_and_then(self, confirmed, tags):
        waits.append(tags)
        if len(waits) in (2, 5):
            proxy.cut()
        return await_confirms(self, confirmed, tags)
    monkeypatch.setattr(Broker, "_await_confirms", cut_now_and_then)
    sent = [f"job1-report-{n}" for n in range(100)]
    try:
        with Broker(proxy.url(amqp_vhost), retry_policy={"interval_start": 0.1}) as broker:
            outbox = Outbox(broker.publish_many, "job1", batch_seconds=3600, batch_size=10)
            for message_id in sent:
                outbox.put(reports, {"id": message_id, "text": "x", "level": "info",
                                     "environment_id": "env1"}, message_id)
            outbox.finish(results, {"result": "done"}, "job1")
            outbox.close()
    finally:
        proxy.close()
    assert len(waits) >= 13                   # 10 batches, 1 result, 2 sent again
    with Broker(amqp_vhost) as reader:
        got: list = []
        # drained until every id came (a loaded machine may pause longer than a drain waits)
        wait_for(lambda: got.extend(i for _, i in reader.drain(reports, timeout=0.5))
                 or set(got) >= set(sent), "every report",
                 explain=lambda: f"missing {sorted(set(sent) - set(got))[:5]}")
        got.extend(i for _, i in reader.drain(reports, timeout=0.2))
        assert [i for _, i in reader.drain(results, timeout=0.5)] == ["job1"]
        reader.delete(reports)
        reader.delete(results)
    assert set(got) == set(sent)
    assert list(dict.fromkeys(got)) == sent   # first arrivals in order
