"""``fornace gc [--remove]``: what is left of environments that no longer exist
(deleted with ``--abandon`` while a clean-up could not run, or lost before it).

Lists the stacks named ``e<environment id>`` whose environment is not in the
database -- the local cloud's (``[conductor] cloud_dir``) always, Heat's when
the stack backend is ``heat`` (``--stacks`` or ``[conductor] stacks``) -- and
the broker queues the conductors wrote down for such environments (their
agents' input queues, their results queue).  ``--remove`` deletes them (a
local stack's processes are stopped and its sandboxes removed) and frees the
lock rows of environments that are gone.
Exit status: 0 nothing orphaned (or all removed), 1 orphans listed, 2 a
backend could not be read or something could not be removed, 3 the database
cannot be used (unreachable, refusing, or without Fornace's schema).
"""
from __future__ import annotations

import argparse
import re
from typing import Any

from oslo_config import cfg

# Heat holds the project's other stacks too: only names Fornace gives its own
HEAT_STACK_NAME = re.compile(r"e[0-9a-f]{32}")


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gc", help="list (and --remove) stacks and queues of environments that are gone",
        description="List the stacks (local cloud; Heat with --stacks heat) and broker "
                    "queues whose environment no longer exists in the database; --remove "
                    "deletes them.")
    parser.add_argument("--remove", action="store_true",
                        help="delete the orphaned stacks (stop their processes) and queues")
    parser.add_argument("--stacks", choices=["local", "heat"],
                        help="also look at this backend's stacks (default [conductor] stacks; "
                             "the local cloud is always looked at)")
    parser.add_argument("--db", metavar="URL",
                        help="database URL (default [database] connection, else SQLite in "
                             "[api] state_dir)")


# keystone mode: no one account sees every environment's stack
PER_PROJECT = ("in keystone mode each environment's stack is in its user's project, "
               "made through the user's trust: give [heat] the credentials of an account "
               "of that project (auth_type, auth_url, username, password, project_name, "
               "user_domain_name, project_domain_name) and run gc once per project")


def _backends(conf: cfg.ConfigOpts) -> list[tuple[str, Any, Any]]:
    """(label, executor or the reason it cannot be made, which stack names are
    Fornace's) to look at."""
    from fornace.conductor.executors.localcloud import LocalStacks

    backends: list[tuple[str, Any, Any]] = [
        ("local", LocalStacks.from_conf(conf), lambda name: name.startswith("e"))]
    if (conf.command.stacks or conf.conductor.stacks) == "heat":
        backends.append(("heat", _heat(conf), HEAT_STACK_NAME.fullmatch))
    return backends


def _heat(conf: cfg.ConfigOpts) -> Any:
    """Heat as ``[heat]`` reaches it without a task (its url, or its own
    credentials), or why it cannot be reached (a string)."""
    from fornace.common import identity
    from fornace.conductor.executors.heat import HeatStacks

    try:
        if (conf.api.auth_mode == "keystone" and not conf.heat.url
                and identity.plugin_options(conf, "heat") is None):
            return PER_PROJECT
        return HeatStacks.from_config(conf)
    except ValueError as exc:   # IdentityError too
        return str(exc)


def run(conf: cfg.ConfigOpts) -> int:
    from sqlalchemy import delete, select
    from sqlalchemy.exc import SQLAlchemyError

    from fornace.cli.db import unusable

    from fornace.common.options import database_url
    from fornace.common.broker import Broker
    from fornace.common.db import queues
    from fornace.common.db.engine import make_engine
    from fornace.common.db.models import Environment, JobLock
    from fornace.conductor.executors.base import StackFailure
    from fornace.conductor.historypurge import TURN

    command = conf.command
    url = command.db or database_url(conf)
    engine = make_engine(url)
    trouble = False
    try:
        try:
            with engine.connect() as conn:
                known = set(conn.scalars(select(Environment.id)))
                gone_queues = queues.orphaned(conn)
        except SQLAlchemyError as exc:
            return unusable("gc", url, exc)
        stacks: list[tuple[Any, str]] = []
        for label, backend, ours in _backends(conf):
            if isinstance(backend, str):
                print(f"cannot list the {label} stacks: {backend}")
                trouble = True
                continue
            try:
                names = [n for n in backend.stack_names() if ours(n) and n[1:] not in known]
                for name in names:
                    print(f"orphaned stack {name} ({label}): {backend.describe(name)}")
            except (StackFailure, ValueError) as exc:
                print(f"cannot list the {label} stacks: {getattr(exc, 'message', exc)}")
                trouble = True
                continue
            stacks.extend((backend, name) for name in names)
        for environment_id, names in gone_queues.items():
            for name in names:
                print(f"orphaned queue {name} (environment {environment_id})")
        if not stacks and not gone_queues:
            print("no orphaned stacks or queues")
        if not command.remove:
            return 2 if trouble else 1 if stacks or gone_queues else 0
        for backend, name in stacks:
            try:
                backend.delete(name)
                print(f"removed stack {name}")
            except StackFailure as exc:
                print(f"could not remove stack {name}: {exc.message}")
                trouble = True
        removed = []
        if gone_queues:
            with Broker(conf.broker.url, queue_type=conf.broker.queue_type) as broker:
                for name in (n for names in gone_queues.values() for n in names):
                    try:
                        broker.delete(name)
                        removed.append(name)
                        print(f"removed queue {name}")
                    except Exception as exc:  # noqa: BLE001 -- say which, go on
                        print(f"could not remove queue {name}: {exc}")
                        trouble = True
        with engine.begin() as conn:
            queues.forget(conn, removed)
            freed = conn.execute(delete(JobLock).where(
                JobLock.environment_id.not_in(select(Environment.id)),
                JobLock.environment_id != TURN, JobLock.job_id.is_(None))).rowcount
        if freed:
            print(f"forgot {freed} lock row(s) of environments that are gone")
        return 2 if trouble else 0
    finally:
        engine.dispose()
