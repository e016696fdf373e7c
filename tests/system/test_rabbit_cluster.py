"""A deployment on a 3-node RabbitMQ cluster with quorum queues survives the loss
of the node its conductor is connected to, with nothing lost.

The cluster is private (``tools/rabbitcluster.py``: nodes on spare ports, one
cookie of their own; the machine's node is never touched), started once for
the module. Everything else is as in ``test_faults``: the API in this process
(its consumers on the cluster), a ``fornace conductor --stacks local``
subprocess, and local cloud instances running real ``fornace agent``
processes, all given the failover URL of the three nodes, the agents through
the configuration the conductor renders for them.
"""
from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import pytest

from apikit import free_port
from services import Rabbit, private_cluster
from test_faults import assert_deployed_once, open_world
from waiting import wait_for

WAIT = 180.0     # generous limit of the waits after the node loss: only against a hang


@pytest.fixture(scope="module")
def cluster():
    with private_cluster(3) as started:
        yield started


@pytest.fixture
def world(cluster):
    first = cluster.nodes[0]
    rabbit = Rabbit(cluster.url(), "127.0.0.1", first.port, "guest", "guest", "/")
    with open_world(rabbit, queue_type="quorum", agents_get_every_node=True) as made:
        yield made


def remote_ports(pid: int) -> set[int]:
    """The remote TCP ports of ``pid``'s established connections (from /proc)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes and fields[3] == "01":   # ESTABLISHED
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


def test_a_deployment_survives_the_loss_of_its_conductors_node(cluster, world):
    """Kill (SIGKILL) the node the conductor is connected to when the job's first
    report is stored, while both units wait in their plan: the conductor, the
    agents and the API move to the other nodes, the quorum queues keep every
    message, and the deployment ends ready with every report stored once and
    each unit's script run once."""
    assert all(n.name.startswith("fornace-") for n in cluster.nodes)   # never rabbit@
    port = free_port()
    conductor = world.start_conductor(agent_timeout=240)
    env_id, deployment_id = world.deploy("site", units=2, port=port)
    wait_for(lambda: world.stored_reports(deployment_id), "the job's first report",
             explain=world.explain)

    # the node of the conductor's connections (every client tries node 1 first)
    node = next(n for n in cluster.nodes if n.port in remote_ports(conductor.pid))
    assert node is cluster.nodes[0]
    reports_before = len(world.stored_reports(deployment_id))
    cluster.kill(node)
    killed = time.monotonic()
    survivors = [n for n in cluster.nodes if n is not node]

    # the conductor reconnects to a survivor; the next report reaches the API
    wait_for(lambda: len(world.stored_reports(deployment_id)) > reports_before,
             "a report sent after the node loss", timeout=WAIT, explain=world.explain)
    resumed = time.monotonic() - killed
    wait_for(lambda: world.started("web1") and world.started("web2"),
             "both units to run their deployment script", timeout=WAIT,
             explain=world.explain)
    world.open_gate()
    environment = world.wait_end(env_id, timeout=WAIT)
    ended = time.monotonic() - killed
    assert environment["status"] == "ready", world.texts(env_id)
    assert any(n.port in remote_ports(conductor.pid) for n in survivors), \
        "the conductor is not connected to a surviving node"
    addresses = assert_deployed_once(world, environment, deployment_id, port)
    assert conductor.poll() is None
    for address in addresses.values():
        with urllib.request.urlopen(f"http://{address}:{port}/", timeout=10) as page:
            assert "<h1>site</h1>" in page.read().decode()
    print(f"\nnode {node.name} killed: first report after it {resumed:.1f} s later, "
          f"deployment ready {ended:.1f} s later")
