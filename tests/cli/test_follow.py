"""Following a job whose environment disappears under it."""
from __future__ import annotations

from fornace.cli.client.follow import Follower
from fornace.cli.client.http import ClientError


class Vanishing:
    """An API whose environment is deleted after the first read of the job."""

    def __init__(self, action: str) -> None:
        self.action, self.reads = action, 0

    def get(self, path: str):
        if path.endswith("/jobs/j1"):
            self.reads += 1
            if self.reads > 1:
                raise ClientError(f"GET {path}: 404 environment not found", 404)
            return {"id": "j1", "action": self.action, "state": "running", "tasks": []}
        return {"reports": [{"id": "r1", "level": "info", "text": "Creating instance web1"}]}


def test_a_job_whose_environment_is_deleted_under_it_ends_abandoned():
    """Regression: `fornace deploy` following its job died on a raw 404 when a user
    ran `fornace env delete --abandon` meanwhile."""
    follower = Follower(Vanishing("deploy"), "e1", "j1", None, name="web")
    outcome = follower.follow()
    assert outcome.gone and not outcome.ok and outcome.job["state"] == "abandoned"
    assert [r["id"] for r in outcome.reports] == ["r1"]          # what was seen is kept
    assert follower.ending(outcome).startswith("deploy FAILED (abandoned): environment web "
                                               "was deleted while job j1 ran")


def test_a_deletion_that_succeeded_still_ends_well():
    follower = Follower(Vanishing("delete"), "e1", "j1", None, deleting=True, name="web")
    outcome = follower.follow()
    assert outcome.gone and outcome.ok
    assert follower.ending(outcome).startswith("environment web deleted in")
