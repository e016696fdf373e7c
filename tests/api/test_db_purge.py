"""Bounded history (:mod:`fornace.common.db.history`, ``fornace db purge``):
what the purge removes is what it counts, on SQLite and on the real
PostgreSQL, and nothing a running job, an environment's latest jobs or its
next deployment needs.  Rows go in through the stores, as the conductor's
messages would bring them; then their times are moved back."""
from __future__ import annotations

import copy
import datetime
import json
import re
import uuid

import pytest
from sqlalchemy import func, select, update

from fornace.cli.main import main
from fornace.common import contract
from fornace.common.catalog import load_catalog
from fornace.common.db.engine import current, make_engine
from fornace.common.db.history import TABLES, Cutoff, count, purge
from fornace.common.db.models import (ConfigSession, DeadLetter, Environment, Job, JobTask,
                                      JobTrace, Status, utcnow)
from fornace.conductor.jobs.tracing import encode
from apikit import make_api, migrated_database, reset_postgres, web_server
from services import postgres_url
from test_jobs_api import TYPES, action, deployed, event, finish, new_env
from test_traces_api import a_trace

DAYS = 30
OLD = utcnow() - datetime.timedelta(days=DAYS + 10)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    """(the API on that database, its URL)."""
    path = tmp_path / "types.json"
    path.write_text(json.dumps({"types": TYPES}))
    for url in migrated_database(request.param, tmp_path):
        yield make_api(url, catalog=load_catalog(path)), url


def last_job(api) -> str:
    return api.published.tasks[-1][1]


def deploy_again(api, env_id: str, reports=(), errors: int = 0) -> str:
    """A second deployment of the environment (its model as it is), ended."""
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    assert api.client.post(f"/environments/{env_id}/sessions/{session}/deploy").status_code \
        == 200
    body, job = api.published.tasks[-1]
    finish(api, job, copy.deepcopy(body), reports)
    return job


def run_action(api, env_id: str, name: str, reports=()) -> str:
    response = action(api, env_id, name, {})
    assert response.status_code == 202, response.text
    body, job = api.published.tasks[-1]
    if reports is not None:
        finish(api, job, copy.deepcopy(body), reports)
    return job


def trace(api, env_id: str, job: str) -> None:
    api.store.job_events.apply(contract.trace_event_body(env_id, job, encode(a_trace())),
                               f"{job}-trace")


def age(engine, jobs: list[str]) -> None:
    """Move the jobs (in this order, a minute apart), their reports, their
    sessions back to :data:`OLD`."""
    with engine.begin() as db:
        for minute, job in enumerate(jobs):
            when = OLD + datetime.timedelta(minutes=minute)
            db.execute(update(Job).where(Job.id == job).values(started=when, created=when))
            db.execute(update(Job).where(Job.id == job, Job.finished.is_not(None)).values(
                finished=when))
            db.execute(update(Status).where(Status.deployment_id == job).values(created=when))
        db.execute(update(ConfigSession).where(ConfigSession.state == "deployed").values(
            updated=OLD))


def rows(engine) -> dict[str, int]:
    with engine.connect() as db:
        return {name: db.scalar(select(func.count()).select_from(
            Job.metadata.tables[name])) for name in TABLES}


def ids(engine, column, where) -> set[str]:
    with engine.connect() as db:
        return set(db.scalars(select(column).where(where)))


def dead_letter(engine, job: str | None, env_id: str, created: datetime.datetime) -> str:
    letter = uuid.uuid4().hex
    with engine.begin() as db:
        db.execute(DeadLetter.__table__.insert().values(
            id=letter, queue="task-reports", kind="report", job_id=job, environment_id=env_id,
            tenant_id="t1", reason="test", body="{}", created=created))
    return letter


