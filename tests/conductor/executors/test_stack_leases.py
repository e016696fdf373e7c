"""The local cloud's stack leases: a frozen holder is taken over after the lease
time and, once it wakes, changes nothing; a live holder keeps its lease."""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from fornace.cli.main import build_conf
from fornace.conductor.executors.base import StackFailure, StackRequest
from fornace.conductor.executors.localcloud import LocalStacks
from localkit import end_holder, frozen_holder, instance_processes, processes_with
from waiting import returns, wait_for

LEASE = 1.5          # [conductor] lock_stale_after of these tests' conductors
SLEEPER = "#!/bin/sh\nexec sleep 300\n"


def vm(user_data: str = SLEEPER) -> dict:
    return {"Type": "OS::Nova::Server", "Properties": {"image": "img", "user_data": user_data}}


def conductor_stacks(cloud: Path) -> LocalStacks:
    """The local cloud as ``fornace conductor --stacks local`` makes it."""
    conf = build_conf()
    conf(["conductor", "--stacks", "local"], project="fornace", prog="fornace",
         default_config_files=[], default_config_dirs=[])
    conf.set_override("cloud_dir", str(cloud), group="conductor")
    conf.set_override("lock_stale_after", LEASE, group="conductor")
    return LocalStacks.factory(conf)(None)


def state_files(stack_dir: Path) -> dict[str, str]:
    """The stack's state: its template and each instance's record."""
    return {str(path.relative_to(stack_dir)): path.read_text()
            for path in [stack_dir / "template.json", *stack_dir.glob("*/instance.json")]}


@pytest.fixture
def cloud(tmp_path):
    stacks = conductor_stacks(tmp_path / "cloud")
    made: list[str] = []
    yield stacks, made
    for name in made:     # never leave processes behind
        stacks.delete(name)


def test_a_frozen_holder_is_taken_over_and_changes_nothing_once_it_wakes(cloud):
    """Regression: a conductor frozen inside the stack step kept the stack's flock,
    and the next holder waited on it for ever."""
    stacks, made = cloud
    made.append("efrozen")
    stack_dir = stacks.state_dir / "efrozen"
    holder = frozen_holder(stacks.state_dir, LEASE, "efrozen",
                           {"Resources": {"a": vm(), "b": vm()}})
    try:
        # frozen after starting a's boot process, before recording its pid
        first = stacks.instances("efrozen")["a"]
        assert "pid" not in first and instance_processes(first["token"])

        returns(lambda: stacks.apply(StackRequest("efrozen", {"Resources": {"c": vm()}}, {})),
                "the second holder's apply (the lease lapses after 1.5 s)", timeout=60)

        instances = stacks.instances("efrozen")
        assert set(instances) == {"a", "b", "c"}
        assert all(info["running"] for info in instances.values())
        assert instances["a"]["token"] != first["token"]
        assert not instance_processes(first["token"])   # what the frozen one started
        before = state_files(stack_dir)
        running = sorted(processes_with("FORNACE_STACK=efrozen"))

        os.kill(holder.pid, signal.SIGCONT)
        _, err = returns(lambda: holder.communicate(timeout=120), "the woken holder's end")

        assert holder.returncode == 3, err
        assert "stack efrozen: its lease was taken by " in err
        assert f":{os.getpid()}:" in err.split("taken by ", 1)[1]   # who took it
        assert state_files(stack_dir) == before          # nothing overwritten
        assert sorted(processes_with("FORNACE_STACK=efrozen")) == running   # none started
        assert not instance_processes(first["token"])
        assert stacks.leases.lease_time == LEASE     # [conductor] lock_stale_after
    finally:
        end_holder(holder)


def test_a_live_holder_keeps_its_lease_past_the_lease_time(tmp_path, caplog):
    """The lease is renewed while its step runs: a step three lease times long
    is waited for, not taken over."""
    caplog.set_level(logging.INFO, logger="fornace.conductor.executors.leases")
    slow = LocalStacks(tmp_path / "cloud", lease_time=1.0, start_grace=3.0)
    other = LocalStacks(tmp_path / "cloud", lease_time=1.0)
    outcome: list = []
    first = threading.Thread(target=lambda: outcome.append(slow.apply(
        StackRequest("elive", {"Resources": {"a": vm()}}, {}))))
    try:
        first.start()
        wait_for(lambda: slow.instances("elive").get("a", {}).get("running"),
                 "the slow holder's instance to run", timeout=30)
        returns(lambda: other.apply(StackRequest("elive", {"Resources": {"b": vm()}}, {})),
                "the second apply", timeout=60)
        returns(first.join, "the slow apply", timeout=60)
        assert outcome == [{}]
        assert "waiting for its lease" in caplog.text
        assert "taken over" not in caplog.text and "taken by" not in caplog.text
        assert all(info["running"] for info in other.instances("elive").values())
    finally:
        first.join()
        other.delete("elive")


