"""``fornace dead-letters list``: the messages the API set aside, as the
cloud admin sees them (an API on a real port whose tokens name chosen
callers: a cloud admin and a project member)."""
from __future__ import annotations

import json
from fastapi.testclient import TestClient

from apikit import ChosenCallers
from clikit import one_line_error, ok, runner
from fornace.api.app import create_app
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.common import contract
from fornace.common.consumer import Delivery
from fornace.common.db.engine import make_engine, session_factory, upgrade
from serving import serving

CALLERS = {
    "root": Context("p-admin", "u-root", roles=frozenset({"admin", "member"}),
                    user_name="root", project_name="admin", project_domain_id="default"),
    "mia": Context("p-a", "u-mia", roles=frozenset({"admin", "member"}), user_name="mia",
                   project_name="demo-a", project_domain_id="default"),
}


def test_the_cloud_admin_lists_dead_letters_a_member_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'dead.sqlite'}"
    upgrade(url)
    store = Store(session_factory(make_engine(url)), lambda body, message_id: None)
    app = create_app(store, ChosenCallers(CALLERS))
    env = TestClient(app).post("/environments", json={"name": "web"},
                               headers={"X-Auth-Token": "mia"}).json()["id"]
    store.dead_letters.set_aside([(
        contract.report_body(env, "environment", "nul \x00", "info", env),
        Delivery(f"{'j' * 32}-report-7", contract.REPORTS),
        contract.ContractError("the database cannot hold its values: PostgreSQL text "
                               "fields cannot contain NUL (0x00) bytes"))])
    with serving(app) as api_url:
        run = runner(api_url, tmp_path)
        table = ok(run("dead-letters", "list", "--token", "root"))
        assert table.splitlines()[0].split() == ["CREATED", "QUEUE", "KIND", "TENANT", "JOB",
                                                 "MESSAGE", "REASON"]
        assert "task-reports" in table and "p-a" in table and "cannot hold" in table
        listed = json.loads(ok(run("dead-letters", "list", "--token", "root", "--project",
                                   "p-a", "-f", "json")))
        assert [(d["kind"], d["environment_id"], d["message_id"])
                for d in listed["dead_letters"]] == [("report", env, f"{'j' * 32}-report-7")]
        assert "\\u0000" in listed["dead_letters"][0]["body"]
        assert ok(run("dead-letters", "list", "--token", "root", "--project", "p-b")) \
            .strip() == "(no dead letters)"
        error = one_line_error(run("dead-letters", "list", "--token", "mia"), 3)
        assert "dead_letter:list is not allowed" in error
