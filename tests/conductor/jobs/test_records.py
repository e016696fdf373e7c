"""Task records: the events they send, change ids and times."""
from __future__ import annotations

import datetime
import threading

import pytest

from fornace.common import contract
from fornace.conductor.jobs.records import ChangeIds, JobRecorder, now_iso, result_summary


def recorder(**options) -> tuple[JobRecorder, list[dict]]:
    """A recorder sending every change at once (unless ``options`` say otherwise)."""
    events: list[dict] = []
    options.setdefault("batch_seconds", 0)
    return JobRecorder("env1", "job1", lambda body, message_id: events.append(body),
                       mask=lambda text: text.replace("s3cret", "***"), **options), events


def tasks_of(events: list[dict]) -> list[dict]:
    """The task changes of ``tasks`` events, in the order sent."""
    return [task for event in events for task in contract.parse_job_event(event).tasks]


def test_a_task_that_starts_at_once_sends_one_event_with_its_start():
    made, events = recorder()
    task = made.task("u1", "web1", "Deploy", "new", status="running", digest="d1")
    assert len(events) == 1
    [sent] = tasks_of(events)
    assert sent["status"] == "running" and sent["started"] == task.started
    assert sent["finished"] is None and sent["digest"] == "d1"
    task.finish("ok", "ok: done")
    assert [t["status"] for t in tasks_of(events)] == ["running", "ok"]


def test_a_task_that_ended_before_it_ran_sends_one_event_with_its_summary_masked():
    made, events = recorder()
    made.task("u1", "web1", "Deploy", "unchanged", status="skipped",
              summary="same inputs; password s3cret")
    assert len(events) == 1
    [sent] = tasks_of(events)
    assert sent["status"] == "skipped" and sent["finished"] and sent["started"] is None
    assert sent["summary"] == "same inputs; password ***"


def test_pending_and_planned_tasks_have_no_times():
    made, events = recorder()
    for status in ("pending", "planned"):
        made.task("u1", "web1", "Deploy", "new", status=status)
    assert all(t["started"] is None and t["finished"] is None for t in tasks_of(events))


def test_now_iso_is_utc_iso_8601_to_the_millisecond_and_follows_the_clock():
    before = datetime.datetime.now(datetime.timezone.utc)
    stamps = [now_iso() for _ in range(2000)]
    after = datetime.datetime.now(datetime.timezone.utc)
    parsed = [datetime.datetime.fromisoformat(s) for s in stamps]
    assert all(len(s) == len("2026-01-01T00:00:00.000+00:00") for s in stamps)
    assert parsed == sorted(parsed)
    assert before - datetime.timedelta(milliseconds=1) <= parsed[0] and parsed[-1] <= after


def test_change_ids_grow_within_a_millisecond_and_when_the_clock_steps_back():
    times = iter([1.0, 1.0, 1.0, 0.5, 2.0])
    ids = ChangeIds(clock=lambda: next(times))
    made = [ids.next() for _ in range(5)]
    assert made == sorted(made) and len(set(made)) == 5
    assert made[3][:10] == made[0][:10] and made[4][:10] > made[0][:10]


def test_changes_wait_for_a_flush_and_a_task_changed_twice_goes_once_merged():
    made, events = recorder(batch_seconds=3600)
    first = made.task("u1", "web1", "Deploy", "new", status="running")
    first.add_log(["line 1"])
    first.add_log(["line 2", "line 3"])
    first.finish("error", "exit 1")
    second = made.task("u2", "web2", "Deploy", "new", status="running")
    assert events == []
    made.flush()
    assert len(events) == 1 and contract.parse_job_event(events[0]).kind == "tasks"
    merged, other = tasks_of(events)
    assert merged["change_id"] == first.change_id and other["change_id"] == second.change_id
    assert merged["status"] == "error" and merged["summary"] == "exit 1"
    assert merged["started"] == first.started and merged["finished"] == first.finished
    assert merged["log"] == ["line 1", "line 2", "line 3"]
    made.flush()
    assert len(events) == 1   # nothing new: nothing sent


