"""tools/chaos.py, three runs: faults during real deployments on RabbitMQ and
PostgreSQL (one of each fault kind the seed picks), checked from the outside.
The closing note of the exactly-once issue quotes a 20-run one."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from services import amqp_url, pg_server_tool, postgres_url, rabbitmqctl_works, require

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1200)   # above the tool's own 900 s limit
def test_three_chaos_runs_lose_nothing_and_double_nothing():
    postgres_url()                       # skip (or fail) as the services do without
    amqp_url()                           # PostgreSQL, RabbitMQ or rabbitmqctl
    require("rabbitmqctl (the tool makes a vhost and closes connections)",
            rabbitmqctl_works())
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "chaos.py"), "--runs", "3",
                           "--seed", "5", "--faults", "kill-conductor,close-connection,kill-api"],
                          capture_output=True, text=True, timeout=900)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    found = re.fullmatch(r"3 runs: (\d) finished, (\d+) doubled, (\d+) lost, (\d+) two-holders, "
                         r"worst recovery [\d.]+ s", summary)
    assert found, summary
    assert found.groups()[1:] == ("0", "0", "0"), summary
    runs = [line for line in done.stdout.splitlines() if line.startswith("run ")]
    assert len(runs) == 3 and all("NOT ENDED" not in line for line in runs), runs
    # deleted afterwards: no process, stack or queue of the environment is left
    assert all(line.endswith("left after deletion: nothing") for line in runs), runs


@pytest.mark.timeout(1200)
def test_a_frozen_holder_a_late_copy_and_an_outage_at_release_lose_and_double_nothing():
    """The faults of the exactly-once-on-clusters issue, one run each: a conductor
    frozen (SIGSTOP) past lock_stale_after is taken over and, woken, changes
    nothing; an ended job's task sent again past lock_stale_after is acknowledged
    unrun; PostgreSQL (a private cluster) down as a job frees its lock, and the
    next job runs instead of being refused."""
    postgres_url()
    amqp_url()
    require("rabbitmqctl (the tool makes a vhost)", rabbitmqctl_works())
    pg_server_tool()                     # release-outage stops a private PostgreSQL
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "chaos.py"), "--runs", "3",
                           "--in-order", "--slow", "2", "--strike-within", "2",
                           "--faults", "freeze-conductor,late-redelivery,release-outage"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    runs = [line for line in done.stdout.splitlines() if line.startswith("run ")]
    assert len(runs) == 3, done.stdout
    freeze, late, outage = runs
    # taken over while it was frozen (the tool prints after how long)
    assert re.search(r"stopped for [\d.]+ s, taken over after [\d.]+ s", freeze), freeze
    assert "acknowledged without running" in late, late
    assert "a redeploy then ended success" in outage, outage
    assert all("status ready" in line and "two holders no" in line and "doubled 0" in line
               for line in runs), runs
    assert done.stdout.strip().splitlines()[-1].startswith("3 runs: 3 finished, 0 doubled, "
                                                           "0 lost, 0 two-holders"), done.stdout
