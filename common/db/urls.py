"""Database URLs: what Fornace accepts of one, and how it shows one.

A PostgreSQL URL may name several hosts -- a primary and its standbys -- the
way SQLAlchemy's psycopg dialect passes them to libpq, in its query::

    postgresql+psycopg://fornace@/fornace?host=db1:5432&host=db2:5432&target_session_attrs=read-write

(or ``?host=db1,db2&port=5432,5432``).  libpq tries them in turn and keeps
the first that matches ``target_session_attrs``; Fornace writes, so a URL of
several hosts must ask for ``read-write`` (or ``primary``): without it a
connection may land on a standby, where every write fails.  A URL that
cannot work is refused before anything connects (:class:`DatabaseUrlError`,
naming what is wrong), not found out as a connection error -- which would be
taken for an outage and tried again for ever.

Each host gets :data:`CONNECT_TIMEOUT` seconds to answer unless the URL says
``connect_timeout``: a host that is down without refusing (a machine gone,
packets dropped) would otherwise hold every new connection for over a minute
before the next host is tried.

:func:`shown` is the URL as logs and errors show it: every host, every
password (after the user, or ``?password=``) masked.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy import URL, make_url
from sqlalchemy.exc import ArgumentError

from fornace.common.errors import FornaceError

#: libpq's values of target_session_attrs
TARGETS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
WRITABLE = ("read-write", "primary")
#: seconds each host has to answer when the URL names no connect_timeout
CONNECT_TIMEOUT = 10
MASK = "***"

# scheme://user:password@ of a URL SQLAlchemy cannot parse (to the last @)
_UNPARSED_PASSWORD = re.compile(r"(//[^:/@]*):.*@")


class DatabaseUrlError(FornaceError, ValueError):
    """A database URL Fornace cannot use, with what is wrong (password masked)."""

    def __init__(self, url: str, problem: str) -> None:
        super().__init__(f"the database {url} {problem}")
        self.shown = url
        self.problem = problem


def checked(url: str) -> URL:
    """``url`` parsed; :class:`DatabaseUrlError` when it is no URL or names its
    PostgreSQL hosts in a way that cannot work (see the module's text)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):   # ValueError: a port that is no number
        raise DatabaseUrlError(_unparsed(url), _unparseable_reason(url)) from None
    if parsed.get_backend_name() == "postgresql":
        problem = _hosts_problem(parsed, urlsplit(url).query)
        if problem:
            raise DatabaseUrlError(shown(url), problem)
    return parsed


def connect_args(url: URL) -> dict:
    """What :func:`sqlalchemy.create_engine` passes to the driver besides the
    URL: a connect timeout per host for PostgreSQL (unless the URL has one)."""
    if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
        return {"connect_timeout": CONNECT_TIMEOUT}
    return {}


def shown(url: str | URL) -> str:
    """The URL for a log or an error: every host as written, passwords masked."""
    text = url.render_as_string(hide_password=False) if isinstance(url, URL) else url
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError):
        return _unparsed(text)
    base = parsed.set(query={}).render_as_string(hide_password=True)
    query = urlsplit(text).query
    if not query:
        return base
    pairs = [f"{key}={MASK if key == 'password' else value}"
             for key, value in parse_qsl(query, keep_blank_values=True)]
    return f"{base}?{'&'.join(pairs)}"


def passwords(url: str) -> list[str]:
    """The passwords ``url`` holds (after the user, ``?password=``): what an
    error quoting it must mask."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return []
    found = [str(parsed.password)] if parsed.password else []
    given = parsed.query.get("password")
    found += [given] if isinstance(given, str) else list(given or ())
    return [value for value in found if value]


def _unparsed(url: str) -> str:
    """A URL SQLAlchemy cannot parse, without what may be its password."""
    return _UNPARSED_PASSWORD.sub(lambda found: f"{found[1]}:{MASK}@", url)


def _unparseable_reason(url: str) -> str:
    netloc = urlsplit(url).netloc.rsplit("@", 1)[-1] if "://" in url else ""
    if "," in netloc:   # libpq's own URLs list hosts there; SQLAlchemy's do not
        hosts = "&".join(f"host={host}" for host in netloc.split(","))
        return (f"is no database URL: several hosts go in the query: "
                f"?{hosts}&target_session_attrs=read-write")
    return "is no database URL: dialect+driver://user:password@host:port/name expected"


def _hosts_problem(url: URL, query: str) -> str | None:
    """What is wrong with the hosts a PostgreSQL URL names (None: nothing);
    ``query``: its query as written (SQLAlchemy drops empty values)."""
    listed = [value for key, value in parse_qsl(query, keep_blank_values=True) if key == "host"]
    hosts = [host for entry in listed for host in entry.split(",")]
    if url.host and hosts:
        return (f"names a host both after the @ ({url.host}) and in ?host= "
                f"({', '.join(hosts)}): name them all in ?host=")
    if any(not host.strip() for host in hosts):
        return "has an empty ?host="
    for host in hosts:
        if not host.startswith("/") and ":" in host and not host.rsplit(":", 1)[1].isdigit():
            return f"is no database URL: the port of host {host} is no number"
    target = url.query.get("target_session_attrs")
    if target is not None and (not isinstance(target, str) or target not in TARGETS):
        return (f"has target_session_attrs={target}: libpq knows only {', '.join(TARGETS)}"
                if isinstance(target, str) else "gives target_session_attrs more than once")
    if len(hosts) > 1 and target not in WRITABLE:
        return ("names several hosts: add target_session_attrs=read-write (libpq would "
                "connect to whichever answers first, maybe a standby, where every write "
                "fails)")
    return None
