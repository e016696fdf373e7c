"""The stack backends' name table: each name builds its own executor, lazily."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from fornace.cli.main import build_conf
from fornace.conductor.executors import STACKS, stacks_class, stacks_factory
from fornace.conductor.executors.base import StackExecutor
from fornace.conductor.executors.heat import HeatStacks
from fornace.conductor.executors.localcloud import LocalStacks
from fornace.conductor.executors.simulator import SimulatedStacks


def conf_for(tmp_path, *args):
    conf = build_conf("conductor")
    conf(["conductor", *args], project="fornace", prog="fornace",
         default_config_files=[], default_config_dirs=[])
    conf.set_override("state_dir", str(tmp_path / "state"), group="api")
    return conf


@pytest.mark.parametrize("name, cls", [("simulator", SimulatedStacks), ("heat", HeatStacks),
                                       ("local", LocalStacks)])
def test_each_name_is_its_backend(name, cls):
    assert stacks_class(name) is cls and issubclass(cls, StackExecutor)


def test_the_options_offer_exactly_the_table(tmp_path):
    from fornace.conductor.config import conductor_opts
    stacks = next(opt for opt in conductor_opts if opt.name == "stacks")
    assert list(stacks.type.choices) == list(STACKS)           # [conductor] stacks
    for name in STACKS:                                        # fornace conductor --stacks
        assert conf_for(tmp_path, "--stacks", name).command.stacks == name
    with pytest.raises(SystemExit, match="^2$"):
        conf_for(tmp_path, "--stacks", "teapot")


def test_an_unknown_name_says_which_exist():
    with pytest.raises(ValueError, match=r"unknown stack backend 'teapot' \(one of simulator, heat, local\)"):
        stacks_class("teapot")


def test_simulated_stacks_are_new_per_task_and_local_ones_shared(tmp_path):
    conf = conf_for(tmp_path)
    task = SimpleNamespace(token=None, tenant_id="t")
    simulated = stacks_factory("simulator", conf)
    assert isinstance(simulated(task), SimulatedStacks) and simulated(task) is not simulated(task)
    local = stacks_factory("local", conf)
    assert local(task) is local(task)
    assert local(task).state_dir == (tmp_path / "state" / "cloud").resolve()


def test_a_heat_executor_is_made_per_task_with_its_token(tmp_path):
    conf = conf_for(tmp_path)
    conf.set_override("url", "http://127.0.0.1:9/v1/%(tenant_id)s", group="heat")
    heat = stacks_factory("heat", conf)
    first = heat(SimpleNamespace(token="tok-a", tenant_id="ta"))
    second = heat(SimpleNamespace(token="tok-b", tenant_id="tb"))
    assert isinstance(first, HeatStacks) and first is not second


def test_naming_a_backend_imports_only_that_one():
    code = ("import sys; from fornace.conductor.executors import stacks_class; "
            "stacks_class('simulator'); "
            "print(sorted(m for m in sys.modules if m.startswith('fornace.conductor.executors.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "heatclient" not in out.stdout
    assert eval(out.stdout) == ["fornace.conductor.executors.base",  # noqa: S307 (our own list)
                                "fornace.conductor.executors.cfn",   # what every backend shares
                                "fornace.conductor.executors.simulator"]
