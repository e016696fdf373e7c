"""What a unit loads: the agent imports only ``fornace.common`` and light libraries.

A VM runs ``fornace agent``; it must not drag in the web framework, the
database layer or the XML engine (measured in a fresh interpreter).
"""
from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "lxml", "jsonpath_ng",
         "heatclient", "jinja2")


def loaded_after(code: str) -> list[str]:
    probe = (f"{code}\nimport json, sys\n"
             "print(json.dumps(sorted(m for m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.splitlines()[-1])


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in HEAVY]


def test_the_agent_service_loads_no_server_library():
    modules = loaded_after("import fornace.agent.service")
    assert heavy(modules) == []
    ours = {m.split(".")[1] for m in modules if m.startswith("fornace.")}
    assert ours == {"agent", "common"}


def test_the_agent_command_loads_neither_the_api_nor_the_conductor():
    code = ("import sys\nfrom fornace.cli.main import build_conf\n"
            "conf = build_conf('agent')\n"
            "conf(['agent'], project='fornace', prog='fornace', default_config_files=[], "
            "default_config_dirs=[])\n"
            "import fornace.cli.agent")
    modules = loaded_after(code)
    assert heavy(modules) == []
    ours = {m.split(".")[1] for m in modules if m.startswith("fornace.")}
    assert ours == {"agent", "common", "cli"}, ours


def test_the_probe_sees_a_heavy_import():
    assert "sqlalchemy" in heavy(loaded_after("import fornace.common.db.engine"))
