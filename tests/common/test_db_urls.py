"""A PostgreSQL URL naming several hosts (a primary and its standbys): what
Fornace accepts of one, how it shows one, and what it does when a host is
silent or a server has become read-only."""
from __future__ import annotations

import socket

import pytest
from sqlalchemy import text

from fornace.common.db import urls
from fornace.common.db.engine import make_engine, upgrade
from fornace.common.errors import FornaceError
from services import postgres_url
from waiting import returns

TWO = "host=127.0.0.1:5432&host=127.0.0.1:5433"


@pytest.mark.parametrize("url, problem", [
    # libpq would take whichever answers first, maybe a standby: every write fails
    (f"postgresql+psycopg://u@/db?{TWO}",
     "names several hosts: add target_session_attrs=read-write"),
    (f"postgresql+psycopg://u@/db?{TWO}&target_session_attrs=prefer-standby",
     "names several hosts: add target_session_attrs=read-write"),
    ("postgresql+psycopg://u@/db?host=h1,h2&port=5432,5433",
     "names several hosts: add target_session_attrs=read-write"),
    # the address's host was silently ignored for the query's
    ("postgresql+psycopg://u@h0:5432/db?host=h1:5432&target_session_attrs=read-write",
     "names a host both after the @ (h0) and in ?host= (h1:5432): name them all in ?host="),
    # SQLAlchemy's answer was "invalid literal for int() with base 10: '5433,h2:5432'"
    ("postgresql+psycopg://u@h1:5433,h2:5432/db?target_session_attrs=read-write",
     "is no database URL: several hosts go in the query: "
     "?host=h1:5433&host=h2:5432&target_session_attrs=read-write"),
    # the server said so only when connecting, taken for an outage and tried for ever
    (f"postgresql+psycopg://u@/db?{TWO}&target_session_attrs=readwrite",
     "target_session_attrs=readwrite: libpq knows only any, read-write, read-only, primary, "
     "standby, prefer-standby"),
    ("postgresql+psycopg://u@/db?host=127.0.0.1:54x2&host=h2&target_session_attrs=read-write",
     "the port of host 127.0.0.1:54x2 is no number"),
    ("postgresql+psycopg://u@/db?host=h1:5432&host=&target_session_attrs=read-write",
     "an empty ?host="),
])
def test_a_bad_multi_host_url_is_refused_naming_what_is_wrong(url, problem):
    with pytest.raises(urls.DatabaseUrlError) as caught:
        make_engine(url)
    assert problem in str(caught.value)
    assert isinstance(caught.value, FornaceError)   # `fornace api` prints it in one line
    with pytest.raises(urls.DatabaseUrlError):
        upgrade(url)                                  # before any connection is tried


@pytest.mark.parametrize("url", [
    f"postgresql+psycopg://u@/db?{TWO}&target_session_attrs=read-write",
    f"postgresql+psycopg://u@/db?{TWO}&target_session_attrs=primary",
    "postgresql+psycopg://u@/db?host=h1,h2&port=5432,5433&target_session_attrs=read-write",
    "postgresql+psycopg://u:pw@127.0.0.1:5432/db",
    "postgresql+psycopg://u@/db?host=/var/run/postgresql",
    "sqlite:///some/file.sqlite",
])
def test_good_urls_pass(url):
    assert urls.checked(url).drivername


def test_the_url_shown_names_every_host_with_every_password_masked():
    url = ("postgresql+psycopg://fornace:s3cret-pw@/fornace?host=db1.example:5432"
           "&host=db2.example:5433&target_session_attrs=read-write&password=s3cret-too")
    shown = urls.shown(url)
    assert shown == ("postgresql+psycopg://fornace:***@/fornace?host=db1.example:5432"
                     "&host=db2.example:5433&target_session_attrs=read-write&password=***")
    with pytest.raises(urls.DatabaseUrlError) as caught:   # in an error too
        urls.checked(url.replace("&target_session_attrs=read-write", ""))
    assert "db1.example:5432" in str(caught.value) and "db2.example:5433" in str(caught.value)
    assert "s3cret" not in str(caught.value)


@pytest.fixture
def silent_host():
    """A port that accepts TCP connections and never answers (a host whose
    server hangs, or a machine gone behind a firewall that drops packets)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_a_silent_first_host_is_left_after_the_connect_timeout_for_the_next(
        silent_host, monkeypatch):
    """Regression: without a connect_timeout in the URL every new connection
    waited on the silent host for psycopg's own limit (over a minute, measured),
    a pool's worth of requests in a row."""
    monkeypatch.setattr(urls, "CONNECT_TIMEOUT", 2)
    base = urls.checked(postgres_url())
    url = (f"postgresql+psycopg://{base.username}@/{base.database}?host={silent_host}"
           f"&host={base.host}:{base.port or 5432}&target_session_attrs=read-write")
    engine = make_engine(url)
    try:
        def port() -> int:
            with engine.connect() as connection:
                return connection.execute(text("SELECT inet_server_port()")).scalar()
        assert returns(port, "a connection past the silent host", timeout=20) == \
            (base.port or 5432)
    finally:
        engine.dispose()


def test_a_connect_timeout_the_url_names_is_kept():
    url = urls.checked(f"postgresql+psycopg://u@/db?{TWO}&target_session_attrs=read-write"
                       "&connect_timeout=30")
    assert urls.connect_args(url) == {}
    assert urls.connect_args(urls.checked("postgresql+psycopg://u@h/db")) == \
        {"connect_timeout": urls.CONNECT_TIMEOUT}
    assert urls.connect_args(urls.checked("sqlite://")) == {}
