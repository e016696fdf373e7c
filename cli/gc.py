"""``fornace gc [--remove]``: what the local cloud runs for environments that
no longer exist (deleted with ``--abandon`` while a clean-up could not run,
or lost before abandon cleaned up).

Lists every local-cloud stack (``[conductor] cloud_dir``) whose environment is
not in the database, with its instances and whether their processes run;
``--remove`` deletes those stacks (their processes are stopped, their
sandboxes removed) and frees the lock rows of environments that are gone.
Exit status: 0 nothing orphaned (or all removed), 1 orphans listed.
"""
from __future__ import annotations

import argparse

from oslo_config import cfg


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gc", help="list (and --remove) local-cloud stacks of environments that are gone",
        description="List the local cloud's stacks whose environment no longer exists in "
                    "the database; --remove deletes them.")
    parser.add_argument("--remove", action="store_true",
                        help="delete the orphaned stacks (stop their processes)")
    parser.add_argument("--db", metavar="URL",
                        help="database URL (default [database] connection, else SQLite in "
                             "[api] state_dir)")


def run(conf: cfg.ConfigOpts) -> int:
    from sqlalchemy import delete, select

    from fornace.api.config import database_url
    from fornace.common.db.engine import make_engine
    from fornace.common.db.models import Environment, JobLock
    from fornace.conductor.config import cloud_dir
    from fornace.conductor.executors.localcloud import LocalStacks

    command = conf.command
    engine = make_engine(command.db or database_url(conf))
    try:
        with engine.connect() as conn:
            known = set(conn.scalars(select(Environment.id)))
        stacks = LocalStacks(cloud_dir(conf))
        orphans = [name for name in stacks.stack_names()
                   if name.startswith("e") and name[1:] not in known]
        for name in orphans:
            instances = stacks.instances(name)
            running = sum(1 for info in instances.values() if info.get("running"))
            print(f"orphaned stack {name}: {len(instances)} instance(s), {running} running")
        if not orphans:
            print("no orphaned stacks")
        if command.remove:
            for name in orphans:
                stacks.delete(name)
                print(f"removed stack {name}")
            with engine.begin() as conn:
                freed = conn.execute(delete(JobLock).where(
                    JobLock.environment_id.not_in(select(Environment.id)),
                    JobLock.job_id.is_(None))).rowcount
            if freed:
                print(f"forgot {freed} lock row(s) of environments that are gone")
            return 0
        return 1 if orphans else 0
    finally:
        engine.dispose()
