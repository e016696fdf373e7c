"""The options several services read, declared once (oslo.config).

The API, the conductor and the operators' commands all read the broker
(``[broker] url``), the data folder (``data_dir``), the database
(``[database] connection``) and the state folder the database defaults into
(``[api] state_dir``: its group is the API's for the configuration files
written before it was shared).  Each service registers the groups it reads
with the ``register_*`` functions here -- registering one twice is a no-op --
and never reads an option another service declares.  The options only one
service reads stay in its own ``config`` module (``fornace.api.config``,
``fornace.conductor.config``, ``fornace.agent.config``); ``[keystone_authtoken]``, which
the API and the conductor read too, is :mod:`fornace.common.identity`'s.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path

from oslo_config import cfg
from oslo_db import options as oslo_db_options

from fornace.common import identity
from fornace.common.db.pool import Pool, StartupRetries
from fornace.common.resources import BUILTIN_DATA

DEFAULT_STATE_DIR = os.path.join(os.path.expanduser("~"), ".fornace")

BROKER = "broker"
DATABASE = "database"
STATE = "api"   # [api] state_dir: the group it had when only the API read it

broker_opts = [
    cfg.StrOpt("url", default="memory://", secret=True,
               help="Broker URL: memory:// (in-process: API, conductor and simulated "
                    "agents in one process), filesystem:///some/folder (messages as files, "
                    "shared by the processes of one machine, e.g. local cloud agents; "
                    "their agents get this URL too) or amqp://user:password@host:5672/vhost "
                    "for RabbitMQ (agents get the [rabbitmq] settings). The nodes of a "
                    "RabbitMQ cluster one after the other, ';' between their URLs "
                    "(amqp://u:pw@mq1:5672/vh;amqp://u:pw@mq2:5672/vh): a connection goes "
                    "to the first node that answers, and to another when its node dies; "
                    "agents get every node."),
    cfg.StrOpt("queue_type", default="classic", choices=["classic", "quorum"],
               help="How the durable queues (tasks, results, reports, job events, the "
                    "agents' queues) are declared on RabbitMQ: classic (on one node), or "
                    "quorum (replicated on the nodes of a cluster: their messages outlive "
                    "the loss of a minority of nodes). Agents are told. A queue that exists "
                    "with the other type is refused with an error naming it: delete it "
                    "once it is empty to change. Ignored by memory:// and filesystem://."),
]

data_opts = [
    cfg.StrOpt("data_dir", default=str(BUILTIN_DATA),
               sample_default="<the catalog shipped with Fornace>",
               help="Catalog folder: workflows/, templates/cf, templates/agent, init-scripts."),
]

state_opts = [
    cfg.StrOpt("state_dir", default=DEFAULT_STATE_DIR, sample_default="~/.fornace",
               help="Folder for the default SQLite database and other local state."),
]

database_opts = [
    cfg.StrOpt("connection", secret=True,
               help="SQLAlchemy URL of the database (default: SQLite file "
                    "fornace.sqlite in state_dir), e.g. "
                    "postgresql+psycopg://user@127.0.0.1:5432/fornace. A PostgreSQL "
                    "primary and its standbys: "
                    "postgresql+psycopg://user@/fornace?host=db1:5432&host=db2:5432"
                    "&target_session_attrs=read-write (the services follow a "
                    "failover; they do not promote)."),
    cfg.IntOpt("history_days", default=0, min=0,
               help="Days the history of ended jobs is kept: the conductors remove the "
                    "jobs that ended longer ago, with their reports, task records, "
                    "traces and the sessions they deployed, and older dead letters, "
                    "keeping each environment's latest job, latest deploying job and "
                    "latest traced job (one conductor at a time, about once an hour, in "
                    "small batches; 'fornace db purge --older-than DAYS' does the same at "
                    "once). 0: kept for ever."),
]


def _oslo_db_opts() -> list[cfg.Opt]:
    """oslo.db's options of the pool and of the start-up retries, as oslo.db
    declares them (names, help), with Fornace's pool defaults: 30 connections,
    all kept (:class:`~fornace.common.db.pool.Pool`).  Its other options (MySQL
    modes, slave_connection, db_max_retries...) are not Fornace's: not declared."""
    defaults = Pool()
    fornace_defaults = {"max_pool_size": defaults.size, "max_overflow": defaults.overflow}
    wanted = ("max_pool_size", "max_overflow", "pool_timeout", "connection_recycle_time",
              "max_retries", "retry_interval")
    found = {opt.name: opt for opt in oslo_db_options.database_opts if opt.name in wanted}
    opts = []
    for name in wanted:
        opt = copy.deepcopy(found[name])
        if name in fornace_defaults:
            opt.default = fornace_defaults[name]
        opts.append(opt)
    return opts


database_opts += _oslo_db_opts()


def register_broker(conf: cfg.ConfigOpts) -> None:
    """``[broker] url``: where tasks, results, reports and job events travel."""
    conf.register_opts(broker_opts, group=BROKER)


def register_data_folder(conf: cfg.ConfigOpts) -> None:
    """``data_dir``: the catalog (workflows, templates, types.json)."""
    conf.register_opts(data_opts)


def register_state_folder(conf: cfg.ConfigOpts) -> None:
    """``[api] state_dir``: the default database's folder, and the local cloud's."""
    conf.register_opts(state_opts, group=STATE)


def register_database(conf: cfg.ConfigOpts) -> None:
    """``[database]``: ``connection``, oslo.db's pool and start-up retry options,
    and the state folder the default database is in."""
    conf.register_opts(database_opts, group=DATABASE)
    register_state_folder(conf)


def database_url(conf: cfg.ConfigOpts) -> str:
    """``[database] connection``, else the SQLite file ``fornace.sqlite`` in
    ``[api] state_dir`` (the folder is made)."""
    if conf.database.connection:
        return conf.database.connection
    os.makedirs(conf.api.state_dir, exist_ok=True)
    return "sqlite:///" + os.path.join(conf.api.state_dir, "fornace.sqlite")


def database_pool(conf: cfg.ConfigOpts) -> Pool:
    """The engines' pool as ``[database]`` describes it."""
    group = conf.database
    return Pool(size=group.max_pool_size, overflow=group.max_overflow,
                timeout=group.pool_timeout, recycle=group.connection_recycle_time)


def database_retries(conf: cfg.ConfigOpts) -> StartupRetries:
    """How long a service waits for its database at start-up (``[database]
    max_retries`` tries ``retry_interval`` seconds apart)."""
    return StartupRetries(conf.database.max_retries, conf.database.retry_interval)


def data_folder(conf: cfg.ConfigOpts) -> Path:
    """``data_dir``, ``~`` expanded."""
    return Path(os.path.expanduser(conf.data_dir))


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    """For oslo-config-generator (``etc/fornace.conf.sample``)."""
    return [(None, data_opts), (BROKER, broker_opts), (DATABASE, database_opts),
            (STATE, state_opts)] + identity.list_opts()
