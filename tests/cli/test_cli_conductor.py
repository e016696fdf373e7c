"""``fornace conductor`` as a command: what it says about its backends."""
from __future__ import annotations

import subprocess
import sys


def conductor_says(tmp_path, *options: str) -> str:
    """The console output of ``fornace conductor OPTIONS`` up to its first consumer line."""
    conf = tmp_path / "fornace.conf"
    conf.write_text(f"[broker]\nurl = filesystem:///{tmp_path}/broker\n"
                    f"[database]\nconnection = sqlite:///{tmp_path}/db.sqlite\n")
    process = subprocess.Popen([sys.executable, "-m", "fornace.cli", "--config-file", str(conf),
                                "conductor", *options], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in process.stdout:   # ends when the process does
            lines.append(line)
            if "consumer(s) on" in line:
                break
    finally:
        process.terminate()
        process.wait(20)
    return "".join(lines)


def test_simulated_stacks_without_simulated_agents_are_warned_about(tmp_path):
    said = conductor_says(tmp_path, "--stacks", "simulator")
    assert "consumer(s) on" in said, said
    assert "stacks are simulated: no VM boots" in said and "--agents simulator" in said
    assert "600" in said   # the boot timeout the plans will wait


def test_simulated_stacks_and_agents_are_not(tmp_path):
    said = conductor_says(tmp_path, "--stacks", "simulator", "--agents", "simulator")
    assert "consumer(s) on" in said, said
    assert "stacks are simulated" not in said
