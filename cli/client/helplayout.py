"""A client command's help with the OpenStack credentials last.

keystoneauth1 gives every client command some 30 ``--os-*`` options in three
groups; argparse would print them in the usage line and before the examples,
burying the command's own options.  Here the usage line names them
``[OpenStack options]`` and ``--help`` shows the command's own arguments, its
examples, then the OpenStack options in one group.  Parsing is unchanged.
"""
from __future__ import annotations

import argparse

PLACEHOLDER = "OpenStack options"


def openstack_last(parser: argparse.ArgumentParser, openstack: list[argparse.Action]) -> None:
    """Lay out ``parser``'s usage and help with the ``openstack`` options last."""
    if not any(action.option_strings for action in openstack):
        return
    parser.format_usage = lambda: _usage(parser, openstack)   # type: ignore[method-assign]
    parser.format_help = lambda: _help(parser, openstack)     # type: ignore[method-assign]


def _own(parser: argparse.ArgumentParser,
         openstack: list[argparse.Action]) -> list[argparse.Action]:
    """The parser's actions, the OpenStack ones replaced by one placeholder."""
    shown: list[argparse.Action] = []
    for action in parser._actions:
        if action not in openstack:
            shown.append(action)
        elif action is openstack[0]:
            shown.append(argparse.Action([PLACEHOLDER], dest="openstack", nargs=0))
    return shown


def _with_usage(parser: argparse.ArgumentParser,
                openstack: list[argparse.Action]) -> argparse.HelpFormatter:
    formatter = parser._get_formatter()
    formatter.add_usage(parser.usage, _own(parser, openstack), parser._mutually_exclusive_groups)
    return formatter


def _usage(parser: argparse.ArgumentParser, openstack: list[argparse.Action]) -> str:
    return _with_usage(parser, openstack).format_help()


def _help(parser: argparse.ArgumentParser, openstack: list[argparse.Action]) -> str:
    formatter = _with_usage(parser, openstack)
    formatter.add_text(parser.description)
    where = None
    for group in parser._action_groups:
        own = [action for action in group._group_actions if action not in openstack]
        if where is None and len(own) < len(group._group_actions) and group.description:
            where = group   # the first group of OpenStack options says what they are
        if own:
            formatter.start_section(group.title)
            formatter.add_text(group.description)
            formatter.add_arguments(own)
            formatter.end_section()
    formatter.add_text(parser.epilog)
    formatter.start_section(where.title if where is not None else PLACEHOLDER)
    formatter.add_text(where.description if where is not None else None)
    formatter.add_arguments(openstack)
    formatter.end_section()
    return formatter.format_help()
