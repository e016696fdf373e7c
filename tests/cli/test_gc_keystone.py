"""``fornace gc --stacks heat`` in keystone mode, against the real Keystone of
keystone-up (Heat of heat-up in its catalog): each environment's stack is in
its user's project, so gc says which credentials it needs -- one line, exit
status 2, no traceback -- and with a project's credentials in ``[heat]`` lists
and removes that project's orphans."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

import identitykit
from fornace.cli.main import main
from fornace.common.db.engine import upgrade
from fornace.conductor.executors.base import StackRequest
from services import heat_url, import_or_require, keystone_url

SERVICE_USER = ("auth_url = {url}\nusername = {user}\npassword = {password}\n"
                "project_name = {project}\nuser_domain_name = Default\n"
                "project_domain_name = Default\n")


def credentials(user: str) -> str:
    password, project = identitykit.USERS[user]
    return SERVICE_USER.format(url=keystone_url(), user=user, password=password,
                               project=project)


def config(tmp_path, heat: str = "") -> str:
    db = f"sqlite:///{tmp_path / 'gc.sqlite'}"
    upgrade(db)
    path = tmp_path / "fornace.conf"
    path.write_text(f"[api]\nauth_mode = keystone\n[database]\nconnection = {db}\n"
                    f"[conductor]\ncloud_dir = {tmp_path / 'cloud'}\nstacks = heat\n"
                    f"[keystone_authtoken]\n{credentials('fornace')}[heat]\n{heat}")
    return str(path)


def test_without_heat_credentials_gc_says_what_it_needs(tmp_path, capsys):
    path = config(tmp_path)
    assert main(["--config-file", path, "gc", "--stacks", "heat"]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert ("cannot list the heat stacks: in keystone mode each environment's stack is in "
            "its user's project") in captured.out
    assert "run gc once per project" in captured.out
    assert identitykit.USERS["fornace"][0] not in captured.out + captured.err


def test_with_a_projects_credentials_gc_removes_its_orphans(tmp_path, capsys):
    heat_url()
    import_or_require("heatclient.client")
    from fornace.conductor.executors.heat import HeatStacks
    path = config(tmp_path, "auth_type = password\n" + credentials("alice")
                  + "poll_start = 0.1\npoll_max = 0.5\n")
    from fornace.cli.main import build_conf
    conf = build_conf()
    conf(["--config-file", path, "gc"], default_config_files=[])
    heat = HeatStacks.from_config(conf)   # as alice, Heat from her catalog
    orphan = f"e{uuid.uuid4().hex}"
    heat.apply(StackRequest(orphan, {"Resources": {"r": {"Type": "OS::Heat::None"}}}, {}))
    try:
        assert main(["--config-file", path, "gc", "--stacks", "heat"]) == 1
        assert f"orphaned stack {orphan} (heat): Heat stack " in capsys.readouterr().out
        assert main(["--config-file", path, "gc", "--stacks", "heat", "--remove"]) == 0
        assert f"removed stack {orphan}" in capsys.readouterr().out
        assert orphan not in heat.stack_names()
    finally:
        heat.delete(orphan)


@pytest.mark.parametrize("args", [["gc"], ["gc", "--stacks", "heat"]])
def test_gc_without_any_configuration_file_is_one_line(tmp_path, args):
    """No configuration file anywhere (a new HOME, no /etc/fornace): the default
    SQLite database in ~/.fornace, which has no schema yet -- one line saying
    so, exit status 3."""
    env = {**os.environ, "HOME": str(tmp_path)}
    ran = subprocess.run([sys.executable, "-m", "fornace.cli", *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 3, ran.stderr
    assert "Traceback" not in ran.stderr and ran.stderr.count("\n") == 1
    assert "the schema is empty: run fornace db upgrade" in ran.stderr