def test_a_full_batch_goes_at_once():
    made, events = recorder(batch_seconds=3600, batch_size=3)
    for n in range(7):
        made.task(f"u{n}", f"web{n}", "Deploy", "new", status="running")
    assert [len(contract.parse_job_event(e).tasks) for e in events] == [3, 3]
    made.flush()
    assert len(tasks_of(events)) == 7


def test_a_batch_goes_by_itself_soon_after_its_first_change():
    sent = threading.Event()
    events: list[dict] = []

    def publish(body, message_id):
        events.append(body)
        sent.set()

    made = JobRecorder("env1", "job1", publish, batch_seconds=0.05)
    made.task("u1", "web1", "Deploy", "new", status="running")
    assert sent.wait(10), "the batch was never sent without a flush"
    assert [t["status"] for t in tasks_of(events)] == ["running"]


def test_job_state_sends_the_tasks_first():
    made, events = recorder(batch_seconds=3600)
    made.task("u1", "web1", "Deploy", "new", status="running")
    made.job_state("refused", "locked")
    assert [contract.parse_job_event(e).kind for e in events] == ["tasks", "job"]


def test_a_failing_publisher_loses_progress_not_the_job(caplog):
    def publish(body, message_id):
        raise ConnectionError("broker down")

    made = JobRecorder("env1", "job1", publish, batch_seconds=0)
    made.task("u1", "web1", "Deploy", "new", status="running").finish("ok")
    assert made.counts() == {"ok": 1}
    assert "could not send the changes of 1 task(s)" in caplog.text


@pytest.mark.parametrize("value, summary", [
    ([{"IsException": False, "Result": ["serving on 8080", "pid 12"]}], "ok: serving on 8080; pid 12"),
    ([{"IsException": False, "Result": "done"}], "ok: done"),
    ([{"IsException": False, "Result": {"port": 80, "up": True}}], 'ok: {"port":80,"up":true}'),
    ([{"IsException": False, "Result": [1, "a"]}], 'ok: [1,"a"]'),
    ([{"IsException": False, "Result": None}], "ok"),
    ([{"IsException": False, "Result": []}], "ok"),
    ([], "ok"),
])
def test_a_result_summary_is_text_not_a_python_repr(value, summary) -> None:
    assert result_summary(True, value) == summary


def test_a_failure_summary_joins_the_messages() -> None:
    assert result_summary(False, [{"messages": ["boom", "exit 2"]}, {"messages": ["x"]}]) == \
        "boom; exit 2; x"
    assert result_summary(False, []) == "failed"


def test_change_ids_stay_unique_and_growing_past_a_full_counter() -> None:
    ids = ChangeIds(clock=lambda: 1_700_000_000.0)   # a clock that stands still
    made = [ids.next() for _ in range(32 ** 3 + 50)]
    assert len(set(made)) == len(made)
    assert made == sorted(made)
    assert all(len(i) == 13 for i in made)


def test_one_bad_record_in_a_batch_loses_none_of_the_good_ones(caplog):
    """A unit id the contract refuses (300 characters, from before the API
    checked ids) must not take the batch's other tasks and nodes with it: the
    batch falls back one by one, the bad ones set aside with the reason logged."""
    made, events = recorder(batch_seconds=3600)
    bad_unit = "u" * 300
    made.task("u1", "web1", "Deploy", "new", status="running")
    made.task(bad_unit, "web2", "Deploy", "new", status="running")
    made.task("u3", "web3", "Deploy", "new", status="running")
    made.node({"id": "u1", "status": {"state": "configuring", "local": "ok"}})
    made.node({"id": bad_unit, "status": {"state": "configuring", "local": "ok"}})
    made.flush()
    sent = tasks_of(events)
    assert [t["target"] for t in sent] == ["u1", "u3"]
    assert [list(contract.parse_job_event(e).nodes or {}) for e in events] == [["u1"]]
    assert "set aside task" in caplog.text and ".target' must be an id" in caplog.text
    assert "set aside node" in caplog.text and bad_unit not in caplog.text
