"""``fornace db upgrade|current``, and schema upgrades of processes starting together."""
from __future__ import annotations

import re
import subprocess
import sys
import uuid

import pytest
from sqlalchemy import inspect, make_url, text

from fornace.cli.main import main
from fornace.common.db.engine import current, make_engine
from services import postgres_url

HEAD = current("sqlite://")[1]


def test_current_then_upgrade_then_current(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'f.sqlite'}"
    assert main(["db", "current", "--db", url]) == 1          # empty: behind
    assert f"revision none (empty schema) (behind the newest, {HEAD})" in capsys.readouterr().out
    assert main(["db", "upgrade", "--db", url]) == 0
    assert f"upgraded from an empty schema to revision {HEAD}" in capsys.readouterr().out
    assert main(["db", "upgrade", "--db", url]) == 0
    assert f"already at revision {HEAD}" in capsys.readouterr().out
    assert main(["db", "current", "--db", url]) == 0
    assert f"revision {HEAD} (the newest)" in capsys.readouterr().out
    assert "job_locks" in inspect(make_engine(url)).get_table_names()


def test_an_action_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["db"])
    assert exc.value.code == 2 and "ACTION" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["current", "upgrade"])
def test_an_unreachable_database_is_one_line_with_the_password_masked(action, capsys):
    url = "postgresql+psycopg://fornace:s3cret-pw@127.0.0.1:1/none"   # nothing listens there
    assert main(["db", action, "--db", url]) == 3     # fornace --help: unreachable or refused
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    [line] = captured.err.splitlines()
    assert re.fullmatch(r"fornace db: the database postgresql\+psycopg://fornace:\*\*\*@"
                        r"127\.0\.0\.1:1/none cannot be used: .*refused.*", line), line
    assert "s3cret-pw" not in line


def test_a_database_that_refuses_the_user_is_named_with_its_password_masked(capsys):
    url = make_url(postgres_url()).set(username="no_such_fornace_role", password="s3cret-pw")
    url = url.render_as_string(hide_password=False)
    assert main(["db", "current", "--db", url]) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert "no_such_fornace_role:***@" in line and "s3cret-pw" not in line
    assert "cannot be used" in line


@pytest.mark.parametrize("url, shown", [
    ("nosuchdialect://someone:s3cret-pw@host/db",
     "nosuchdialect://someone:***@host/db is no database Fornace can use: Can't load plugin"),
    ("postgresql+psycopg://someone:s3c@ret:pw@127.0.0.1:1/none",   # an @ the URL cannot hold
     "postgresql+psycopg://someone:***@127.0.0.1:1/none is no database URL: "
     "dialect+driver://user:password@host:port/name expected"),
    ("not a url", "not a url is no database URL"),
])
def test_a_url_that_names_no_usable_database_is_bad_usage(url, shown, capsys):
    assert main(["db", "current", "--db", url]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert line.startswith(f"fornace db: the database {shown}"), line
    assert "s3c" not in line and "ret:pw" not in line


def upgrade_together(url: str, processes: int = 4) -> list[tuple[int, str]]:
    """``fornace db upgrade`` in several processes started at once."""
    started = [subprocess.Popen([sys.executable, "-m", "fornace.cli", "db", "upgrade", "--db", url],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for _ in range(processes)]
    return [(p.wait(120), p.stdout.read()) for p in started]


def test_processes_upgrading_one_sqlite_file_take_turns(tmp_path):
    url = f"sqlite:///{tmp_path / 'race.sqlite'}"
    results = upgrade_together(url)
    assert [code for code, _ in results] == [0] * 4, results
    assert sum("upgraded from an empty schema" in out for _, out in results) >= 1
    assert current(url)[0] == HEAD


@pytest.fixture
def fresh_postgres():
    """A new, empty PostgreSQL database of its own (dropped afterwards)."""
    base = make_engine(postgres_url())
    name = f"fornace_race_{uuid.uuid4().hex[:10]}"
    with base.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with base.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        base.dispose()


def test_processes_upgrading_one_empty_postgres_take_turns(fresh_postgres):
    """Without the lock one of four failed with a duplicate table (measured)."""
    results = upgrade_together(fresh_postgres)
    assert [code for code, _ in results] == [0] * 4, results
    assert sum("upgraded from an empty schema" in out for _, out in results) == 1
    assert sum("already at revision" in out for _, out in results) == 3
    assert current(fresh_postgres)[0] == HEAD


def test_a_multi_host_url_is_shown_with_every_host_and_every_password_masked(capsys):
    """Regression: the hosts were shown escaped (``127.0.0.1%3A1``) and a
    password given as ``?password=`` was printed in clear."""
    url = ("postgresql+psycopg://fornace:s3cret-pw@/none?host=127.0.0.1:1&host=127.0.0.1:2"
           "&target_session_attrs=read-write&password=s3cret-too")   # nothing listens there
    assert main(["db", "current", "--db", url]) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("fornace db: the database postgresql+psycopg://fornace:***@/none?"
                           "host=127.0.0.1:1&host=127.0.0.1:2&target_session_attrs=read-write"
                           "&password=*** cannot be used: "), line
    assert "s3cret" not in line


def test_a_multi_host_url_without_a_writable_target_is_bad_usage(capsys):
    url = "postgresql+psycopg://fornace:s3cret-pw@/none?host=127.0.0.1:1&host=127.0.0.1:2"
    assert main(["db", "upgrade", "--db", url]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == ("fornace db: the database postgresql+psycopg://fornace:***@/none?"
                    "host=127.0.0.1:1&host=127.0.0.1:2 names several hosts: add "
                    "target_session_attrs=read-write (libpq would connect to whichever answers "
                    "first, maybe a standby, where every write fails)"), line
