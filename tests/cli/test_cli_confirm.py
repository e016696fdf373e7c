"""Confirmation before ``env delete``, ``service remove``, a scale-in and
``action uninstall``: asked on a terminal (a pseudo-terminal here), skipped
with ``--yes``, refused at once (exit 2) when nobody can answer."""
from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from apikit import free_port
from clikit import as_json, ok, one_line_error, site
from fornace.cli.client import confirm
from fornace.cli.client.confirm import confirmed, extent
from fornace.cli.client.deploy import destructive
from fornace.common.errors import FornaceError

ENV = {"id": "e1", "name": "web"}
SERVICES = [{"id": "s1", "name": "site", "units": [{"id": "u1"}, {"id": "u2"}]},
            {"id": "s2", "name": "db", "units": [{"id": "u3"}]}]


# ----------------------------------------------------------------------- pure helpers

def test_the_questions_name_what_goes_and_how_much():
    assert extent(SERVICES) == "2 services, 3 units"
    assert extent([SERVICES[1]]) == "1 service, 1 unit"
    assert extent([]) == "nothing deployed"
    assert destructive("uninstall", {}, ENV, SERVICES) == \
        "Uninstall environment web (2 services, 3 units)?"
    assert destructive("scale", {"node_id": "s1", "delta": -1}, ENV, SERVICES) == \
        "Scale in service site of environment web by 1 unit (2 -> 1)?"
    assert destructive("scale", {"node_id": "s1", "delta": "-2"}, ENV, SERVICES) == \
        "Scale in service site of environment web by 2 units (2 -> 0)?"
    for action, parameters in (("scale", {"node_id": "s1", "delta": 1}),
                               ("scale", {"node_id": "s1"}),         # default +1
                               ("scale", {"node_id": "s1", "delta": "x"}),
                               ("check", {}), ("heal", {"node_instance_id": "u1"})):
        assert destructive(action, parameters, ENV, SERVICES) is None, (action, parameters)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("answer, expected", [("y\n", True), ("YES\n", True), ("\n", False),
                                              ("n\n", False), ("", False),
                                              ("yess\n", False)])
def test_only_yes_goes_on(monkeypatch, capsys, answer, expected):
    monkeypatch.setattr(sys, "stdin", Terminal(answer))
    command = type("Command", (), {"yes": False})()
    assert confirmed(command, "Delete environment web (nothing deployed)?", "not deleted") \
        is expected
    err = capsys.readouterr().err
    assert err.startswith("Delete environment web (nothing deployed)? [y/N] ")
    assert ("fornace: not deleted: not confirmed" in err) is (not expected)


def test_without_a_terminal_it_refuses_unless_yes(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))      # a pipe saying y: not asked
    command = type("Command", (), {"yes": False})()
    with pytest.raises(FornaceError, match="not deleted: standard input is not a terminal.*"
                                           "pass --yes"):
        confirmed(command, "Delete?", "not deleted")
    command.yes = True
    assert confirmed(command, "Delete?", "not deleted")
    assert capsys.readouterr().err == ""
    assert confirm.DECLINED == 1


# --------------------------------------------------------- against the API, on a terminal

def on_terminal(url: str, home: Path, args: list[str], answer: str,
                timeout: float = 120) -> tuple[int, str, str]:
    """Run ``fornace ARGS`` with a pseudo-terminal as standard input and error, answer
    its question once it is asked; (exit status, stdout, what the terminal showed)."""
    master, slave = os.openpty()
    environment = {**os.environ, "HOME": str(home), "FORNACE_URL": url,
                   "FORNACE_SESSIONS": str(home / "sessions")}
    process = subprocess.Popen([sys.executable, "-m", "fornace.cli", *args], cwd=home,
                               env=environment, stdin=slave, stderr=slave,
                               stdout=subprocess.PIPE, text=True)
    os.close(slave)
    shown = bytearray()

    def read() -> bytes:
        try:
            return os.read(master, 4096)
        except OSError:     # EIO: the process has ended and closed the terminal
            return b""
    try:
        while b"[y/N] " not in shown:
            ready, _, _ = select.select([master], [], [], timeout)
            assert ready, f"no question within {timeout} s: {bytes(shown)!r}"
            chunk = read()
            assert chunk, f"it ended without asking: {bytes(shown)!r}"
            shown += chunk
        os.write(master, answer.encode() + b"\n")
        rest = threading.Thread(target=lambda: [shown.extend(c) for c in iter(read, b"")])
        rest.start()
        out, _ = process.communicate(timeout=timeout)
        rest.join(timeout)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    return process.returncode, out, shown.decode(errors="replace").replace("\r\n", "\n")


