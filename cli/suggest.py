"""A mistyped command or action said in one line, with the names it may have
meant (``fornace deplyo``: ``did you mean deploy?``), instead of argparse's
usage and its list of every choice."""
from __future__ import annotations

import argparse
import re
from typing import Any, Iterable, NoReturn


def close_matches(word: str, names: Iterable[str]) -> list[str]:
    """The names ``word`` may have been meant as, the closest first (a name
    it starts, or is the start of, counts as close)."""
    import difflib   # here: every client command imports this module, few mistype

    names = list(names)
    found = difflib.get_close_matches(word, names, n=3, cutoff=0.6)
    found += [name for name in names if word and name not in found
              and (name.startswith(word) or word.startswith(name))]
    return found[:3]


def unknown(kind: str, word: str, names: Iterable[str], listing: str) -> str:
    """``unknown command 'deplyo' (did you mean deploy?)``; without a close
    name, where to find them (``listing``)."""
    found = close_matches(word, names)
    if found:
        return f"unknown {kind} {word!r} (did you mean {' or '.join(found)}?)"
    return f"unknown {kind} {word!r} ({listing})"


# argparse's message for a word that is none of the choices: the word as repr() shows it
_INVALID = re.compile(r"""argument [^:]+: invalid choice: ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")


def add_actions(parser: argparse.ArgumentParser, **kwargs: Any) -> argparse._SubParsersAction:
    """``parser.add_subparsers(**kwargs)``, an unknown action then being said in
    one line naming the close ones (exit status 2), not with the usage and every
    action.  A parser whose class says its errors its own way (the quick parse
    of :mod:`fornace.cli.client.commandline`) keeps it."""
    actions = parser.add_subparsers(**kwargs)
    if type(parser).error is not argparse.ArgumentParser.error:
        return actions
    error = parser.error

    def said(message: str) -> NoReturn:
        match = _INVALID.match(message)
        if match is None:
            error(message)
        import ast

        word = ast.literal_eval(match.group(1))
        listing = f"{parser.prog}'s actions: {', '.join(actions.choices)}"
        parser.exit(2, f"{parser.prog}: {unknown('action', str(word), actions.choices, listing)}\n")

    parser.error = said   # type: ignore[method-assign]
    return actions
