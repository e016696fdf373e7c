"""``fornace gc``: stacks (local cloud, Heat) and queues of environments that are gone."""
from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from fornace.cli.main import main
from fornace.common.broker import Broker
from fornace.common.db import queues
from fornace.common.db.engine import make_engine, upgrade
from fornace.common.db.models import Environment
from fornace.conductor.executors.base import StackRequest
from fornace.conductor.executors.localcloud import LocalStacks
from localkit import alive
from services import heat_url

SCRIPT = "#!/bin/sh\nexec sleep 300\n"


def vm() -> dict:
    return {"Resources": {"vm": {"Type": "AWS::EC2::Instance", "Properties": {
        "ImageId": "img", "UserData": SCRIPT}}}}


def database(tmp_path, queues_of: dict[str, list[str]] | None = None) -> str:
    """A database with the environment ``known1`` and written-down queues."""
    db = f"sqlite:///{tmp_path / 'f.sqlite'}"
    upgrade(db)
    engine = make_engine(db)
    with Session(engine) as session:
        session.add(Environment(id="known1", name="k", tenant_id="t", description={}))
        session.commit()
    with engine.begin() as connection:
        for environment_id, names in (queues_of or {}).items():
            queues.record(connection, environment_id, names)
    engine.dispose()
    return db


def test_gc_lists_then_removes_only_the_orphans(tmp_path, capsys):
    db = database(tmp_path)
    cloud = LocalStacks(tmp_path / "cloud", stop_timeout=10)
    try:
        cloud.apply(StackRequest("eknown1", vm(), {}))
        cloud.apply(StackRequest("egone1", vm(), {}))
        orphan_pid = cloud.instances("egone1")["vm"]["pid"]
        conf = tmp_path / "fornace.conf"
        conf.write_text(f"[conductor]\ncloud_dir = {tmp_path / 'cloud'}\n"
                        f"[database]\nconnection = {db}\n")
        assert main(["--config-file", str(conf), "gc"]) == 1
        out = capsys.readouterr().out
        assert "orphaned stack egone1 (local): 1 instance(s), 1 running" in out
        assert "eknown1" not in out
        assert main(["--config-file", str(conf), "gc", "--remove"]) == 0
        assert "removed stack egone1" in capsys.readouterr().out
        assert cloud.stack_names() == ["eknown1"] and not alive(orphan_pid)
        assert main(["--config-file", str(conf), "gc"]) == 0
        assert "no orphaned stacks or queues" in capsys.readouterr().out
    finally:
        for name in cloud.stack_names():
            cloud.delete(name)


def test_gc_removes_the_queues_of_environments_that_are_gone(tmp_path, capsys):
    broker_url = f"filesystem://{tmp_path}/broker"
    db = database(tmp_path, {"known1": ["eknown1-s-u"], "gone2": ["egone2-s-u", "-results-egone2"]})
    conf = tmp_path / "fornace.conf"
    conf.write_text(f"[broker]\nurl = {broker_url}\n[conductor]\ncloud_dir = {tmp_path / 'c'}\n"
                    f"[database]\nconnection = {db}\n")
    with Broker(broker_url) as broker:
        for name in ("eknown1-s-u", "egone2-s-u", "-results-egone2"):
            broker.publish(name, {"plan": name}, name)
        assert main(["--config-file", str(conf), "gc"]) == 1
        out = capsys.readouterr().out
        assert "orphaned queue egone2-s-u (environment gone2)" in out
        assert "orphaned queue -results-egone2 (environment gone2)" in out
        assert "eknown1" not in out
        assert main(["--config-file", str(conf), "gc", "--remove"]) == 0
        assert "removed queue egone2-s-u" in capsys.readouterr().out
        assert broker.drain("egone2-s-u", timeout=0.2) == []       # its message went with it
        assert broker.drain("eknown1-s-u", timeout=1) == [({"plan": "eknown1-s-u"},
                                                           "eknown1-s-u")]
    engine = make_engine(db)
    with engine.connect() as connection:
        assert queues.orphaned(connection) == {}
        assert queues.of_environment(connection, "known1") == ["eknown1-s-u"]
    engine.dispose()
    assert main(["--config-file", str(conf), "gc"]) == 0


