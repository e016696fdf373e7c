"""``[database]``'s pool and start-up options, with oslo.db's names, reach the
engines -- on the machine's PostgreSQL -- and a service waits for a database
out of reach for a moment."""
from __future__ import annotations

import logging

import pytest
from oslo_config import cfg
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from cutproxy import Proxy
from fornace.common import options
from fornace.common.db.engine import make_engine, wait_for_database
from fornace.common.db.pool import Pool, StartupRetries
from fornace.conductor.jobs.lock import JobLock
from apikit import api_conf_file
from services import postgres_url


def conf_of(tmp_path, text: str) -> cfg.ConfigOpts:
    """The API's options read from a configuration file holding ``text``."""
    return api_conf_file(tmp_path, text)


def backend_pid(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT pg_backend_pid()")).scalar_one()


def test_oslo_db_names_are_read_from_the_database_section(tmp_path):
    conf = conf_of(tmp_path, "[database]\nmax_pool_size = 7\nmax_overflow = 2\n"
                             "pool_timeout = 4\nconnection_recycle_time = 120\n"
                             "max_retries = -1\nretry_interval = 3\n")
    assert options.database_pool(conf) == Pool(size=7, overflow=2, timeout=4, recycle=120)
    assert options.database_retries(conf) == StartupRetries(attempts=-1, interval=3)


def test_the_defaults_keep_thirty_connections_and_wait_a_while(tmp_path):
    conf = conf_of(tmp_path, "")
    assert options.database_pool(conf) == Pool(size=30, overflow=0, timeout=None, recycle=3600)
    assert list(options.database_retries(conf).delays()) == [10] * 10


def test_the_pool_size_and_overflow_bound_the_connections_open_at_once():
    engine = make_engine(postgres_url(), pool=Pool(size=2, overflow=1, timeout=1))
    try:
        held = [engine.connect() for _ in range(3)]   # the pool's 2, and 1 overflow
        assert len({c.execute(text("SELECT pg_backend_pid()")).scalar_one()
                    for c in held}) == 3
        with pytest.raises(PoolTimeout):
            engine.connect()                           # a 4th waits pool_timeout, then fails
        for connection in held:
            connection.close()
        assert engine.pool.checkedin() == 2           # the overflow one was closed
    finally:
        engine.dispose()


def test_connection_recycle_time_replaces_older_connections():
    kept = make_engine(postgres_url(), pool=Pool(size=1))
    renewed = make_engine(postgres_url(), pool=Pool(size=1, recycle=0))
    try:
        assert backend_pid(kept) == backend_pid(kept)
        assert backend_pid(renewed) != backend_pid(renewed)   # older than 0 s: replaced
    finally:
        kept.dispose()
        renewed.dispose()


def test_the_conductors_job_locks_use_the_configured_pool():
    lock = JobLock(postgres_url(), pool=Pool(size=3, overflow=0, recycle=77))
    try:
        assert lock.engine.pool.size() == 3 and lock.engine.pool._recycle == 77
    finally:
        lock.close()


def test_the_api_engine_uses_the_configured_pool(tmp_path):
    from fornace.api.server import ApiService
    conf = conf_of(tmp_path, f"[api]\nstate_dir = {tmp_path}\n"
                             "[database]\nmax_pool_size = 4\nmax_overflow = 1\n"
                             "connection_recycle_time = 99\n")
    service = ApiService(conf, db_url=postgres_url())
    try:
        pool = service.engine.pool
        assert (pool.size(), pool._max_overflow, pool._recycle) == (4, 1, 99)
    finally:
        service.engine.dispose()


@pytest.fixture
def refusing_database():
    """A PostgreSQL URL through a proxy that refuses connections for now."""
    url = postgres_url()
    from sqlalchemy import make_url
    parsed = make_url(url)
    proxy = Proxy((parsed.host or "127.0.0.1", parsed.port or 5432))
    proxy.refusing = True
    yield proxy, parsed.set(host="127.0.0.1", port=proxy.port).render_as_string(
        hide_password=False)
    proxy.close()


def test_start_up_waits_while_the_database_is_out_of_reach(refusing_database, caplog):
    proxy, url = refusing_database
    waits: list[float] = []

    def sleep(seconds: float) -> None:   # the database comes back after the 2nd wait
        waits.append(seconds)
        if len(waits) == 2:
            proxy.refusing = False

    with caplog.at_level(logging.WARNING, logger="fornace.common.db.outages"):
        wait_for_database(url, StartupRetries(attempts=5, interval=7), sleep=sleep)
    assert waits == [7, 7] and proxy.refused == 2
    assert sum("connecting to the database" in r.getMessage() for r in caplog.records) == 2


def test_start_up_gives_up_after_max_retries(refusing_database):
    proxy, url = refusing_database
    waits: list[float] = []
    with pytest.raises(OperationalError):
        wait_for_database(url, StartupRetries(attempts=3, interval=1), sleep=waits.append)
    assert waits == [1, 1, 1] and proxy.refused == 4   # the first try and 3 more


def test_max_retries_minus_one_waits_for_ever(refusing_database):
    proxy, url = refusing_database
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 25:   # far past the default's 10
            proxy.refusing = False

    wait_for_database(url, StartupRetries(attempts=-1, interval=2), sleep=sleep)
    assert len(waits) == 25


def test_a_url_that_cannot_work_is_not_waited_for():
    from fornace.common.db.urls import DatabaseUrlError
    with pytest.raises(DatabaseUrlError):
        wait_for_database("postgresql+psycopg://u@/db?host=a:1&host=b:2",
                          StartupRetries(attempts=-1, interval=1),
                          sleep=lambda _: pytest.fail("waited"))
