"""The job events store (:mod:`fornace.api.stores.jobevents`): task rows
upserted, refusals, what the contract refuses set aside, what the table cannot
hold dropped alone, batches storing what one by one stores -- on SQLite and on
the real PostgreSQL."""
from __future__ import annotations

import copy

import pytest

from fornace.common import contract
from fornace.conductor.jobs.lock import JobLock
from test_jobs_api import _api, action, deployed, event, finish, new_env
from apikit import web_server


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    yield from _api(request.param, tmp_path)


def test_task_events_are_upserted_and_log_lines_appended(api):
    env_id, _ = deployed(api)
    job = action(api, env_id, "check", {}).json()
    event(api, env_id, job["id"], "A002", target="u2", target_name="web2",
          operation="check", reason="check", status="pending")
    event(api, env_id, job["id"], "A001", target="u1", target_name="web1", operation="check",
          reason="check", status="running", started="2024-05-01T12:00:00Z",
          log=["connecting", "password is P@ssw0rd-web"])
    event(api, env_id, job["id"], "A001", status="ok", finished="2024-05-01T12:00:07+02:00",
          summary="web1 answers, P@ssw0rd-web works", digest="d1", log=["done"])
    shown = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert [t["change_id"] for t in shown["tasks"]] == ["A001", "A002"]
    first = shown["tasks"][0]
    assert first == {"change_id": "A001", "target": "u1", "target_name": "web1",
                     "operation": "check", "reason": "check", "status": "ok",
                     "started": "2024-05-01T12:00:00", "finished": "2024-05-01T10:00:07",
                     "summary": "web1 answers, *** works", "digest": "d1",
                     "log": ["connecting", "password is ***", "done"]}
    assert shown["tasks"][1]["log"] == [] and shown["tasks"][1]["status"] == "pending"
    assert shown["task_counts"] == {"ok": 1, "pending": 1}
    listed = api.client.get(f"/environments/{env_id}/jobs").json()["jobs"]
    assert listed[0]["task_counts"] == {"ok": 1, "pending": 1}
    assert listed[1]["task_counts"] == {}


def test_unknown_and_malformed_events_are_dropped(api, caplog):
    env_id, model = deployed(api)
    job = action(api, env_id, "check", {}).json()
    caplog.set_level("INFO", logger="fornace.api.stores.jobevents")
    event(api, env_id, "no-such-job", "B001", status="ok")
    event(api, "other-env", job["id"], "B002", status="ok")  # a job of another environment
    # what the contract refuses is a ContractError (the consumer drops it, never retried)
    for body, words in ((b"not json", "invalid JSON"),
                        ({"kind": "task"}, "field 'environment_id' is missing"),
                        ([1], "must be a JSON object"),
                        ({"environment_id": env_id, "job_id": job["id"], "kind": "task",
                          "task": {"change_id": "B003", "status": "exploded"}},
                         "field 'task.status' must be one of")):
        with pytest.raises(contract.ContractError, match=words):
            api.store.job_events.apply(body, "bad")
    # what the contract lets through but the table cannot hold: dropped, said why
    for number, body in enumerate(({"environment_id": env_id, "job_id": job["id"], "kind": "task",
                  "task": {"change_id": "B004", "started": "yesterday"}},
                 {"environment_id": env_id, "job_id": job["id"], "kind": "task",
                  "task": {"change_id": "B" * 65}},
                 {"environment_id": env_id, "job_id": job["id"], "kind": "task",
                  "task": {"change_id": "B005", "reason": "r" * 65}},
                 {"environment_id": env_id, "job_id": "x\x00" * 40, "kind": "task",
                  "task": {"change_id": "B006"}})):
        api.store.job_events.apply(body, f"bad-{number}")   # ids of their own: one would
        # be taken for the other, sent again
    assert "unknown job 'no-such-job'" in caplog.text
    assert "not an ISO 8601 time" in caplog.text and "longer than 64" in caplog.text
    assert api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()["tasks"] == []
    event(api, env_id, job["id"], "B007", status="ok", summary="nul \x00 here")
    tasks = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()["tasks"]
    assert [t["summary"] for t in tasks] == ["nul \ufffd here"]


