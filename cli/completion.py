"""``fornace --shell_completion bash|zsh``: a completion script for the shell.

oslo.config offers that option but its script templates are missing from its
wheel (a traceback); this one is written from the commands' own argparse
parsers: the commands, each command's actions, and their ``--options``.
zsh loads it through ``bashcompinit``.
"""
from __future__ import annotations

import argparse
import shlex
from typing import Callable

SHELLS = ("bash", "zsh")

_SCRIPT = """\
# fornace shell completion ({shell}); load it with: source <(fornace --shell_completion {shell})
{preamble}_fornace_words() {{
    case "$1" in
{cases}
    esac
}}
_fornace() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" key="" i
    for ((i = 1; i < COMP_CWORD && i <= 2; i++)); do
        case "${{COMP_WORDS[i]}}" in -*) break ;; esac
        key="${{key:+$key }}${{COMP_WORDS[i]}}"
    done
    local words="$(_fornace_words "$key")"
    [ -n "$words" ] || words="$(_fornace_words "${{key%% *}}")"  # after a name: the command's options
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _fornace fornace
"""

_ZSH_PREAMBLE = "autoload -U +X bashcompinit && bashcompinit\n"


def script(shell: str, add_parsers: Callable[[argparse._SubParsersAction], object]) -> str:
    """The completion script; ``add_parsers`` adds every command's parser."""
    if shell not in SHELLS:
        raise ValueError(f"no completion for {shell!r}: {', '.join(SHELLS)}")
    words: dict[str, list[str]] = {}
    root = argparse.ArgumentParser(prog="fornace")
    add_parsers(root.add_subparsers())
    _collect(root, "", words)
    words[""] += ["--config-file", "--config-dir", "--shell_completion"]
    cases = "\n".join(f"        {shlex.quote(key)}) echo {shlex.quote(' '.join(found))} ;;"
                      for key, found in words.items())
    return _SCRIPT.format(shell=shell, cases=cases,
                          preamble=_ZSH_PREAMBLE if shell == "zsh" else "")


def _collect(parser: argparse.ArgumentParser, key: str, words: dict[str, list[str]]) -> None:
    """Words after ``key`` (``""``, ``"env"``, ``"env create"``): sub-commands and options."""
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(name)
                _collect(sub, f"{key} {name}".strip(), words)
        else:
            found.extend(s for s in action.option_strings if s.startswith("--"))
    words[key] = found
