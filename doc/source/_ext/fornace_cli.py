"""The ``fornace-cli`` directive: the command-line reference, read from the
``fornace`` command's own parsers.

``fornace --help`` (:func:`fornace.cli.main.overview`) comes first, then a
section per command and per action (``fornace env create``) with its
description, usage, arguments, options and examples, as ``fornace COMMAND
--help`` gives them.  Options many commands share (the client commands'
``--url``, ``--token``..., the OpenStack credentials) are described once, in
the last section, and named where they apply.
"""
from __future__ import annotations

import argparse
from collections import Counter
from typing import Any, Iterator

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx

# an option (or a group of options) that this many parsers take is described once
SHARED_AFTER = 4
SHARED_ID = "cli-shared-options"


def command_parsers() -> list[argparse.ArgumentParser]:
    """The parser of each ``fornace`` command, in ``fornace --help``'s order."""
    from fornace.cli import main

    parser = argparse.ArgumentParser(prog="fornace")
    subparsers = parser.add_subparsers()
    main._add_command_parsers(subparsers)
    order = [name for _, names in main.GROUPS for name in names]
    order += [name for name in main.COMMANDS if name not in order]
    return [subparsers.choices[name] for name in order if name in subparsers.choices]


def walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and the parsers of its actions, depth first."""
    yield parser
    for child in children(parser):
        yield from walk(child)


def children(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += list(dict.fromkeys(action.choices.values()))
    return found


def option_key(action: argparse.Action) -> tuple[tuple[str, ...], str]:
    return tuple(action.option_strings), str(action.help)


def own_groups(parser: argparse.ArgumentParser) -> list[argparse._ArgumentGroup]:
    """The titled groups a command adds beside argparse's two."""
    return [group for group in parser._action_groups
            if group not in (parser._positionals, parser._optionals) and group._group_actions]


def group_key(group: argparse._ArgumentGroup) -> tuple[str, tuple]:
    return str(group.title), tuple(option_key(a) for a in group._group_actions)


class Shared:
    """What several parsers take alike: single options and whole groups."""

    def __init__(self, parsers: list[argparse.ArgumentParser]) -> None:
        options: Counter = Counter()
        groups: Counter = Counter()
        self.examples: dict[Any, argparse.Action | argparse._ArgumentGroup] = {}
        for parser in parsers:
            for group in own_groups(parser):
                groups[group_key(group)] += 1
                self.examples.setdefault(group_key(group), group)
            for action in parser._optionals._group_actions:
                if action.option_strings and action.help != argparse.SUPPRESS:
                    options[option_key(action)] += 1
                    self.examples.setdefault(option_key(action), action)
        self.options = [key for key, count in options.items()
                        if count >= SHARED_AFTER and "--help" not in key[0]]
        self.groups = [key for key, count in groups.items() if count >= SHARED_AFTER]


def help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    return parser._get_formatter()._expand_help(action)


