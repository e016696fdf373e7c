"""The conductor's options (oslo.config) and the settings built from them.

``[conductor]``, ``[engine]``, ``[rabbitmq]`` and ``[heat]`` are the
conductor's own; the broker, data folder and database options it shares with
the API are declared in :mod:`fornace.common.options`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from oslo_config import cfg

from fornace.common import identity, options
from fornace.common.brokerurl import hosts, is_folder_url
from fornace.common.jsonlimits import HARD_MAX_DEPTH
from fornace.conductor.dsl.limits import Limits, MiB
from fornace.conductor.executors import AGENTS, STACKS

if TYPE_CHECKING:  # every command registers these options; only the engine's load the engine
    from fornace.conductor.session import Settings

_LIMITS = Limits()

engine_opts = [
    cfg.IntOpt("max_rounds", default=100, min=1,
               help="Rounds (fixpoint + actions) after which a deployment that still "
                    "queues actions is stopped as non-converging."),
    cfg.IntOpt("max_passes", default=100000, min=1,
               help="Workflow passes within one round after which a deployment whose "
                    "rules keep changing the model is stopped as non-converging."),
    cfg.FloatOpt("agent_timeout", default=3600.0, min=0,
                 help="Seconds to wait for an agent result when a send-command gives no "
                      "timeout (0 waits without limit, as Murano 0.2 did)."),
    cfg.FloatOpt("agent_absent_after", default=30.0, min=0,
                 help="Seconds after which an agent that was listening on its queue and "
                      "stopped (its process died, its VM stopped) is taken to be gone: its "
                      "plans fail then instead of at agent_timeout. Agents never seen "
                      "listening are waited for (new VMs boot). RabbitMQ and the folder broker "
                      "(not memory://); 0: off."),
    cfg.FloatOpt("agent_boot_timeout", default=600.0, min=0,
                 help="Seconds a plan waits for an agent that was never seen listening on "
                      "its queue (a VM that did not boot, an agent with the wrong queue): "
                      "then it fails with 'no agent is listening on QUEUE' instead of "
                      "waiting for agent_timeout. RabbitMQ and the folder broker; 0: off."),
    cfg.IntOpt("max_model_bytes", default=_LIMITS.max_model_bytes, min=1024,
               help="Largest object model (bytes as JSON, strings counted by characters): "
                    "a --model file or task model over it is refused, and a deployment whose "
                    "rules grow the model past it is stopped with an error report naming the "
                    "rules that wrote the most."),
    cfg.IntOpt("max_value_bytes", default=_LIMITS.max_value_bytes, min=64,
               help="Largest value one <set> may write (bytes as JSON): a rule writing more "
                    "stops the deployment with an error report naming the rule and the "
                    "place. Values holding the place they are written to are refused too."),
    cfg.IntOpt("max_json_depth", default=_LIMITS.max_json_depth, min=2, max=HARD_MAX_DEPTH,
               help="Deepest nesting of JSON containers in templates, --model files, task "
                    "models and the model a deployment builds; deeper input is refused with "
                    "its line, column and JSON path."),
    cfg.IntOpt("max_template_bytes", default=_LIMITS.max_template_bytes, min=1024,
               max=1024 * MiB,
               help="Largest catalog file a deployment reads: Heat and agent templates, "
                    "scripts, agent configuration and init scripts. Template files must also "
                    "stay inside the catalog folder once symbolic links are followed. Filter "
                    "expressions take number literals of at most 100 characters (fixed)."),
]

# each of host, port, login, password, virtual_host and ssl left unset comes from
# [broker] url when that is an AMQP URL (agent_broker)
rabbit_opts = [
    cfg.HostAddressOpt("host", default="127.0.0.1",
                       help="Broker host agents connect to (unset: that of [broker] url when "
                            "it is an AMQP URL, as for port, login, password, virtual_host "
                            "and ssl)."),
    cfg.PortOpt("port", default=5672, help="Broker port agents connect to."),
    cfg.StrOpt("login", default="guest", help="Broker user of the agents."),
    cfg.StrOpt("password", default="guest", secret=True, help="Broker password of the agents."),
    cfg.StrOpt("virtual_host", default="/", help="Broker virtual host."),
    cfg.BoolOpt("ssl", default=False, help="Agents use TLS to reach the broker."),
    cfg.StrOpt("server_address", default="127.0.0.1",
               help="Address of the Fornace server given to instances in user data."),
]

heat_opts = [
    cfg.StrOpt("url", default=None,
               help="Heat endpoint, e.g. http://heat:8004/v1/%(tenant_id)s (the task's "
                    "tenant is substituted). Unset: the orchestration endpoint of the "
                    "Keystone catalog of the token the task acts with: its trust's (the "
                    "[keystone_authtoken] service user scoped to the environment's trust), its "
                    "user's token, or the credentials below. The auth_* options below "
                    "(keystoneauth1's) are service credentials for tasks that carry "
                    "neither a trust nor a token; cafile/insecure apply to Heat and to "
                    "the Keystone calls made for it."),
    cfg.StrOpt("region_name", default=None, help="Region of the Heat endpoint."),
    cfg.StrOpt("interface", default="public",
               help="Catalog interface of the Heat endpoint (public, internal, admin)."),
    cfg.StrOpt("resource_registry", default=None,
               help="Heat resource registry sent with every stack create/update: a JSON "
                    "object (e.g. {\"AWS::EC2::Instance\": \"OS::Heat::None\"}) or the path "
                    "of a YAML/JSON environment file (provider templates it names are "
                    "sent as files), so the templates run on a Heat without Nova."),
    cfg.FloatOpt("poll_start", default=0.5, min=0.01,
                 help="First delay (seconds) between stack status polls; doubles up to "
                      "poll_max."),
    cfg.FloatOpt("poll_max", default=5.0, min=0.01,
                 help="Longest delay (seconds) between stack status polls."),
    cfg.FloatOpt("stack_timeout", default=1800.0, min=0,
                 help="Seconds to wait for a stack create/update/delete to finish (0 waits "
                      "without limit, as Murano 0.2 did). (The option 'timeout' of this "
                      "group is keystoneauth1's: of one HTTP request.)"),
]

conductor_opts = [
    cfg.IntOpt("max_environments", default=4, min=1,
               help="Deployments run at the same time (one consumer thread each)."),
    cfg.StrOpt("agents", default="amqp", choices=list(AGENTS),
               help="Who answers execution plans: amqp (the units' agents, over the "
                    "broker) or simulator (every plan answered 'ok' at once, no VM: for "
                    "trying workflows and for benchmarks of the whole daemon path)."),
    cfg.StrOpt("stacks", default="simulator", choices=list(STACKS),
               help="Where stacks are made: simulator (every stack action succeeds, "
                    "for trying workflows), heat (python-heatclient, see [heat]) or local "
                    "(the local cloud: instances are sandboxes running a real agent, see "
                    "cloud_dir; needs a broker shared by processes: filesystem:///folder "
                    "or amqp://...)."),
    cfg.StrOpt("cloud_dir", default="",
               help="State folder of the local cloud (stacks = local); default "
                    "<[api] state_dir>/cloud."),
    cfg.BoolOpt("trace", default=True,
                help="Record every job's trace (which rule fired on which object, what it "
                     "set, which actions it queued and how they ended) and send it to the "
                     "API before the job's result: GET .../jobs/JOB/trace, fornace trace, "
                     "the dashboard's Why page. Costs about 6 percent of a deployment's engine "
                     "time (tools/bench_trace.py)."),
    cfg.IntOpt("trace_bytes", default=4 * 1024 * 1024, min=64 * 1024,
               help="Most bytes of JSON a job's trace keeps; past it the trace ends with "
                    "a note 'trace truncated'."),
    cfg.FloatOpt("lock_stale_after", default=60.0, min=1.0,
                 help="Seconds without a heartbeat after which a conductor's job lock is "
                      "taken to be dead and may be taken over (by a copy of the same job, "
                      "by another conductor running the task the lock keeps -- the holder "
                      "may be frozen, its task message still in its hands -- or by another "
                      "job); the heartbeat runs every quarter of it (2 s at most), and so "
                      "does each conductor's look for silent holders. The database's clock "
                      "on PostgreSQL."),
    cfg.FloatOpt("lock_wait", default=600.0, min=0.0,
                 help="Seconds a job waits for its environment's lock when another job "
                      "holds it (the job before had its result stored but its conductor "
                      "had not freed the lock yet, a release delayed by a database outage): "
                      "the API shows the job queued, with which job holds the lock, on "
                      "which conductor and since when, and it runs once the lock is free; "
                      "past this it is refused, saying how long it waited. A waiting job "
                      "keeps one of this conductor's max_environments consumer threads; "
                      "a job abandoned meanwhile leaves the wait. 0: refused at once."),
]


def register(conf: cfg.ConfigOpts) -> None:
    """Every option the conductor side reads ([conductor] included: the CLI registers
    them all without importing the daemon): its own groups, and the shared ones it
    reads -- the broker, the data folder, the database of the job locks and the
    state folder the local cloud defaults into."""
    conf.register_opts(conductor_opts, group="conductor")
    conf.register_opts(engine_opts, group="engine")
    conf.register_opts(rabbit_opts, group="rabbitmq")
    conf.register_opts(heat_opts, group="heat")
    options.register_broker(conf)
    options.register_data_folder(conf)
    options.register_database(conf)


def config_mapping(conf: cfg.ConfigOpts) -> dict[str, Any]:
    """Every option as ``name`` / ``group.name`` for the ``##name`` paths."""
    values: dict[str, Any] = {}
    for opt in options.data_opts:
        values[opt.dest] = conf[opt.dest]
    for group, opts in (("engine", engine_opts), ("rabbitmq", rabbit_opts)):
        for opt in opts:
            if not opt.secret:
                values[f"{group}.{opt.dest}"] = conf[group][opt.dest]
    return values


