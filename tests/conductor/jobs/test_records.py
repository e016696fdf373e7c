"""Task records: the events they send, change ids and times."""
from __future__ import annotations

import datetime

from fornace.common import contract
from fornace.conductor.jobs.records import ChangeIds, JobRecorder, now_iso


def recorder() -> tuple[JobRecorder, list[dict]]:
    events: list[dict] = []
    return JobRecorder("env1", "job1", lambda body, message_id: events.append(body),
                       mask=lambda text: text.replace("s3cret", "***")), events


def test_a_task_that_starts_at_once_sends_one_event_with_its_start():
    made, events = recorder()
    task = made.task("u1", "web1", "Deploy", "new", status="running", digest="d1")
    assert len(events) == 1
    sent = contract.parse_job_event(events[0]).task
    assert sent["status"] == "running" and sent["started"] == task.started
    assert sent["finished"] is None and sent["digest"] == "d1"
    task.finish("ok", "ok: done")
    assert [contract.parse_job_event(e).task["status"] for e in events] == ["running", "ok"]


def test_a_task_that_ended_before_it_ran_sends_one_event_with_its_summary_masked():
    made, events = recorder()
    made.task("u1", "web1", "Deploy", "unchanged", status="skipped",
              summary="same inputs; password s3cret")
    assert len(events) == 1
    sent = contract.parse_job_event(events[0]).task
    assert sent["status"] == "skipped" and sent["finished"] and sent["started"] is None
    assert sent["summary"] == "same inputs; password ***"


def test_pending_and_planned_tasks_have_no_times():
    made, events = recorder()
    for status in ("pending", "planned"):
        made.task("u1", "web1", "Deploy", "new", status=status)
    assert all(contract.parse_job_event(e).task["started"] is None
               and contract.parse_job_event(e).task["finished"] is None for e in events)


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
