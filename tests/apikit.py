"""Helpers for the API tests: an API on a fresh database with a recording publisher."""
from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from fastapi.testclient import TestClient
from sqlalchemy import text

from fornace.api.app import create_app
from fornace.api.auth import NoAuth
from fornace.api.stores.jobs import Jobs
from fornace.api.stores.store import Store
from fornace.common.catalog import Catalog
from fornace.common.db.engine import make_engine, session_factory, upgrade


@dataclass
class Published:
    tasks: list[tuple[dict, str]] = field(default_factory=list)
    fail: bool = False

    def __call__(self, body: dict, message_id: str) -> None:
        if self.fail:
            raise ConnectionError("broker down")
        self.tasks.append((body, message_id))


@dataclass
class Api:
    client: TestClient
    store: Store
    published: Published
    jobs: Jobs | None = None

    def as_tenant(self, tenant: str, user: str = "u1") -> dict[str, str]:
        return {"X-Tenant-Id": tenant, "X-User-Id": user}


def make_api(url: str, max_body_size: int = 1024 * 1024,
             catalog: Catalog | None = None, pre_ping: bool = True) -> Api:
    upgrade(url)
    engine = make_engine(url, pre_ping=pre_ping)
    published = Published()
    store = Store(session_factory(engine), published, catalog)
    jobs = Jobs(store)
    app = create_app(store, NoAuth("t1", "u1"), max_body_size, jobs)
    return Api(TestClient(app, raise_server_exceptions=False), store, published, jobs)


def reset_postgres(url: str) -> None:
    """Drop every table of the test database (tests start from an empty schema)."""
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def migrated_database(kind: str, folder: Path) -> Iterator[str]:
    """For a fixture: the URL of a migrated database of the test's own -- a
    SQLite file in ``folder`` (``kind`` "sqlite"), or the run's PostgreSQL,
    emptied before and after."""
    if kind == "sqlite":
        url = f"sqlite:///{folder / 'fornace.sqlite'}"
        upgrade(url)
        yield url
        return
    from services import postgres_url

    url = postgres_url()
    reset_postgres(url)
    upgrade(url)
    yield url
    reset_postgres(url)


def web_server(name: str = "frontend", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": "webServer", "adminPassword": "P@ssw0rd-web",
            "domain": "acme.loc", "units": [{"location": "west-dc"}], **extra}


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ChosenCallers:
    """An authenticator whose tokens are the names of ``callers`` (contexts a
    test chooses: roles, projects, the cloud admin)."""

    def __init__(self, callers: dict[str, Any]) -> None:
        self.callers = callers

    def context(self, headers: Any) -> Any:
        from fornace.api.errors import Unauthorized
        token = headers.get("x-auth-token") or ""
        if token not in self.callers:
            raise Unauthorized("not a caller of the test")
        return self.callers[token]


def api_conf_file(folder: Path, text: str) -> Any:
    """The API's options (oslo.config) read from a file ``fornace.conf`` in
    ``folder`` holding ``text``, and no other file."""
    from oslo_config import cfg

    from fornace.api import config

    path = folder / "fornace.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    config.register(conf)
    conf(["--config-file", str(path)], default_config_files=[], default_config_dirs=[])
    return conf