def invocation(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """``--url URL`` / ``-f FORMAT, --format FORMAT`` / ``NAME``, as argparse shows it."""
    return parser._get_formatter()._format_action_invocation(action)


def usage(parser: argparse.ArgumentParser, hidden: set, width: int = 78) -> str:
    """argparse's usage without the shared options (``[shared options]``
    instead), wrapped at ``width`` between bracketed groups, never inside one."""
    actions = [a for a in parser._actions if option_key(a) not in hidden]
    formatter = parser.formatter_class(prog=parser.prog, width=10_000)
    formatter.add_usage(None, actions, parser._mutually_exclusive_groups, prefix="")
    words = formatter.format_help().split()
    prog_words = len(parser.prog.split())
    if len(actions) < len(parser._actions):
        words.insert(prog_words, "[shared options]")
    lines = [parser.prog]
    for part in groups(" ".join(words[prog_words:])):
        if len(lines[-1]) + 1 + len(part) > width and lines[-1].strip():
            lines.append(" " * len(parser.prog))
        lines[-1] += " " + part
    return "\n".join(lines)


def groups(text: str) -> list[str]:
    """``text`` split at the spaces outside brackets and parentheses."""
    found, current, depth = [], "", 0
    for char in text:
        if char == " " and depth == 0:
            found.append(current)
            current = ""
            continue
        depth += (char in "[(") - (char in "])")
        current += char
    return [part for part in found + [current] if part]


def paragraphs(text: str | None) -> list[nodes.Node]:
    """argparse's (pre-wrapped) description: one paragraph per blank-line block."""
    blocks = [" ".join(block.split()) for block in (text or "").split("\n\n")]
    return [nodes.paragraph(text=block) for block in blocks if block]


def definitions(parser: argparse.ArgumentParser,
                actions: list[argparse.Action]) -> nodes.definition_list:
    listing = nodes.definition_list()
    for action in actions:
        item = nodes.definition_list_item()
        item += nodes.term(text=invocation(parser, action))
        definition = nodes.definition()
        definition += nodes.paragraph(text=help_text(parser, action))
        item += definition
        listing += item
    return listing


def section(title: str, ident: str) -> nodes.section:
    found = nodes.section(ids=[ident], names=[nodes.fully_normalize_name(title)])
    found += nodes.title(text=title)
    return found


def link(text: str, ident: str) -> nodes.reference:
    return nodes.reference("", text, internal=True, refid=ident)


class CommandLineDirective(Directive):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from fornace.cli import main

        parsers = [found for top in command_parsers() for found in walk(top)]
        shared = Shared(parsers)
        hidden = set(shared.options) | {option_key(a) for key in shared.groups
                                        for a in shared.examples[key]._group_actions}
        overview = section("fornace --help", "cli-overview")
        overview += nodes.literal_block(text=main.overview())
        result: list[nodes.Node] = [overview]
        for top in command_parsers():
            result.append(self.command(top, shared, hidden))
        result.append(self.shared_section(shared))
        return result

    def command(self, parser: argparse.ArgumentParser, shared: Shared,
                hidden: set) -> nodes.section:
        found = section(parser.prog, nodes.make_id("cli " + parser.prog))
        found += paragraphs(parser.description)
        found += nodes.literal_block(text=usage(parser, hidden))
        positionals = [a for a in parser._positionals._group_actions
                       if not isinstance(a, argparse._SubParsersAction)]
        if positionals:
            found += nodes.rubric(text="Arguments")
            found += definitions(parser, positionals)
        options = [a for a in parser._optionals._group_actions
                   if a.option_strings and "--help" not in a.option_strings
                   and a.help != argparse.SUPPRESS and option_key(a) not in hidden]
        if options:
            found += nodes.rubric(text="Options")
            found += definitions(parser, options)
        for group in own_groups(parser):
            if group_key(group) in shared.groups:
                continue
            found += nodes.rubric(text=str(group.title))
            found += paragraphs(group.description)
            found += definitions(parser, group._group_actions)
        common = [key for key in shared.options
                  if any(option_key(a) == key for a in parser._actions)]
        common_groups = [key for key in shared.groups
                         if any(group_key(g) == key for g in own_groups(parser))]
        if common or common_groups:
            line = nodes.paragraph()
            line += link("Shared options", SHARED_ID)
            line += nodes.Text(": " + ", ".join(key[0][-1] for key in common))
            if common_groups:
                line += nodes.Text(("; " if common else "") + "the groups "
                                   + ", ".join(key[0] for key in common_groups))
            line += nodes.Text(".")
            found += line
        if parser.epilog:
            found += nodes.literal_block(text=parser.epilog.strip("\n"))
        for child in children(parser):
            found += self.command(child, shared, hidden)
        return found

    def shared_section(self, shared: Shared) -> nodes.section:
        found = section("Shared options", SHARED_ID)
        found += nodes.paragraph(text=(
            f"Options that {SHARED_AFTER} or more commands take, described once: the "
            "commands that take them say so."))
        actions = [shared.examples[key] for key in shared.options]
        if actions:
            parser = argparse.ArgumentParser(prog="fornace")
            found += definitions(parser, actions)   # type: ignore[arg-type]
        for key in shared.groups:
            group = shared.examples[key]
            found += nodes.rubric(text=str(group.title))
            found += paragraphs(group.description)
            found += definitions(argparse.ArgumentParser(prog="fornace"),
                                 group._group_actions)   # type: ignore[union-attr]
        return found


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("fornace-cli", CommandLineDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