def test_gc_lists_and_removes_orphaned_heat_stacks_only(tmp_path, capsys):
    """Heat also holds stacks that are not Fornace's: only e<environment id> names count."""
    from fornace.conductor.executors.heat import HeatStacks
    import heatclient.client

    url = heat_url()
    client = heatclient.client.Client("1", endpoint=url, token="fornace-test-token")
    heat = HeatStacks(client, poll_start=0.2, poll_max=1.0, timeout=120)
    resources = {"Resources": {"r": {"Type": "OS::Heat::RandomString"}}}
    orphan, known, foreign = f"e{uuid.uuid4().hex}", "eknown1", f"ft-gc-{uuid.uuid4().hex[:8]}"
    db = database(tmp_path)
    conf = tmp_path / "fornace.conf"
    conf.write_text(f"[conductor]\ncloud_dir = {tmp_path / 'c'}\n[database]\nconnection = {db}\n"
                    f"[heat]\nurl = {url}\n")
    try:
        for name in (orphan, known, foreign):
            heat.apply(StackRequest(name, resources, {}))
        assert main(["--config-file", str(conf), "gc", "--stacks", "heat"]) == 1
        out = capsys.readouterr().out
        assert f"orphaned stack {orphan} (heat): Heat stack " in out and "CREATE_COMPLETE" in out
        assert foreign not in out and known not in out
        assert main(["--config-file", str(conf), "gc", "--stacks", "heat", "--remove"]) == 0
        assert f"removed stack {orphan}" in capsys.readouterr().out
        names = heat.stack_names()
        assert orphan not in names and {known, foreign} <= set(names)
    finally:
        for name in (orphan, known, foreign):
            heat.delete(name)


def test_gc_says_when_heat_cannot_be_listed(tmp_path, capsys):
    from apikit import free_port

    conf = tmp_path / "fornace.conf"
    conf.write_text(f"[conductor]\ncloud_dir = {tmp_path / 'c'}\n"
                    f"[database]\nconnection = {database(tmp_path)}\n"
                    f"[heat]\nurl = http://127.0.0.1:{free_port()}/v1/t\n")
    assert main(["--config-file", str(conf), "gc", "--stacks", "heat"]) == 2
    assert "cannot list the heat stacks: " in capsys.readouterr().out


def test_gc_says_in_one_line_when_the_database_cannot_be_used(tmp_path, capsys):
    """Without Fornace's schema, or unreachable: one line naming the database
    (its password masked) and why, exit status 3, no traceback."""
    conf = tmp_path / "fornace.conf"
    conf.write_text(f"[conductor]\ncloud_dir = {tmp_path / 'cloud'}\n")
    empty = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    assert main(["--config-file", str(conf), "gc", "--db", empty]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"fornace gc: the database {empty} cannot be used" in err
    assert "the schema is empty: run fornace db upgrade" in err
    closed = "postgresql+psycopg://fornace:s3cret@127.0.0.1:1/nodb"   # nothing listens there
    assert main(["--config-file", str(conf), "gc", "--db", closed]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "s3cret" not in err
    assert "fornace gc: the database postgresql+psycopg://fornace:***@127.0.0.1:1/nodb" in err


def test_gc_forgets_the_free_locks_of_gone_environments_not_the_purges_turn(tmp_path, capsys):
    import threading

    from sqlalchemy import select

    from fornace.common.db.models import JobLock
    from fornace.conductor.historypurge import TURN, HistoryPurge

    db = database(tmp_path)
    engine = make_engine(db)
    assert HistoryPurge(engine, "conductor-1", 30, threading.Event()).claim()
    with engine.begin() as connection:
        connection.execute(JobLock.__table__.insert().values(environment_id="gone1", token=3))
    conf = tmp_path / "fornace.conf"
    conf.write_text(f"[conductor]\ncloud_dir = {tmp_path / 'cloud'}\n"
                    f"[database]\nconnection = {db}\n")
    assert main(["--config-file", str(conf), "gc", "--remove"]) == 0
    assert "forgot 1 lock row(s) of environments that are gone" in capsys.readouterr().out
    with engine.connect() as connection:
        assert list(connection.scalars(select(JobLock.environment_id))) == [TURN]
    engine.dispose()