def engine_limits(conf: cfg.ConfigOpts) -> Limits:
    """The ``[engine]`` limits on data."""
    engine = conf.engine
    return Limits(max_model_bytes=engine.max_model_bytes, max_value_bytes=engine.max_value_bytes,
                  max_json_depth=engine.max_json_depth,
                  max_template_bytes=engine.max_template_bytes)


def engine_settings(conf: cfg.ConfigOpts) -> Settings:
    from fornace.conductor.session import Settings

    rabbit = conf.rabbitmq
    timeout = conf.engine.agent_timeout
    return Settings(
        max_rounds=conf.engine.max_rounds, max_passes=conf.engine.max_passes,
        limits=engine_limits(conf),
        agent_timeout=timeout or None, config=config_mapping(conf),
        agent_absent_after=conf.engine.agent_absent_after or None,
        agent_boot_timeout=conf.engine.agent_boot_timeout or None,
        broker={**agent_broker(conf), "server_address": rabbit.server_address,
                "url": conf.broker.url if is_folder_url(conf.broker.url) else None})


def agent_broker(conf: cfg.ConfigOpts) -> dict[str, Any]:
    """Where agents reach the broker: ``[rabbitmq]``'s options; those left unset
    come from ``[broker] url`` when it is an AMQP URL (agents then use the
    conductor's own broker and virtual host, not the defaults' ``/``).

    A ``[broker] url`` naming the nodes of a cluster gives the agents every
    node (``alternates``: ``[host, port]`` of the nodes after the first) unless
    ``[rabbitmq] host`` or ``port`` is set: agents that reach the broker by
    another address get that one.  ``queue_type`` is ``[broker] queue_type``.
    """
    rabbit = conf.rabbitmq
    found = {"host": rabbit.host, "port": rabbit.port, "login": rabbit.login,
             "password": rabbit.password, "virtual_host": rabbit.virtual_host,
             "ssl": rabbit.ssl, "alternates": [], "queue_type": conf.broker.queue_type}
    nodes = hosts(conf.broker.url)
    if not nodes:
        return found
    first = nodes[0]
    from_url = {"host": first.host, "port": first.port, "login": first.login or None,
                "password": first.password or None, "virtual_host": first.virtual_host,
                "ssl": first.scheme == "amqps" or None}
    unset = {name for name in from_url
             if conf.get_location(name, "rabbitmq").location is cfg.Locations.opt_default}
    for name, value in from_url.items():
        if value is not None and name in unset:
            found[name] = value
    if {"host", "port"} <= unset:
        found["alternates"] = [[node.host, node.port] for node in nodes[1:]]
    return found


def trust_deleter(conf: cfg.ConfigOpts) -> Callable[[str], None] | None:
    """What deletes an environment's trust after its deletion: the
    ``[keystone_authtoken]`` service user's (None when the conductor has none)."""
    if not identity.configured(conf):
        return None

    def delete(trust_id: str) -> None:
        identity.Keystone.from_config(conf).delete_trust(trust_id)
    return delete


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    """For oslo-config-generator (``etc/fornace.conf.sample``)."""
    return [("conductor", conductor_opts), ("engine", engine_opts), ("rabbitmq", rabbit_opts),
            ("heat", heat_opts + identity.group_opts())]
