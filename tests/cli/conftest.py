"""Fixtures of the client commands' tests: a running Fornace (API, conductor and
the local cloud's real agents on a folder broker and SQLite), started once per
module, and ``cli`` to run ``fornace`` against it."""
from __future__ import annotations

import pytest

from clikit import Runner, runner
from localkit import running_onebox


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    yield from running_onebox(tmp_path_factory.mktemp("cli-client") / "state")


@pytest.fixture
def cli(box, tmp_path) -> Runner:
    """Runs ``fornace ARGS`` against the box; its sessions file is the test's own."""
    return runner(box.url, tmp_path)