def test_a_refused_job_ends_and_keeps_why(api):
    env_id, model = deployed(api)
    job = action(api, env_id, "check", {}).json()
    api.store.job_events.apply(contract.job_event_body(
        env_id, job["id"], "refused",
        f"environment {env_id} is locked by job j0 (conductor c1) since 2024-05-01T12:00:00"),
        "ev-1")
    api.store.job_events.apply(contract.job_event_body(env_id, job["id"], "running"), "ev-2")
    done = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert done["state"] == "refused" and done["finished"]
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "ready"
    reports = api.client.get(f"/environments/{env_id}/deployments/{job['id']}").json()
    assert [(r["level"], r["text"]) for r in reports["reports"]] == [
        ("error", f"environment {env_id} is locked by job j0 (conductor c1) since "
                  f"2024-05-01T12:00:00")]
    finish(api, job["id"], dict(copy.deepcopy(model), services=[]))  # a late result: ignored
    assert api.client.get(f"/environments/{env_id}").json()["version"] == 1


def test_a_queued_job_is_shown_with_why_and_runs_again_once_it_holds_the_lock(api):
    """Issue 29: a job whose conductor finds the environment locked by another job
    waits for the lock; the API shows it ``queued``, with why, until the
    conductor says it runs (then ``running``, as before)."""
    env_id, model = deployed(api)
    job = action(api, env_id, "check", {}).json()
    why = (f"environment {env_id} is locked by job j0 (conductor c1) since "
           f"2024-05-01T12:00:00; job {job['id']} waits for it (at most 600 s, [conductor] "
           f"lock_wait)")
    for message_id in ("q-1", "q-2"):        # a second copy waiting says nothing new
        api.store.job_events.apply(contract.job_event_body(env_id, job["id"], "queued", why),
                                   message_id)
    shown = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert (shown["state"], shown["finished"]) == ("queued", None)
    listed = api.client.get(f"/environments/{env_id}/jobs").json()["jobs"]
    assert listed[0]["id"] == job["id"] and listed[0]["state"] == "queued"
    deployment = api.client.get(f"/environments/{env_id}/deployments").json()["deployments"]
    assert deployment[0]["id"] == job["id"] and deployment[0]["state"] == "queued"
    reports = api.client.get(f"/environments/{env_id}/deployments/{job['id']}").json()
    assert [(r["level"], r["text"]) for r in reports["reports"]] == [("info", why)]
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "deploying"
    busy = action(api, env_id, "check", {})         # still one job at a time
    assert busy.status_code == 409 and f"job {job['id']} (check) queued since" in \
        busy.json()["error"]["message"]

    api.store.job_events.apply(contract.job_event_body(env_id, job["id"], "running"), "r-1")
    shown = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert (shown["state"], shown["finished"]) == ("running", None)
    reports = api.client.get(f"/environments/{env_id}/deployments/{job['id']}").json()
    assert [r["text"] for r in reports["reports"]][1:] == [
        f"job {job['id']} holds the environment's lock: it runs"]
    finish(api, job["id"], model)
    done = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert done["state"] == "success" and done["finished"]
    # a late "queued" of the ended job changes nothing
    api.store.job_events.apply(contract.job_event_body(env_id, job["id"], "queued", why), "q-3")
    assert api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()["state"] == \
        "success"


def test_a_queued_job_can_be_abandoned_or_refused(api):
    env_id, _ = deployed(api)
    for end in ("abandon", "refuse"):
        job = action(api, env_id, "check", {}).json()
        api.store.job_events.apply(contract.job_event_body(env_id, job["id"], "queued",
                                                           "locked"), f"q-{end}")
        if end == "abandon":
            assert api.client.post(f"/environments/{env_id}/abandon").status_code == 200
        else:
            api.store.job_events.apply(contract.job_event_body(
                env_id, job["id"], "refused", "locked; waited 600.0 s"), f"r-{end}")
        shown = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
        assert shown["state"] == {"abandon": "abandoned", "refuse": "refused"}[end]
        assert shown["finished"]
        assert api.client.get(f"/environments/{env_id}").json()["status"] == "ready"


def test_a_refused_session_deploy_reopens_the_session(api):
    env_id, session = new_env(api.client, [web_server()])
    api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    job_id = api.published.tasks[-1][1]
    api.store.job_events.apply(contract.job_event_body(env_id, job_id, "refused", "locked"), "e")
    assert api.client.get(f"/environments/{env_id}/sessions/{session}").json()["state"] == \
        "open"
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "pending"


# -- job events in batches ---------------------------------------------------------------

def _two_jobs(api):
    """Two deployed environments, each running a check job with a lock grant
    taken over (old token 1, current token 2), and a stored task ``T0``."""
    import datetime
    jobs = []
    now = [datetime.datetime(2030, 1, 1)]
    lock = JobLock(api.store.sessions.kw["bind"], clock=lambda: now[0])
    for name in ("one-by-one", "batched"):
        env_id, _ = deployed(api)
        job_id = action(api, env_id, "check", {}).json()["id"]
        old = lock.acquire(env_id, job_id, "conductor-a")
        now[0] += datetime.timedelta(seconds=120)
        new = lock.acquire(env_id, job_id, "conductor-b", stale_after=60)
        event(api, env_id, job_id, "T0", status="running", log=["before the batch"])
        jobs.append((env_id, job_id, old.token, new.token))
    return jobs


