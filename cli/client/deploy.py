"""``fornace deploy``, ``fornace action`` and ``fornace plan``: start a job and follow it.

``deploy`` is the 0.2 way (a configuration session deployed as a whole);
``action`` starts one of the lifecycle actions on a deployed environment;
``plan`` shows what the next deployment would do, without doing it.  All
three follow their job to its end and exit 0 when it succeeded, 1 when it
did not.  Action parameters that name services or units (``node_id``,
``node_ids``, ``node_instance_id``, ``node_instance_ids``) may use names and
hostnames: they are turned into the ids the API expects.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from fornace.cli.client.common import FAILED, OK, add_command, dispatch, find_environment, key_values, note
from fornace.cli.client.confirm import DECLINED, add_yes_option, confirmed, extent, plural
from fornace.cli.client.follow import Follower, follow_or_return, newest_job, report_line
from fornace.cli.client.http import ApiClient, ClientError
from fornace.cli.client.formats import add_format_option, emit, format_of, print_table
from fornace.cli.client.service import load_services
from fornace.cli.client.session import Sessions
from fornace.common import jsonlimits
from fornace.common.errors import FornaceError

ACTIONS = ("install", "uninstall", "execute_operation", "heal", "scale", "check", "plan")
CHANGE_DETECTION = ("evaluate", "always", "skip")
SERVICE_PARAMETERS = ("node_id", "node_ids")
UNIT_PARAMETERS = ("node_instance_id", "node_instance_ids")


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    deploy = add_command(
        subparsers, "deploy", "deploy pending changes and follow the deployment",
        "Deploy the environment: its pending changes (from 'fornace service add' or "
        "'remove'), the services of --service files, or, with neither, the environment "
        "as it is (a failed deployment is finished, changed units are reconfigured). "
        "Follows the deployment: a progress bar on a terminal, a line per unit command "
        "as it ends (hostname, operation, status) and the reports. Exit status 0 when "
        "it succeeded, 1 when it failed.",
        ["fornace deploy demo",
         "fornace deploy demo --service data/examples/linux-web.json",
         "fornace deploy demo --change-detection always --json"])
    deploy.add_argument("environment", metavar="ENV", help="environment id or name")
    deploy.add_argument("--service", action="append", default=[], metavar="FILE",
                        help="add the services of FILE first (JSON or YAML: a service, a "
                             "list, or an environment model); repeatable")
    deploy.add_argument("--change-detection", choices=CHANGE_DETECTION,
                        help="evaluate (default): reconfigure units whose description "
                             "changed, unless marked customized; always: customized ones "
                             "too; skip: compare nothing, only what the workflows choose "
                             "runs")
    _no_follow(deploy)

    action = add_command(
        subparsers, "action", "run a lifecycle action (scale, heal, check...)",
        "Run a lifecycle action on a deployed environment and follow its job like "
        "deploy does. Actions and their parameters: install (change_detection); "
        "uninstall; check (runs each unit's check: its status becomes ok, degraded or "
        "error); heal (node_instance_id: a unit); scale (node_id: a service, delta: +N "
        "or -N, scale_compute); execute_operation (operation, operation_kwargs, "
        "type_names, node_ids, node_instance_ids, run_by_dependency_order, "
        "allow_kwargs_override); plan (see 'fornace plan'). Services and units may be "
        "named by name or hostname instead of id. uninstall and a scale in (a negative "
        "delta) ask first on a terminal; --yes does not ask (and is needed when standard "
        "input is not a terminal).",
        ["fornace action demo check",
         "fornace action demo scale --param node_id=site --param delta=1",
         "fornace action demo scale --param node_id=site --param delta=-1 --yes",
         "fornace action demo heal --param node_instance_id=web1",
         "fornace action demo execute_operation --params "
         "'{\"operation\": \"stop\", \"node_instance_ids\": [\"web2\"]}'"])
    action.add_argument("environment", metavar="ENV", help="environment id or name")
    action.add_argument("action_name", metavar="NAME", choices=ACTIONS,
                        help=f"the action: {', '.join(ACTIONS)}")
    action.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a parameter (VALUE is JSON when it parses: 1, true, [..]; "
                             "else text); repeatable")
    action.add_argument("--params", metavar="JSON",
                        help="the parameters as one JSON object (--param overrides)")
    _no_follow(action)
    add_yes_option(action)

    plan = add_command(
        subparsers, "plan", "show what the next deployment would do",
        "Run the next deployment on the simulator and list its tasks (target unit, "
        "operation, reason: new, reconfigure, unchanged...), with the changes waiting "
        "in this client's configuration session if there are any. Nothing runs on the "
        "units and the environment does not change.",
        ["fornace plan demo", "fornace plan demo --change-detection always --json",
         "fornace plan demo -f value | cut -f1,2"])
    plan.add_argument("environment", metavar="ENV", help="environment id or name")
    plan.add_argument("--change-detection", choices=CHANGE_DETECTION,
                      help="as for deploy (default evaluate)")
    add_format_option(plan)


def _no_follow(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-follow", action="store_true",
                        help="start the job, print it and return (exit status 0)")


def run(conf: Any) -> int:
    return dispatch(conf.command, {"deploy": deploy, "action": action, "plan": plan})


# -- deploy --------------------------------------------------------------------------------

def deploy(command: Any, client: ApiClient) -> int:
    services = [service for path in command.service for service in load_services(path)]
    env = find_environment(client, command.environment)
    sessions = Sessions(client)
    session, opened = sessions.open(env["id"])
    base = f"/environments/{env['id']}"
    try:
        for service in services:
            client.post(f"{base}/services", service, session=session)
        query = f"?change_detection={command.change_detection}" \
            if command.change_detection else ""
        client.post(f"{base}/sessions/{session}/deploy{query}")
    except ClientError:
        if opened:      # a half-filled session of this command: not left behind
            sessions.forget(env["id"])
            _delete_quietly(client, f"{base}/sessions/{session}")
        raise
    sessions.forget(env["id"])
    job = newest_job(client, env["id"], "deploy")
    return follow_or_return(command, client, env, job)


def _delete_quietly(client: ApiClient, path: str) -> None:
    try:
        client.delete(path)
    except ClientError:
        pass    # the error that matters is the one being raised


# -- action --------------------------------------------------------------------------------

def action(command: Any, client: ApiClient) -> int:
    parameters = {**_json_object(command.params), **key_values(command.param, "--param")}
    env = find_environment(client, command.environment)
    services = client.get(f"/environments/{env['id']}")["services"]
    parameters = with_ids(parameters, services)
    question = destructive(command.action_name, parameters, env, services)
    if question and not confirmed(command, question, f"{command.action_name} of environment "
                                                     f"{env['name']} not started"):
        return DECLINED
    job = client.post(f"/environments/{env['id']}/actions/{command.action_name}", parameters)
    return follow_or_return(command, client, env, job)


def destructive(action_name: str, parameters: dict[str, Any], env: dict[str, Any],
                services: list[dict[str, Any]]) -> str | None:
    """The question to ask before an action that removes units (uninstall, a scale
    in), None for the others."""
    if action_name == "uninstall":
        return f"Uninstall environment {env['name']} ({extent(services)})?"
    if action_name != "scale":
        return None
    delta = _integer(parameters.get("delta", 1))
    if delta is None or delta >= 0:
        return None     # a scale out; or a delta the API will refuse
    service = next((s for s in services if s.get("id") == parameters.get("node_id")), None)
    if service is None:
        return f"Scale in environment {env['name']} by {plural(-delta, 'unit')}?"
    count = len(service.get("units") or [])
    return (f"Scale in service {service.get('name')} of environment {env['name']} by "
            f"{plural(-delta, 'unit')} ({count} -> {count + delta})?")


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _json_object(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = jsonlimits.loads(text, source="--params")
    except json.JSONDecodeError as exc:
        raise FornaceError(f"--params: invalid JSON at column {exc.colno}: {exc.msg}") \
            from None
    except jsonlimits.JsonLimitError as exc:
        raise FornaceError(f"--params: {exc.message}") from None
    if not isinstance(value, dict):
        raise FornaceError("--params must be a JSON object, e.g. '{\"delta\": 1}'")
    return value


def with_ids(parameters: dict[str, Any], services: list[dict[str, Any]]) -> dict[str, Any]:
    """``parameters`` with service names and unit names/hostnames replaced by ids."""
    service_ids = _aliases(services)
    unit_ids = _aliases([u for s in services for u in s.get("units") or []],
                        lambda unit: (unit.get("state") or {}).get("hostname"))
    converted = dict(parameters)
    for names, ids in ((SERVICE_PARAMETERS, service_ids), (UNIT_PARAMETERS, unit_ids)):
        for name in names:
            if name in converted:
                converted[name] = _replace(converted[name], ids)
    return converted


def _aliases(items: list[dict[str, Any]], other: Any = None) -> dict[str, str]:
    """name (and ``other(item)``) -> id, for names no other item has and no id equals."""
    ids = {item.get("id") for item in items}
    found: dict[str, list[str]] = {}
    for item in items:
        for alias in {item.get("name"), other(item) if other else None} - {None}:
            found.setdefault(str(alias), []).append(item["id"])
    return {alias: owners[0] for alias, owners in found.items()
            if len(set(owners)) == 1 and alias not in ids}


def _replace(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, list):
        return [_replace(item, ids) for item in value]
    return ids.get(value, value) if isinstance(value, str) else value


# -- plan ----------------------------------------------------------------------------------

def plan(command: Any, client: ApiClient) -> int:
    format_of(command)
    env = find_environment(client, command.environment)
    parameters = {"change_detection": command.change_detection} \
        if command.change_detection else {}
    # pending changes (``service add``/``remove`` not deployed yet) are planned too
    session = Sessions(client).current(env["id"])
    job = client.post(f"/environments/{env['id']}/actions/plan", parameters, session=session)
    outcome = Follower(client, env["id"], job["id"], live=None).follow()
    rows = [(t["target_name"], t["operation"], t["reason"], t["status"])
            for t in outcome.job.get("tasks") or []]

    def show() -> None:
        print_table(("TARGET", "OPERATION", "REASON", "STATUS"), rows, empty="(nothing to do)")
        for report in outcome.reports:
            print(report_line(report))
    emit(command, outcome.document(), rows, show)
    if not outcome.ok:
        note(f"the plan job {job['id']} ended {outcome.job['state']}")
    return OK if outcome.ok else FAILED
