"""Instance helpers: ``generate-hostname`` and ``prepare-user-data``."""
from __future__ import annotations

import base64
import re
from typing import Any, Mapping
from urllib.parse import quote

from fornace.common.contract import agent_queue, results_queue as result_queue
from fornace.conductor.dsl.engine import Evaluator, function
from fornace.conductor.dsl.functions.values import as_text
from fornace.conductor.dsl.scope import Frame
from fornace.conductor.dsl.xmlload import Node


@function("generate-hostname", params=("pattern", "service_id"))
def generate_hostname(ev: Evaluator, node: Node, frame: Frame) -> str:
    pattern = ev.arg(node, frame, "pattern")
    service_id = ev.arg(node, frame, "service_id")
    return ev.context.hostnames.generate(
        as_text(pattern) if pattern else None,
        as_text(service_id) if service_id is not None else None)


@function("prepare-user-data", params=("hostname", "service", "unit", "template", "initFile"))
def prepare_user_data(ev: Evaluator, node: Node, frame: Frame) -> str:
    """Render the boot script that configures the unit's agent.

    The init script and the agent config template use 0.2 placeholders
    (``%RABBITMQ_HOST%``, ``%AGENT_CONFIG_BASE64%``…), so an existing 0.2
    ``data/`` folder renders unchanged.
    """
    context = ev.context
    env_id = as_text(context.model.get("id", ""))
    service = as_text(ev.arg(node, frame, "service") or "")
    unit = as_text(ev.arg(node, frame, "unit") or "")
    hostname = as_text(ev.arg(node, frame, "hostname") or "")
    template = as_text(ev.arg(node, frame, "template") or "Default")
    init_file = as_text(ev.arg(node, frame, "initFile") or "init.ps1")
    broker = context.broker_settings()
    values = {
        "RABBITMQ_HOST": broker["host"],
        "RABBITMQ_PORT": broker["port"],
        "RABBITMQ_USER": broker["login"],
        "RABBITMQ_PASSWORD": broker["password"],
        "RABBITMQ_VHOST": broker["virtual_host"],
        "RABBITMQ_SSL": broker["ssl"],
        "BROKER_URL": agent_broker_url(broker),
        "BROKER_QUEUE_TYPE": broker.get("queue_type") or "classic",
        "RABBITMQ_INPUT_QUEUE": agent_queue(env_id, service, unit),
        "RESULT_QUEUE": result_queue(env_id),
        "INTERNAL_HOSTNAME": hostname,
        "MURANO_SERVER_ADDRESS": broker["server_address"],
        "CA_ROOT_CERT_BASE64": "",
    }
    config = _fill(context.store.agent_config(template), values)
    values["AGENT_CONFIG_BASE64"] = base64.b64encode(config.encode()).decode()
    return _fill(context.store.init_script(init_file), values)


def agent_broker_url(broker: Mapping[str, Any]) -> str:
    """The broker URL agents are given (``%BROKER_URL%``).

    ``broker["url"]`` when set (the folder broker of one-machine mode, which
    agents reach as the conductor does), else the ``amqp://`` URL of the
    ``[rabbitmq]`` settings, its parts quoted; with ``alternates`` (the other
    nodes of a cluster) one such URL per node, ``;`` between them.
    """
    if broker.get("url"):
        return str(broker["url"])
    vhost = str(broker.get("virtual_host") or "/")
    nodes = [(broker["host"], broker["port"]), *map(tuple, broker.get("alternates") or ())]
    return ";".join("amqp://{}:{}@{}:{}/{}".format(
        quote(str(broker["login"]), safe=""), quote(str(broker["password"]), safe=""),
        host, port, quote(vhost, safe="") if vhost != "/" else "/") for host, port in nodes)


_PLACEHOLDER = re.compile(r"%([A-Z0-9_]+)%")


def _fill(text: str, values: dict[str, object]) -> str:
    """Replace the known ``%NAME%`` placeholders in one pass (a value that
    itself looks like a placeholder, a password say, is not replaced again)."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        return as_text(values[name]) if name in values else match.group(0)
    return _PLACEHOLDER.sub(value, text)
