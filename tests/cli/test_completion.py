"""``fornace --shell_completion bash|zsh`` and ``fornace --version``."""
from __future__ import annotations

import subprocess
import sys

import pytest

from fornace.cli.main import main


def complete(script: str, line: str) -> list[str]:
    """What bash offers for the last word of ``line`` (as a user pressing TAB)."""
    words = line.split(" ")
    program = (f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)})\n"
               f"COMP_CWORD={len(words) - 1}\n_fornace\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return [w for w in out.stdout.splitlines() if w]


@pytest.fixture(scope="module")
def script() -> str:
    out = subprocess.run([sys.executable, "-c", "import sys; from fornace.cli.main import main; "
                          "sys.exit(main(['--shell_completion', 'bash']))"],
                         capture_output=True, text=True, check=True)
    return out.stdout


def test_commands_actions_and_options_complete(script):
    assert complete(script, "fornace wor") == ["workflow"]
    assert complete(script, "fornace workflow s") == ["simulate"]
    assert complete(script, "fornace env ") == ["--help", "list", "create", "show", "delete",
                                                "abandon"]
    assert "--show-secrets" in complete(script, "fornace workflow simulate --sh")
    assert complete(script, "fornace deploy web --ser") == ["--service"]
    assert complete(script, "fornace service u") == ["update"]
    assert complete(script, "fornace outputs web --fo") == ["--format"]
    assert complete(script, "fornace env delete web --y") == ["--yes"]
    assert complete(script, "fornace --shell") == ["--shell_completion"]


def test_zsh_script_loads_bash_completion_and_unknown_shell_is_refused(capsys):
    assert main(["--shell_completion", "zsh"]) == 0
    assert "bashcompinit" in capsys.readouterr().out
    assert main(["--shell_completion", "fish"]) == 2
    assert "bash or zsh" in capsys.readouterr().err


def test_version_names_the_installed_distribution(capsys):
    import importlib.metadata
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"fornace {importlib.metadata.version('fornace')}\n"
