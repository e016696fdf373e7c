"""Migration 0016 (the package versions a job ran) on SQLite and PostgreSQL:
jobs from before keep null (not known), and it goes down and up again."""
from __future__ import annotations

import datetime

import pytest
from alembic import command
from sqlalchemy import insert, inspect, select

from fornace.common.db.engine import alembic_config, make_engine
from fornace.common.db.models import Environment, Job
from apikit import reset_postgres
from services import postgres_url


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrate.sqlite'}"
        return
    found = postgres_url()
    reset_postgres(found)
    yield found
    reset_postgres(found)


def columns(engine) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns("deployments")}


def test_jobs_from_before_keep_no_packages_and_the_migration_goes_both_ways(url):
    command.upgrade(alembic_config(url), "0015")
    engine = make_engine(url)
    now = datetime.datetime(2026, 1, 1)
    with engine.begin() as db:
        db.execute(insert(Environment.__table__).values(
            id="env1", name="old", tenant_id="t1", version=1, state="ready", description={},
            created=now, updated=now))
        db.execute(insert(Job.__table__).values(
            id="job1", environment_id="env1", tenant_id="t1", kind="deploy", state="success",
            description={}, parameters={}, started=now, created=now, updated=now))
    assert "packages" not in columns(engine)

    command.upgrade(alembic_config(url), "head")
    assert "packages" in columns(engine)
    with engine.begin() as db:
        assert db.scalar(select(Job.packages).where(Job.id == "job1")) is None
        db.execute(insert(Job.__table__).values(
            id="job2", environment_id="env1", tenant_id="t1", kind="deploy", state="success",
            description={}, parameters={}, packages=["kvstore 1.1.0"], started=now,
            created=now, updated=now))
        assert db.scalar(select(Job.packages).where(Job.id == "job2")) == ["kvstore 1.1.0"]

    command.downgrade(alembic_config(url), "0015")
    assert "packages" not in columns(engine)
    command.upgrade(alembic_config(url), "head")
    engine.dispose()