def _events(env_id, job_id, old, new):
    """Job events as a conductor sends them, with every kind of trouble mixed in."""
    def task(change_id, fence=new, **fields):
        return contract.fenced(contract.task_event_body(
            env_id, job_id, {"change_id": change_id, **fields}), fence)

    bodies = [
        task("T1", target="u1", target_name="web1", operation="check", reason="check",
             status="pending"),
        task("T2", target="u2", status="running", started="2024-05-01T12:00:00Z",
             log=["connecting", "password is P@ssw0rd-web"]),
        task("T0", status="ok", log=["after", ""], finished="2024-05-01T12:00:09"),
        task("T1", status="running", log=["one"]),
        {"kind": "task"},                                                  # not a job event
        task("T3", started="yesterday"),                                   # malformed
        task("T9", status="ok"),
        task("T4", fence=old, status="ok", log=["from the old run"]),      # fenced off
        task("B" * 65, status="ok"),                                       # too long
        task("T2", status="ok", summary="P@ssw0rd-web works", digest="d2", log=["done"],
             finished="2024-05-01T14:00:07+02:00"),
        task("T1", log=["two", "three"], summary=None),
        task("T5\x00", status="error", summary="nul \x00 here"),
        contract.task_event_body(env_id, "no-such-job", {"change_id": "T6"}),
        contract.fenced(contract.job_event_body(env_id, job_id, "running"), new),
        task("T7", status="running", log=["settled by the refusal"]),
        contract.fenced(contract.job_event_body(env_id, job_id, "refused",
                                                "refused, P@ssw0rd-web"), new),
        task("T1", status="ok", log=["after the refusal"]),
        task("T8", status="pending"),
    ]
    bodies[6] = contract.task_event_body(env_id, job_id, {"change_id": "T9", "status": "ok"})
    return [(body, f"{job_id}-ev-{n}") for n, body in enumerate(bodies)]


def _stored(api, env_id, job_id):
    """The job's tasks, state and reports and the environment's status, with what
    depends on the moment or the job's id (the tasks its end settled) left out."""
    job = api.client.get(f"/environments/{env_id}/jobs/{job_id}").json()
    reports = api.client.get(f"/environments/{env_id}/deployments/{job_id}").json()["reports"]
    tasks = {}
    for task in job["tasks"]:
        if (task["summary"] or "").startswith(f"superseded: job {job_id} "):
            task.update(finished="(settled)", summary=task["summary"].replace(job_id, "JOB"))
        tasks[task["change_id"]] = task
    return (tasks, job["state"], [(r["level"], r["text"]) for r in reports],
            api.client.get(f"/environments/{env_id}").json()["status"])


def test_a_batch_of_job_events_stores_what_one_by_one_stores(api):
    (env_a, job_a, old_a, new_a), (env_b, job_b, old_b, new_b) = _two_jobs(api)
    for body, message_id in _events(env_a, job_a, old_a, new_a):
        if "job_id" not in body:                            # refused by the contract
            with pytest.raises(contract.ContractError, match="'environment_id' is missing"):
                api.store.job_events.apply(body, message_id)
        else:
            api.store.job_events.apply(body, message_id)
    batch = _events(env_b, job_b, old_b, new_b)
    first = api.store.job_events.apply_all(batch[:7])
    assert [type(o).__name__ for o in first] == ["NoneType"] * 4 + ["ContractError"] + \
        ["NoneType"] * 2                                   # set aside, the others stored
    assert api.store.job_events.apply_all(batch[7:]) == [None] * (len(batch) - 7)
    one_by_one, batched = _stored(api, env_a, job_a), _stored(api, env_b, job_b)
    assert batched == one_by_one
    tasks, state, reports, status = batched
    assert sorted(tasks) == ["T0", "T1", "T2", "T5\ufffd", "T7", "T8", "T9"]
    assert tasks["T0"]["log"] == ["before the batch", "after", ""]
    assert tasks["T1"]["log"] == ["one", "two", "three", "after the refusal"]
    assert (tasks["T1"]["status"], tasks["T1"]["target_name"]) == ("ok", "web1")
    assert "superseded: job JOB ended (refused)" in tasks["T1"]["summary"]  # then updated
    assert tasks["T2"] == {"change_id": "T2", "target": "u2", "target_name": None,
                           "operation": None, "reason": None, "status": "ok",
                           "started": "2024-05-01T12:00:00", "finished": "2024-05-01T12:00:07",
                           "summary": "*** works", "digest": "d2",
                           "log": ["connecting", "password is ***", "done"]}
    assert tasks["T7"]["status"] == "cancelled"             # open when the job was refused
    assert tasks["T8"]["status"] == "pending"               # came after it
    assert state == "refused" and status == "ready"
    assert reports == [("error", "refused, ***")]


