"""``fornace agent`` without oslo.config: the same settings as oslo.config reads,
or no quick path at all."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fornace.agent.config import AgentSettings
from fornace.agent.quickstart import parse
from fornace.cli.main import build_conf

FULL = """[DEFAULT]
broker_url = "amqp://u:p@host:5672/vh"
broker_ssl = yes
broker_queue_type = quorum
input_queue = e1-s-u
result_routing_key: -execution-results-e1
# a comment
debug = True

[agent]
work_dir = /srv/agent
journal = /srv/journal.jsonl
command_timeout = 0
reboot_command = systemctl reboot
max_incomplete = 3
keep_plans = 7
keep_plan_inputs = on
journal_keep = 20
python = python3.11
shell = '/bin/bash'
"""


def oslo_settings(front: list[str], rest: list[str]) -> tuple[AgentSettings, bool]:
    conf = build_conf("agent")
    conf(front + rest, project="fornace", prog="fornace")
    return AgentSettings.from_conf(conf), conf.debug


def quick_settings(front: list[str], rest: list[str]) -> tuple[AgentSettings, bool]:
    quick = parse(front, rest)
    assert quick is not None
    return AgentSettings.from_conf(quick), quick.debug


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text", [FULL, "[DEFAULT]\ninput_queue = q\n", "[agent]\n"])
def test_the_quick_path_reads_what_oslo_config_reads(tmp_path, text):
    front = ["--config-file", write(tmp_path, "agent.conf", text)]
    assert quick_settings(front, ["agent"]) == oslo_settings(front, ["agent"])


def test_later_files_win_and_the_work_dir_option_is_kept(tmp_path):
    front = ["--config-file", write(tmp_path, "a.conf", FULL),
             f"--config-file={write(tmp_path, 'b.conf', '[agent]' + chr(10) + 'shell = /bin/dash')}"]
    quick = parse(front, ["agent", "--work-dir", "/w"])
    assert quick is not None and quick.command.work_dir == "/w"
    settings, _ = quick_settings(front, ["agent"])
    assert settings.shell == "/bin/dash" and settings.keep_plans == 7


@pytest.mark.parametrize("text", [
    "[DEFAULT]\nlog_file = /var/log/agent.log\n",      # an oslo.log option
    "[DEFAULT]\nno_such_option = 1\n",
    "[other]\nx = 1\n",
    "[DEFAULT]\nbroker_queue_type = fancy\n",           # oslo.config reports it
    "[agent]\nkeep_plans = 0\n",
    "[agent]\ncommand_timeout = soon\n",
    "[DEFAULT]\nbroker_ssl = maybe\n",
    "[DEFAULT]\ninput_queue = $other\n",                # interpolation
    "[DEFAULT]\ninput_queue = a\n  b\n",                # a multi-line value
    "not an ini file\n",
])
def test_anything_else_is_left_to_oslo_config(tmp_path, text):
    assert parse(["--config-file", write(tmp_path, "agent.conf", text)], ["agent"]) is None


@pytest.mark.parametrize("front,rest", [
    ([], ["agent"]),                                   # oslo.config looks for default files
    (["--config-dir", "/etc/fornace"], ["agent"]),
    (["--config-file", "FILE"], ["agent", "--debug"]),
    (["--config-file", "FILE"], ["agent", "--work-dir"]),
    (["--config-file", "/no/such/file"], ["agent"]),
])
def test_other_command_lines_are_left_to_oslo_config(tmp_path, front, rest):
    front = [write(tmp_path, "agent.conf", "[DEFAULT]\n") if a == "FILE" else a for a in front]
    assert parse(front, rest) is None


def test_an_option_set_in_the_environment_is_left_to_oslo_config(tmp_path, monkeypatch):
    monkeypatch.setenv("OS_DEFAULT__INPUT_QUEUE", "q")
    assert parse(["--config-file", write(tmp_path, "a.conf", "[DEFAULT]\n")], ["agent"]) is None


def test_the_agent_command_starts_without_oslo(tmp_path):
    """The process of ``fornace agent`` loads neither oslo.config nor oslo.log, logs
    as oslo.log does (standard output), and stops on SIGTERM with code 0."""
    conf = write(tmp_path, "agent.conf",
                 f"[DEFAULT]\nbroker_url = filesystem://{tmp_path / 'broker'}\n"
                 f"input_queue = in\nresult_routing_key = out\n"
                 f"[agent]\nwork_dir = {tmp_path / 'work'}\n")
    probe = ("import atexit, json, sys\n"
             "atexit.register(lambda: print('MODULES ' + json.dumps(sorted(sys.modules))))\n"
             "sys.argv = ['fornace', '--config-file', %r, 'agent']\n"
             "from fornace.cli.main import console\nconsole()\n") % conf
    process = subprocess.Popen([sys.executable, "-c", probe], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if "WAIT_FOR_RUNNABLE" in line:
            break
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    lines += out.splitlines()
    modules = json.loads(next(l for l in lines if l.startswith("MODULES "))[8:])
    assert not [m for m in modules if m.startswith(("oslo_config", "oslo_log"))]
    assert any(" INFO fornace.agent.states [-] agent state: INIT -> WAIT_FOR_RUNNABLE" in l
               for l in lines)
