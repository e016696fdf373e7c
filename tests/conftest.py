"""Fixtures every test may use: ``catalog`` (a temporary Murano 0.2-style catalog
folder, see :class:`enginekit.Catalog`) and ``amqp_vhost`` (a RabbitMQ virtual host
of the test's own).  Helpers are imported from their modules (enginekit, apikit,
localkit...), never from a conftest: several folders have one."""
from __future__ import annotations

from pathlib import Path

import pytest

from enginekit import Catalog


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return Catalog(tmp_path / "catalog")


@pytest.fixture
def amqp_vhost():
    """The URL of a RabbitMQ virtual host of this test's own (deleted after it)."""
    from services import private_vhost
    with private_vhost() as rabbit:
        yield rabbit.url
