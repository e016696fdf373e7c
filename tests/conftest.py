"""Fixtures every test may use: ``catalog`` (a temporary Murano 0.2-style catalog
folder, see :class:`enginekit.Catalog`) and ``amqp_vhost`` (a RabbitMQ virtual host
of the test's own).  Helpers are imported from their modules (enginekit, apikit,
localkit...), never from a conftest: several folders have one."""
from __future__ import annotations

from pathlib import Path

import pytest

from enginekit import Catalog


TEST_CLIENT_HOST = "testserver"   # the Host header of Starlette's TestClient


@pytest.fixture(autouse=True, scope="session")
def test_client_host():
    """The in-process apps serve TestClient's Host (``testserver``) too, as they
    serve localhost: a test setting only, the API never accepts it by itself
    (:mod:`fornace.api.hosts`)."""
    from fornace.api import hosts
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hosts, "LOOPBACK", hosts.LOOPBACK + (TEST_CLIENT_HOST,))
        yield


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return Catalog(tmp_path / "catalog")


@pytest.fixture
def amqp_vhost():
    """The URL of a RabbitMQ virtual host of this test's own (deleted after it)."""
    from services import private_vhost
    with private_vhost() as rabbit:
        yield rabbit.url
