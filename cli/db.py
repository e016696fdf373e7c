"""``fornace db upgrade|current``: the schema of Fornace's database (Alembic).

``fornace api`` and ``fornace up`` upgrade the schema themselves when they
start (processes starting together take turns); these commands let an
operator do it before, or see where a database stands.  Exit status of
``current``: 0 at the newest revision, 1 behind it (or empty).
"""
from __future__ import annotations

import argparse

from oslo_config import cfg

from fornace.api.config import database_url


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "db", help="upgrade the database schema, or show its revision",
        description="The database schema (Alembic migrations shipped with Fornace).")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("upgrade", "bring the schema to the newest revision (creating it "
                                   "in an empty database)"),
                       ("current", "print the schema's revision and the newest one")):
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        action.add_argument("--db", metavar="URL",
                            help="database URL (default [database] connection, else SQLite "
                                 "in [api] state_dir)")


def run(conf: cfg.ConfigOpts) -> int:
    from sqlalchemy import make_url

    from fornace.common.db.engine import current, head_revision, upgrade

    command = conf.command
    url = command.db or database_url(conf)
    shown = make_url(url).render_as_string(hide_password=True)
    if command.action == "upgrade":
        before = upgrade(url)
        head = head_revision()
        if before == head:
            print(f"{shown}: already at revision {head}")
        else:
            print(f"{shown}: upgraded from {before or 'an empty schema'} to revision {head}")
        return 0
    revision, head = current(url)
    state = "the newest" if revision == head else f"behind the newest, {head}"
    print(f"{shown}: revision {revision or 'none (empty schema)'} ({state})")
    return 0 if revision == head else 1