def test_purge_removes_what_it_counts_and_keeps_what_environments_show(backend, capsys):
    api, url = backend
    engine = make_engine(url)
    # A: deploy (a task, a trace) -> plan -> deploy (an error, a trace) -> check
    env_a, session = new_env(api.client, [web_server()])
    assert api.client.post(f"/environments/{env_a}/sessions/{session}/deploy").status_code \
        == 200
    body, first = api.published.tasks[-1]
    event(api, env_a, first, "c-1", status="ok", target="frontend")
    trace(api, env_a, first)
    finish(api, first, copy.deepcopy(body), [("info", "deployed")])
    plan = run_action(api, env_a, "plan", [("info", "would run 0")])
    second = deploy_again(api, env_a, [("error", "one unit failed")])
    trace(api, env_a, second)
    check = run_action(api, env_a, "check", [("info", "checked")])
    # B: an old deployment, then a job that still runs (old, yet running)
    env_b, _ = deployed(api)
    b_first = last_job(api)
    running = run_action(api, env_b, "check", reports=None)
    api.store.reports.add(contract.report_body(env_b, "environment", "started", "info",
                                               env_b), f"{running}-report-1")
    # C: deployed, then deleted: its jobs went with it; its dead letter outlives it
    env_c, _ = deployed(api)
    assert api.client.delete(f"/environments/{env_c}").status_code == 200
    body, deletion = api.published.tasks[-1]
    finish(api, deletion, body)
    assert api.client.get(f"/environments/{env_c}").status_code == 404

    age(engine, [first, plan, second, check, b_first, running])
    letters = {"A's first job": dead_letter(engine, first, env_a, OLD),
               "running job": dead_letter(engine, running, env_b, OLD),
               "deleted env": dead_letter(engine, deletion, env_c, OLD),
               "recent": dead_letter(engine, first, env_a, utcnow())}
    model_a = api.client.get(f"/environments/{env_a}").json()
    status_a = api.client.get(f"/environments/{env_a}/status").json()
    with engine.connect() as db:
        description_a = db.scalar(select(Environment.description).where(
            Environment.id == env_a))
    before = rows(engine)

    # --dry-run: the counts, nothing removed
    assert main(["db", "purge", "--older-than", str(DAYS), "--dry-run", "--db", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("would remove the history of jobs that ended before ")
    assert rows(engine) == before
    with engine.connect() as db:
        counted = count(db, Cutoff(DAYS))
    assert counted["deployments"] == 2 and counted["dead_letters"] == 2
    assert counted["sessions"] == 1        # the first deployment's (the second's job is kept)
    assert counted["job_traces"] == 1 and counted["job_tasks"] == 1
    for name in TABLES:
        assert f"  {name} " in out and f" {counted[name]}  " in out.split(f"  {name} ")[1]

    # the real run removes what the dry run counted, and says so
    assert main(["db", "purge", "--older-than", str(DAYS), "--db", url]) == 0
    out = capsys.readouterr().out
    after = rows(engine)
    assert {name: before[name] - after[name] for name in TABLES} == counted
    assert out.startswith("removed the history of jobs that ended before ")
    assert ids(engine, Job.id, Job.id.in_([first, plan, second, check, b_first, running])) \
        == {second, check, b_first, running}
    assert not ids(engine, Status.id, Status.deployment_id.in_([first, plan]))
    assert not ids(engine, JobTask.id, JobTask.deployment_id == first)
    assert ids(engine, JobTrace.deployment_id, JobTrace.environment_id == env_a) == {second}
    assert ids(engine, DeadLetter.id, DeadLetter.id.in_(letters.values())) == {
        letters["running job"], letters["recent"]}
    # nothing older is left: a second run removes nothing
    assert purge(engine, Cutoff(DAYS)) == dict.fromkeys(TABLES, 0)

    # what the environments show is still there
    shown = api.client.get(f"/environments/{env_a}/deployments").json()["deployments"]
    assert [d["id"] for d in shown] == [check, second]
    reports = api.client.get(f"/environments/{env_a}/deployments/{second}").json()["reports"]
    assert [r["text"] for r in reports if r["level"] == "error"] == ["one unit failed"]
    last = api.client.get(f"/environments/{env_a}/lastStatus").json()["lastStatuses"]
    assert [r["text"] for r in last.values()] == ["checked"]
    assert api.client.get(f"/environments/{env_a}/jobs/{second}/trace").status_code == 200
    assert api.client.get(f"/environments/{env_a}").json() == model_a
    assert api.client.get(f"/environments/{env_a}/status").json() == status_a
    assert api.client.get(f"/environments/{env_b}").json()["status"] == "deploying"
    running_reports = api.client.get(f"/environments/{env_b}/deployments/{running}").json()
    assert [r["text"] for r in running_reports["reports"]] == ["started"]

    # after a plan, A's state is still what its last deployment left (an error)
    run_action(api, env_a, "plan", [])
    assert api.client.get(f"/environments/{env_a}").json()["status"] == "deploy failure"
    # the next deployment starts from the model as it was (change detection's digests in it)
    session = api.client.post(f"/environments/{env_a}/configure").json()["id"]
    assert api.client.post(f"/environments/{env_a}/sessions/{session}/deploy").status_code \
        == 200
    task = contract.parse_task(api.published.tasks[-1][0])
    assert task.model["services"] == description_a["services"]
    finish(api, api.published.tasks[-1][1], copy.deepcopy(api.published.tasks[-1][0]))
    assert api.client.get(f"/environments/{env_a}").json()["status"] == "ready"
    engine.dispose()


def test_a_job_running_or_recent_is_never_history(backend):
    """Whatever its age, a running job and its rows stay; a job that ended
    recently stays; 0 days removes every ended job but the latest ones."""
    api, url = backend
    engine = make_engine(url)
    env_id, _ = deployed(api)
    old = last_job(api)
    recent = run_action(api, env_id, "check", [("info", "recent")])
    running = run_action(api, env_id, "check", reports=None)
    age(engine, [old, running])
    removed = purge(engine, Cutoff(DAYS))
    assert removed["deployments"] == 0     # old: the latest deploying job; recent; running
    removed = purge(engine, Cutoff(0), jobs_per_batch=1)
    assert removed["deployments"] == 0     # recent: the latest ended job
    assert ids(engine, Job.id, Job.environment_id == env_id) == {old, recent, running}
    # once it ended (it started before the recent one), the running job is history too
    finish(api, running, api.published.tasks[-1][0])
    assert purge(engine, Cutoff(0))["deployments"] == 1
    assert ids(engine, Job.id, Job.environment_id == env_id) == {old, recent}
    engine.dispose()


def old_deployments(engine, env_id: str, count_: int) -> list[str]:
    """``count_`` deployments of the environment that ended long ago (before
    its own), a report each, inserted as the stores would have stored them."""
    jobs = [uuid.uuid4().hex for _ in range(count_)]
    with engine.begin() as db:
        for minute, job in enumerate(jobs):
            when = OLD - datetime.timedelta(minutes=count_ - minute)
            db.execute(Job.__table__.insert().values(
                id=job, environment_id=env_id, tenant_id="t1", kind="deploy",
                state="success", description={}, started=when, finished=when, created=when,
                updated=when))
            db.execute(Status.__table__.insert().values(
                id=uuid.uuid4().hex, deployment_id=job, text="done", created=when,
                updated=when))
    return jobs


def test_purges_at_once_while_jobs_start_and_end_count_each_row_once():
    """On PostgreSQL (SQLite serialises writers): two purges in small batches
    at the same time, while the environment's next job starts and ends; each
    row removed is counted by one of them, and the environment keeps its
    latest jobs."""
    import threading
    url = postgres_url()
    reset_postgres(url)
    try:
        api = make_api(url)
        engine = make_engine(url)
        env_id, session = new_env(api.client)
        assert api.client.post(f"/environments/{env_id}/sessions/{session}/deploy") \
            .status_code == 200
        body, deployment = api.published.tasks[-1]
        finish(api, deployment, copy.deepcopy(body))
        old = old_deployments(engine, env_id, 40)
        before = rows(engine)
        counts: list[dict[str, int]] = []
        start = threading.Barrier(3)

        def one_purge() -> None:
            start.wait()
            counts.append(purge(engine, Cutoff(DAYS), jobs_per_batch=3))
        threads = [threading.Thread(target=one_purge) for _ in range(2)]
        for thread in threads:
            thread.start()
        start.wait()
        check = run_action(api, env_id, "check", reports=None)   # starts during the purges
        finish(api, check, api.published.tasks[-1][0])            # and ends
        for thread in threads:
            thread.join()
        after = rows(engine)
        after["deployments"] -= 1   # the check, added meanwhile
        assert {name: before[name] - after[name] for name in TABLES} == {
            name: sum(c[name] for c in counts) for name in TABLES}
        assert sum(c["deployments"] for c in counts) == len(old)
        assert ids(engine, Job.id, Job.environment_id == env_id) == {deployment, check}
    finally:
        engine.dispose()
        reset_postgres(url)


@pytest.mark.parametrize("days", ["-1", "3.5", "ten"])
def test_days_that_are_no_age_are_bad_usage(days, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["db", "purge", "--older-than", days, "--db", "sqlite://"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --older-than: {days!r}" in err or f"argument --older-than: {days} " in err


def test_the_operators_guide_shows_the_counts_as_the_command_prints_them(tmp_path, capsys):
    """doc/source/admin/maintenance.rst's example, line by line, has the shape
    of what ``fornace db purge --dry-run`` prints (numbers, dates aside)."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "doc" / "source" / "admin"
             / "maintenance.rst").read_text()
    block = guide.split("$ fornace db purge --older-than 90 --dry-run\n", 1)[1]
    shown = [line[4:] for line in block.split("\n\n", 1)[0].splitlines()]
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    assert main(["db", "upgrade", "--db", url]) == 0
    capsys.readouterr()
    assert main(["db", "purge", "--older-than", "90", "--dry-run", "--db", url]) == 0
    printed = capsys.readouterr().out.splitlines()

    def shape(line: str) -> str:
        return re.sub(r"\d+", "N", " ".join(line.split()))
    assert [shape(line) for line in shown] == [shape(line) for line in printed]


def test_a_database_without_the_newest_schema_or_more_days_than_the_calendar(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    assert main(["db", "purge", "--older-than", "1", "--db", url]) == 3
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [
        f"fornace db: the database {url} has the schema none (empty), not the newest, "
        f"{current(url)[1]}: run fornace db upgrade first"]
    assert main(["db", "upgrade", "--db", url]) == 0
    assert main(["db", "purge", "--older-than", "99999999999", "--dry-run", "--db", url]) == 0
    assert "ended before 0001-01-01 00:00:00 UTC" in capsys.readouterr().out