def test_a_malformed_event_in_a_batch_does_not_lose_the_others(api, caplog):
    env_id, _ = deployed(api)
    job = action(api, env_id, "check", {}).json()["id"]
    caplog.set_level("INFO", logger="fornace.api.stores.jobevents")
    items = [(contract.task_event_body(env_id, job, {"change_id": "M1", "status": "ok"}), "a"),
             (b"not json", "b"),
             (contract.task_event_body(env_id, job, {"change_id": "M2",
                                                     "started": "yesterday"}), "c"),
             (contract.task_event_body(env_id, job, {"change_id": "M3", "log": ["x"]}), "d")]
    outcomes = api.store.job_events.apply_all(items)
    assert outcomes[0] is None and outcomes[2:] == [None, None]
    assert isinstance(outcomes[1], contract.ContractError)     # set aside: the consumer
    assert "invalid JSON" in str(outcomes[1])                 # drops it, never retried
    tasks = api.client.get(f"/environments/{env_id}/jobs/{job}").json()["tasks"]
    assert [(t["change_id"], t["status"], t["log"]) for t in tasks] == [
        ("M1", "ok", []), ("M3", "pending", ["x"])]
    assert f"job event c of job {job} dropped: field 'task.started' is not an ISO 8601 time" \
        in caplog.text
    assert "one by one" not in caplog.text      # dropped alone: the batch went through


def test_a_tasks_event_is_stored_as_its_task_events_would_be(api, caplog):
    """Contract 1.4: many tasks of a job in one message, each as a "task" event's
    task, in order; a malformed task is dropped alone."""
    envs = [deployed(api)[0] for _ in range(2)]
    jobs = [action(api, env_id, "check", {}).json()["id"] for env_id in envs]
    changes = [{"change_id": "S1", "status": "running", "log": ["a"]},
               {"change_id": "S2", "status": "ok", "summary": "P@ssw0rd-web is set"},
               {"change_id": "S3", "started": "yesterday"},
               {"change_id": "S1", "status": "ok", "log": ["b"]}]
    for change in changes:                                  # the first job: one by one
        event(api, envs[0], jobs[0], **change)
    caplog.set_level("INFO", logger="fornace.api.stores.jobevents")
    body = contract.task_events_body(envs[1], jobs[1], changes)
    assert api.store.job_events.apply_all([(body, "many"), (contract.task_event_body(
        envs[1], jobs[1], {"change_id": "S2", "log": ["c"]}), "one")]) == [None, None]
    assert f"job event many (task 2) of job {jobs[1]} dropped: field 'task.started'" \
        in caplog.text
    stored = [[(t["change_id"], t["status"], t["summary"], t["log"]) for t in
               api.client.get(f"/environments/{env_id}/jobs/{job}").json()["tasks"]]
              for env_id, job in zip(envs, jobs)]
    assert stored[1] == [("S1", "ok", None, ["a", "b"]), ("S2", "ok", "*** is set", ["c"])]
    assert stored[0] == [("S1", "ok", None, ["a", "b"]), ("S2", "ok", "*** is set", [])]


def test_a_batch_the_database_refuses_is_stored_one_by_one(api, caplog, monkeypatch):
    """A task row inserted by another consumer between the batch's select and its
    insert (an IntegrityError): the events are stored one by one instead, the
    concurrent row updated, its log lines kept in order."""
    from fornace.api.stores import jobevents

    env_id, _ = deployed(api)
    job = action(api, env_id, "check", {}).json()["id"]
    event(api, env_id, job, "R1", status="running", log=["first"])
    found = jobevents._EventBatch._rows
    blind = []

    def rows(self):      # the first batch does not see R1: it was inserted "meanwhile"
        blind.append(len(self.events))
        return {} if len(blind) == 1 else found(self)

    monkeypatch.setattr(jobevents._EventBatch, "_rows", rows)
    caplog.set_level("INFO", logger="fornace.api")
    items = [(contract.task_event_body(env_id, job, {"change_id": "R1", "log": ["second"]}),
              "e1"),
             (contract.task_event_body(env_id, job, {"change_id": "R2", "status": "ok"}), "e2"),
             (contract.task_event_body(env_id, job, {"change_id": "R1", "status": "ok",
                                                     "log": ["third"]}), "e3")]
    assert api.store.job_events.apply_all(items) == [None, None, None]
    assert blind == [3, 1, 1, 1]
    assert "storing 3 job events in one transaction failed (IntegrityError" in caplog.text
    tasks = api.client.get(f"/environments/{env_id}/jobs/{job}").json()["tasks"]
    assert [(t["change_id"], t["status"], t["log"]) for t in tasks] == [
        ("R1", "ok", ["first", "second", "third"]), ("R2", "ok", [])]


