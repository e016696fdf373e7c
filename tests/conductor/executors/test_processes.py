"""The /proc supervisor of local "VMs": start, watch and stop an instance's processes."""
from __future__ import annotations

import os
import sys
import uuid

from fornace.conductor.executors import processes
from fornace.conductor.executors.processes import TOKEN_VARIABLE
from waiting import wait_for


def alive(pid: int) -> bool:
    stat = processes.stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def started(tmp_path, script: str, token: str) -> dict:
    """Start ``script`` as a boot process; its instance info as ``instance.json`` holds it."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), TOKEN_VARIABLE: token}
    with open(tmp_path / "console.log", "ab") as log:
        process = processes.start(["/bin/sh", "-c", script], tmp_path, log, env)
    return {"instance": "vm", "pid": process.pid, "token": token,
            "start_time": processes.stat(process.pid)[2]}


def test_a_boot_process_that_exits_says_its_code(tmp_path):
    quick = started(tmp_path, "exit 3", uuid.uuid4().hex)
    wait_for(lambda: not processes.running(quick), what="the boot process to exit")
    assert processes.exit_code(quick["pid"]) == 3


def test_a_stopped_boot_process_is_forgotten(tmp_path):
    info = started(tmp_path, "exec sleep 60", uuid.uuid4().hex)
    assert processes.running(info) and processes.exit_code(info["pid"]) is None
    processes.stop_instances([info], timeout=10)
    assert not processes.running(info)
    assert processes.exit_code(info["pid"]) is None   # reaped, no longer ours


def test_a_recorded_process_is_not_one_with_a_reused_pid(tmp_path):
    info = started(tmp_path, "exec sleep 60", uuid.uuid4().hex)
    try:
        assert processes.running(info)
        assert not processes.running({**info, "start_time": info["start_time"] - 1})
        assert not processes.running({"instance": "vm"})
    finally:
        processes.stop_instances([info], timeout=10)


def test_stopping_an_instance_stops_its_group_and_every_process_with_its_token(tmp_path):
    token = uuid.uuid4().hex
    # a child in the boot process's group, and one in a session of its own (as a
    # command the agent runs) that only the token ties to the instance
    info = started(tmp_path, f"sleep 60 & {sys.executable} -c "
                             f"'import os, time; os.setsid(); time.sleep(60)' & wait", token)
    wait_for(lambda: len(processes.members([info])) >= 3, what="the three processes")
    members = processes.members([info])
    processes.stop_instances([info], timeout=10)
    wait_for(lambda: not any(alive(pid) for pid in members), what="every process to stop")
    assert processes.members([info]) == []
