"""Abandon and delete of an environment whose stack is held by a frozen conductor,
end to end (``fornace up``: the API, the conductor and the local cloud's real
agents): its processes are stopped and its stack removed once the frozen
holder's lease lapses, without waiting for it to wake."""
from __future__ import annotations

import pytest

from apikit import free_port
from fornace.cli.client.http import ApiClient, ClientError
from localkit import end_holder, frozen_holder, processes_with, running_onebox
from waiting import wait_for

LEASE = 3.0      # [conductor] lock_stale_after: the stacks' lease time too
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    yield from running_onebox(tmp_path_factory.mktemp("frozen") / "state",
                              overrides={"conductor": {"lock_stale_after": LEASE}})


def site(name: str) -> dict:
    return {"name": name, "type": "linuxWebServer", "port": free_port(),
            "unitNamingPattern": f"{name}#", "osImage": {"name": "local", "type": "linux"},
            "units": [{}]}


def deploy(client: ApiClient, env_id: str, service: dict) -> None:
    """Add ``service`` in a new session and deploy it (not waited for)."""
    session = client.post(f"/environments/{env_id}/configure")["id"]
    client.post(f"/environments/{env_id}/services", service, session=session)
    client.post(f"/environments/{env_id}/sessions/{session}/deploy")


def status(client: ApiClient, env_id: str) -> str:
    try:
        return client.get(f"/environments/{env_id}")["status"]
    except ClientError as exc:
        if exc.status == 404:
            return "gone"
        raise


def deployed(box, name: str) -> tuple[ApiClient, str]:
    client = ApiClient(box.url)
    env_id = client.post("/environments", {"name": name})["id"]
    deploy(client, env_id, site("web"))
    wait_for(lambda: status(client, env_id) not in ("deploying", "pending"),
             f"the deployment of {name}", timeout=TIMEOUT)
    assert status(client, env_id) == "ready"
    return client, env_id


def frozen_in_its_stack(box, env_id: str):
    """A conductor frozen in a round of the environment's stack, having started
    one more instance; the stack's processes are then the units' and that one's."""
    stack = f"e{env_id}"
    holder = frozen_holder(box.cloud.state_dir, LEASE, stack, {"Resources": {"extra": {
        "Type": "OS::Nova::Server",
        "Properties": {"image": "local", "user_data": "#!/bin/sh\nexec sleep 300\n"}}}})
    instances = box.cloud.instances(stack)
    assert "extra" in instances and len(instances) >= 2
    assert processes_with(f"FORNACE_STACK={stack}")
    return holder


def left(box, env_id: str) -> list[str]:
    """What of the environment's stack is still there."""
    stack = f"e{env_id}"
    found = []
    if (box.cloud.state_dir / stack).exists():
        found.append("its stack folder")
    if pids := processes_with(f"FORNACE_STACK={stack}"):
        found.append(f"{len(pids)} process(es)")
    return found


def test_delete_with_abandon_removes_a_frozen_holders_stack(box):
    """Regression: ``DELETE ?abandon=true`` answered 200 but the stack folder and
    its processes stayed until the frozen conductor resumed."""
    client, env_id = deployed(box, "frozen-forget")
    holder = frozen_in_its_stack(box, env_id)
    try:
        client.request("DELETE", f"/environments/{env_id}?abandon=true")
        assert status(client, env_id) == "gone"
        wait_for(lambda: not left(box, env_id), "the clean-up of the frozen holder's stack",
                 timeout=TIMEOUT, explain=lambda: ", ".join(left(box, env_id)))
    finally:
        end_holder(holder)


def test_abandon_then_delete_removes_a_frozen_holders_stack(box):
    """Regression: a job stuck behind a frozen conductor's stack step was abandoned
    (200), and the deletion that followed waited on the stack for ever."""
    client, env_id = deployed(box, "frozen-abandon")
    holder = frozen_in_its_stack(box, env_id)
    try:
        deploy(client, env_id, site("more"))    # its round waits on the frozen holder
        wait_for(lambda: box.conductor.locks.holder(env_id), "the conductor to run the job")
        assert client.post(f"/environments/{env_id}/abandon")["state"] == "abandoned"
        client.request("DELETE", f"/environments/{env_id}")   # a 409 if still busy
        wait_for(lambda: status(client, env_id) == "gone", "the deletion", timeout=TIMEOUT)
        wait_for(lambda: not left(box, env_id), "the frozen holder's stack to be removed",
                 timeout=TIMEOUT, explain=lambda: ", ".join(left(box, env_id)))
    finally:
        end_holder(holder)