def test_an_event_failing_alone_stops_the_batch_there_and_loses_nothing(api, monkeypatch):
    """One by one, the first event that still fails for a passing reason (the
    database out of reach) is given back with those after it (untried, so
    they come again in order); those before are stored."""
    from sqlalchemy.exc import OperationalError

    from fornace.api.stores import jobevents

    env_id, _ = deployed(api)
    job = action(api, env_id, "check", {}).json()["id"]
    fields = jobevents.task_fields
    broken = OperationalError("UPDATE job_tasks ...", {}, Exception("the database went away"))

    def failing(task, secrets):
        if task["change_id"] == "F2":
            raise broken
        return fields(task, secrets)

    monkeypatch.setattr(jobevents, "task_fields", failing)
    items = [(contract.task_event_body(env_id, job, {"change_id": f"F{n}", "log": [f"l{n}"]}),
              f"e{n}") for n in range(1, 4)]
    assert api.store.job_events.apply_all(items) == [None, broken, broken]
    with pytest.raises(OperationalError, match="went away"):   # alone, it raises as before
        api.store.job_events.apply(*items[1])
    tasks = api.client.get(f"/environments/{env_id}/jobs/{job}").json()["tasks"]
    assert [t["change_id"] for t in tasks] == ["F1"]
    monkeypatch.setattr(jobevents, "task_fields", fields)       # redelivered, it works
    assert api.store.job_events.apply_all(items[1:]) == [None, None]
    tasks = api.client.get(f"/environments/{env_id}/jobs/{job}").json()["tasks"]
    assert [(t["change_id"], t["log"]) for t in tasks] == [
        ("F1", ["l1"]), ("F2", ["l2"]), ("F3", ["l3"])]


def test_a_task_event_sent_again_is_stored_once(api):
    """A batch the conductor sends again (its confirm lost) or the broker
    delivers again appends its log lines once; in one batch or in two."""
    env_id, _ = deployed(api)
    job = action(api, env_id, "check", {}).json()
    first = contract.task_events_body(env_id, job["id"], [
        {"change_id": "A001", "target": "u1", "status": "running", "log": ["one", "two"]}])
    second = contract.task_events_body(env_id, job["id"], [
        {"change_id": "A001", "status": "ok", "log": ["three"]}])
    api.store.job_events.apply(first, f"{job['id']}-events-1")
    api.store.job_events.apply(first, f"{job['id']}-events-1")   # again, alone
    outcomes = api.store.job_events.apply_all([(second, f"{job['id']}-events-2"),
                                               (first, f"{job['id']}-events-1"),
                                               (second, f"{job['id']}-events-2")])
    assert outcomes == [None, None, None]
    shown = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert [(t["change_id"], t["status"], t["log"]) for t in shown["tasks"]] == \
        [("A001", "ok", ["one", "two", "three"])]


def test_a_takeovers_task_events_numbered_again_are_stored(api):
    """A takeover runs the job again under a new token and numbers its events
    from 1 again: they are not taken for the first holder's, sent again."""
    import datetime
    env_id, _ = deployed(api)
    job = action(api, env_id, "check", {}).json()
    now = [datetime.datetime(2030, 1, 1)]
    lock = JobLock(api.store.sessions.kw["bind"], clock=lambda: now[0])
    first = lock.acquire(env_id, job["id"], "c1")
    body = contract.task_events_body(env_id, job["id"], [
        {"change_id": "A001", "status": "running", "log": ["by c1"]}])
    api.store.job_events.apply(contract.fenced(body, first.token), f"{job['id']}-events-1")
    now[0] += datetime.timedelta(seconds=120)
    second = lock.acquire(env_id, job["id"], "c2", stale_after=60)
    assert second.token > first.token
    body = contract.task_events_body(env_id, job["id"], [
        {"change_id": "A001", "status": "ok", "log": ["by c2"]}])
    api.store.job_events.apply(contract.fenced(body, second.token), f"{job['id']}-events-1")
    shown = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert [(t["status"], t["log"]) for t in shown["tasks"]] == [("ok", ["by c1", "by c2"])]