def test_an_apply_that_waited_while_its_stack_was_deleted_does_not_make_it_again(
        tmp_path, caplog):
    """A round of a job abandoned while it waited on the stack must not bring back
    the stack that the clean-up deleted meanwhile."""
    caplog.set_level(logging.INFO, logger="fornace.conductor.executors.leases")
    stacks = LocalStacks(tmp_path / "cloud", lease_time=LEASE, stop_timeout=5)
    stubborn = "#!/bin/sh\ntrap '' TERM\nexec sleep 300\n"   # its deletion takes 5 s
    stacks.apply(StackRequest("egone", {"Resources": {"a": vm(stubborn)}}, {}))
    deletion = threading.Thread(target=stacks.delete, args=("egone",))
    late: list = []

    def late_round() -> None:
        try:
            stacks.apply(StackRequest("egone", {"Resources": {"b": vm()}}, {}))
        except StackFailure as exc:
            late.append(exc.message)
        else:
            late.append(None)
    waiting = threading.Thread(target=late_round)
    try:
        deletion.start()
        wait_for(lambda: stacks.leases.holder("egone"), "the deletion to hold the lease")
        waiting.start()
        wait_for(lambda: "egone: waiting for its lease" in caplog.text,
                 "the late round to wait for the lease", timeout=30)
        returns(waiting.join, "the late round", timeout=60)
        assert late and late[0] is not None, "the late round made the stack again"
        assert "stack egone was deleted" in late[0] and "while this round waited" in late[0]
        assert not deletion.is_alive()
        assert not (stacks.state_dir / "egone").exists()
        assert not processes_with("FORNACE_STACK=egone")
        # asked for after the deletion, the stack is made again
        stacks.apply(StackRequest("egone", {"Resources": {"b": vm()}}, {}))
        assert stacks.instances("egone")["b"]["running"]
    finally:
        deletion.join()
        if waiting.is_alive():
            waiting.join()
        stacks.delete("egone")


def test_the_lease_time_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="lease time must be positive"):
        LocalStacks(tmp_path, lease_time=0)


def test_fenced_actions_right_after_a_renewal_skip_the_write_yet_see_a_takeover(tmp_path):
    """A stack's start fences a few actions per instance: those within an eighth of
    the lease time of the last renewal do not rewrite the lease file, and each
    still checks the lease is its holder's."""
    from fornace.conductor.executors.leases import LeaseLost, Leases

    leases = Leases(tmp_path, lease_time=60)
    with leases.held("s") as lease:
        path = tmp_path / "s.lease"
        before = path.read_text()
        for _ in range(5):
            with lease.fenced():
                pass
        assert path.read_text() == before          # not rewritten
        other = Leases(tmp_path, lease_time=60)
        other._write("s", "another", lease.token + 1, 10 ** 12)   # taken over
        with pytest.raises(LeaseLost):
            with lease.fenced():
                pass


def test_a_fenced_action_renews_a_lease_renewed_long_ago(tmp_path):
    from fornace.conductor.executors.leases import Leases

    leases = Leases(tmp_path, lease_time=60)
    with leases.held("s") as lease:
        leases._write("s", lease.holder, lease.token, time.time() + 30)
        with lease.fenced():
            pass
        assert leases._read("s").expires > time.time() + 50


def test_units_started_together_get_distinct_addresses(tmp_path):
    cloud = LocalStacks(tmp_path / "cloud", start_grace=0)
    try:
        cloud.apply(StackRequest("a", {"Resources": {f"vm{i}": vm() for i in range(6)}}, {}))
        cloud.apply(StackRequest("b", {"Resources": {f"vm{i}": vm() for i in range(3)}}, {}))
        addresses = [info["address"] for stack in ("a", "b")
                     for info in cloud.instances(stack).values()]
        assert len(addresses) == 9 and len(set(addresses)) == 9
        assert all(a.startswith("127.") for a in addresses)
        kept = {n: i["address"] for n, i in cloud.instances("a").items()}
        cloud.apply(StackRequest("a", {"Resources": {"vm6": vm()}}, {}))   # one more
        assert {n: i["address"] for n, i in cloud.instances("a").items()
                if n != "vm6"} == kept
        assert cloud.instances("a")["vm6"]["address"] not in addresses
    finally:
        for stack in cloud.stack_names():
            cloud.delete(stack)