@pytest.fixture
def deployed(box, cli, tmp_path):
    """``cli-confirm``: a service ``web`` of two units, deployed."""
    ok(cli("env", "create", "cli-confirm"))
    service = tmp_path / "site.json"
    service.write_text(json.dumps(site("web", free_port(), units=2)))
    ok(cli("deploy", "cli-confirm", "--service", str(service)))
    yield
    cli("env", "delete", "cli-confirm", "--yes")     # gone already when a test deleted it


def jobs(cli) -> list[str]:
    return [j["action"] for j in as_json(cli("jobs", "cli-confirm", "--json"))["jobs"]]


def test_scripts_are_refused_at_once_and_nothing_changes(deployed, cli):
    for args in (["env", "delete", "cli-confirm"], ["service", "remove", "cli-confirm", "web"],
                 ["action", "cli-confirm", "uninstall"],
                 ["action", "cli-confirm", "scale", "--param", "node_id=web",
                  "--param", "delta=-1"]):
        line = one_line_error(cli(*args), 2)
        assert "standard input is not a terminal" in line and "--yes" in line, line
    assert jobs(cli) == ["deploy"]
    assert "pending changes" not in ok(cli("service", "list", "cli-confirm"))
    shown = as_json(cli("env", "show", "cli-confirm", "--json"))
    assert shown["status"] == "ready" and len(shown["services"][0]["units"]) == 2
    # a scale out destroys nothing: not asked
    assert ok(cli("action", "cli-confirm", "scale", "--param", "node_id=web",
                  "--param", "delta=1"))
    assert jobs(cli) == ["scale", "deploy"]


def test_the_terminal_is_asked_and_only_yes_goes_on(deployed, box, cli, tmp_path):
    code, out, shown = on_terminal(box.url, tmp_path, ["env", "delete", "cli-confirm"], "n")
    assert code == 1, shown
    assert "Delete environment cli-confirm (1 service, 2 units)? [y/N] n\n" in shown
    assert "fornace: environment cli-confirm not deleted: not confirmed" in shown
    assert out == ""

    code, out, shown = on_terminal(box.url, tmp_path,
                                   ["service", "remove", "cli-confirm", "web"], "")
    assert code == 1 and "Remove service web (2 units) from environment cli-confirm? " \
                         "[y/N] \n" in shown, shown
    assert "pending changes" not in ok(cli("service", "list", "cli-confirm"))

    code, out, shown = on_terminal(box.url, tmp_path, [
        "action", "cli-confirm", "scale", "--param", "node_id=web", "--param", "delta=-1"],
        "y")
    assert code == 0, out + shown
    assert "Scale in service web of environment cli-confirm by 1 unit (2 -> 1)? [y/N] y" \
        in shown
    assert "scale succeeded" in out
    assert len(as_json(cli("env", "show", "cli-confirm", "--json"))
               ["services"][0]["units"]) == 1
    assert jobs(cli) == ["scale", "deploy"]

    code, out, shown = on_terminal(box.url, tmp_path, ["env", "delete", "cli-confirm"], "y")
    assert code == 0, out + shown
    assert "Delete environment cli-confirm (1 service, 1 unit)? [y/N] y" in shown
    assert "environment cli-confirm deleted" in out
    assert "cli-confirm" not in ok(cli("env", "list"))
