"""The conductors' periodic purge ([database] history_days,
:mod:`fornace.conductor.historypurge`): one conductor takes each turn, and a
running conductor removes the old history by itself -- on SQLite and on the
real PostgreSQL (whose clock the turns are compared on)."""
from __future__ import annotations

import datetime
import threading
from pathlib import Path

import pytest
from sqlalchemy import select

from fornace.common.db.engine import make_engine, upgrade
from fornace.common.db.models import Environment, Job, JobLock, Status, new_id, utcnow
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.historypurge import TURN, HistoryPurge
from apikit import migrated_database
from standins import RecordingStacks
from waiting import wait_for

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    yield from migrated_database(request.param, tmp_path)


def old_jobs(engine, ended_days_ago: int = 40) -> tuple[str, str]:
    """An environment with two deployments that ended long ago, a report each:
    (the first, history; the second, its latest)."""
    env_id, jobs = new_id(), [new_id(), new_id()]
    when = utcnow() - datetime.timedelta(days=ended_days_ago)
    with engine.begin() as db:
        db.execute(Environment.__table__.insert().values(
            id=env_id, name="old", tenant_id="t1", version=2, state="ready",
            description={"id": env_id, "name": "old", "services": []}))
        for minute, job in enumerate(jobs):
            at = when + datetime.timedelta(minutes=minute)
            db.execute(Job.__table__.insert().values(
                id=job, environment_id=env_id, tenant_id="t1", kind="deploy", state="success",
                description={}, started=at, finished=at, created=at, updated=at))
            db.execute(Status.__table__.insert().values(
                id=new_id(), deployment_id=job, text="done", created=at, updated=at))
    return jobs[0], jobs[1]


def jobs_left(engine) -> set[str]:
    with engine.connect() as db:
        return set(db.scalars(select(Job.id)))


def test_one_conductor_takes_each_turn(url):
    engine = make_engine(url)
    stop = threading.Event()
    first, second = (HistoryPurge(engine, holder, 30, stop, every=3600)
                     for holder in ("conductor-1", "conductor-2"))
    assert first.claim() is True
    assert second.claim() is False and first.claim() is False   # the hour is not over
    with engine.connect() as db:
        row = db.execute(select(JobLock.holder, JobLock.token, JobLock.job_id).where(
            JobLock.environment_id == TURN)).one()
    assert tuple(row) == ("conductor-1", 1, None)
    due = HistoryPurge(engine, "conductor-2", 30, stop, every=0)
    assert wait_for(due.claim, "a turn due at once")   # the database's clock moved on
    engine.dispose()


def test_a_running_conductor_purges_the_old_history(url):
    engine = make_engine(url)
    history, latest = old_jobs(engine)
    conductor = Conductor(ConductorSettings(
        broker_url="memory://", data_dir=DATA, max_environments=1, database_url=url,
        history_days=30, history_every=0.2), lambda task: RecordingStacks([]))
    conductor.start()
    try:
        wait_for(lambda: history not in jobs_left(engine), "the old job purged")
        assert jobs_left(engine) == {latest}
        with engine.connect() as db:
            assert set(db.scalars(select(Status.deployment_id))) == {latest}
    finally:
        conductor.shutdown()
    engine.dispose()


def test_without_history_days_nothing_is_purged(tmp_path):
    url = f"sqlite:///{tmp_path / 'fornace.sqlite'}"
    upgrade(url)
    conductor = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                            database_url=url), lambda task: RecordingStacks([]))
    assert conductor.history is None
