"""``fornace gc``: local-cloud stacks of environments that are gone."""
from __future__ import annotations

from sqlalchemy.orm import Session

from fornace.cli.main import main
from fornace.common.db.engine import make_engine, upgrade
from fornace.common.db.models import Environment
from fornace.conductor.executors.base import StackRequest
from fornace.conductor.executors.localcloud import LocalStacks
from localkit import alive

SCRIPT = "#!/bin/sh\nexec sleep 300\n"


def vm() -> dict:
    return {"Resources": {"vm": {"Type": "AWS::EC2::Instance", "Properties": {
        "ImageId": "img", "UserData": SCRIPT}}}}


def test_gc_lists_then_removes_only_the_orphans(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'f.sqlite'}"
    upgrade(db)
    engine = make_engine(db)
    with Session(engine) as session:
        session.add(Environment(id="known1", name="k", tenant_id="t", description={}))
        session.commit()
    engine.dispose()
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
        assert "orphaned stack egone1: 1 instance(s), 1 running" in out and "eknown1" not in out
        assert main(["--config-file", str(conf), "gc", "--remove"]) == 0
        assert "removed stack egone1" in capsys.readouterr().out
        assert cloud.stack_names() == ["eknown1"] and not alive(orphan_pid)
        assert main(["--config-file", str(conf), "gc"]) == 0
        assert "no orphaned stacks" in capsys.readouterr().out
    finally:
        for name in cloud.stack_names():
            cloud.delete(name)
