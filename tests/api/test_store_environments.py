"""The environments store (:mod:`fornace.api.stores.environments`), called
directly: listing by tenant, names, renames and the three ways a delete goes
-- on SQLite and on the real PostgreSQL."""
from __future__ import annotations

import pytest

from fornace.api.context import Context
from fornace.api.errors import Conflict, Forbidden, NotFound, Unavailable
from fornace.common.db.models import Job, Environment
from test_jobs_api import _api, deployed

ALICE = Context("t1", "u1")
BOB = Context("t2", "u2")
ADMIN = Context("t3", "u3", is_admin=True)


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    yield from _api(request.param, tmp_path)


def test_each_tenant_lists_its_own_and_the_admin_every_one(api):
    environments = api.store.environments
    mine = environments.create(ALICE, "dc1")
    theirs = environments.create(BOB, "dc1")       # names are unique per tenant only
    assert (mine["status"], mine["version"], mine["tenant_id"]) == ("ready", 0, "t1")
    assert [e["id"] for e in environments.list(ALICE)] == [mine["id"]]
    assert [e["id"] for e in environments.list(BOB)] == [theirs["id"]]
    with pytest.raises(Forbidden, match="for the cloud admin"):
        environments.list(ALICE, "t2")
    with pytest.raises(Forbidden, match="for the cloud admin"):
        environments.list(ALICE, every_tenant=True)
    assert [e["id"] for e in environments.list(ADMIN, "t2")] == [theirs["id"]]
    assert {e["id"] for e in environments.list(ADMIN, every_tenant=True)} == \
        {mine["id"], theirs["id"]}
    assert environments.list(ADMIN, "x" * 65) == []       # no row can have that tenant


def test_show_checks_the_caller_and_the_id(api):
    environments = api.store.environments
    env = environments.create(ALICE, "dc1")
    shown = environments.get(ALICE, env["id"])
    assert (shown["name"], shown["services"], shown["status"]) == ("dc1", [], "ready")
    with pytest.raises(Forbidden, match=f"not authorized to access environment {env['id']}"):
        environments.get(BOB, env["id"])
    assert environments.get(ADMIN, env["id"])["id"] == env["id"]
    with pytest.raises(NotFound, match="environment nope not found"):
        environments.get(ALICE, "nope")
    with pytest.raises(NotFound, match="not found"):
        environments.get(ALICE, "a\x00b")                  # never sent to the database


def test_a_rename_changes_the_description_and_refuses_a_taken_name(api):
    environments = api.store.environments
    first = environments.create(ALICE, "dc1")
    second = environments.create(ALICE, "dc2")
    renamed = environments.update(ALICE, first["id"], "dc3")
    assert renamed["name"] == "dc3"
    with api.store.sessions() as db:
        assert db.get(Environment, first["id"]).description["name"] == "dc3"
    with pytest.raises(Conflict, match=f"an environment named 'dc3' exists already "
                                       f"\\(id {first['id']}\\)"):
        environments.update(ALICE, second["id"], "dc3")
    with pytest.raises(Conflict, match="'dc2' exists already"):
        environments.create(ALICE, "dc2")


def test_a_never_deployed_environment_is_forgotten_without_a_task(api):
    env = api.store.environments.create(ALICE, "dc1")
    api.store.environments.delete(ALICE, env["id"])
    assert api.published.tasks == []
    with pytest.raises(NotFound):
        api.store.environments.get(ALICE, env["id"])


def test_deleting_a_deployed_environment_is_a_delete_job(api):
    env_id, _ = deployed(api)
    with pytest.raises(Forbidden):
        api.store.environments.delete(BOB, env_id)
    api.store.environments.delete(ALICE, env_id)
    body, job_id = api.published.tasks[-1]
    assert body["job"]["action"] == "delete" and body["id"] == env_id
    assert api.store.environments.get(ALICE, env_id)["status"] == "deleting"
    with pytest.raises(Conflict, match=f"job {job_id} \\(delete\\) running since"):
        api.store.environments.update(ALICE, env_id, "other")
    with api.store.sessions() as db:
        assert db.get(Job, job_id).kind == "delete"


def test_a_delete_the_broker_refuses_leaves_the_environment_as_it_was(api):
    env_id, _ = deployed(api)
    api.published.fail = True
    with pytest.raises(Unavailable, match="nothing was started"):
        api.store.environments.delete(ALICE, env_id)
    assert api.store.environments.get(ALICE, env_id)["status"] == "ready"
    with api.store.sessions() as db:
        kinds = [d.kind for d in db.query(Job).filter_by(environment_id=env_id)]
    assert kinds == ["deploy"]                         # the delete job was undone


def test_abandon_forgets_at_once_and_still_sends_a_clean_up(api, caplog):
    env_id, _ = deployed(api)
    api.store.environments.delete(ALICE, env_id)            # a delete job runs
    api.store.environments.delete(ALICE, env_id, abandon=True)
    body, _ = api.published.tasks[-1]
    assert body["job"]["action"] == "delete" and body["id"] == env_id
    with pytest.raises(NotFound):
        api.store.environments.get(ALICE, env_id)
    other, _ = deployed(api)
    api.published.fail = True                  # the clean-up cannot go: said, not raised
    api.store.environments.delete(ALICE, other, abandon=True)
    assert f"environment {other} abandoned, but its clean-up task could not be sent" \
        in caplog.text
