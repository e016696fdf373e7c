"""``fornace service add|list|remove``: the services of an environment.

Services are changed in a configuration session (see :mod:`fornace.cli.client.session`)
and take effect with ``fornace deploy``.  A service comes from a file -- one
service object, a list of them, or an environment model whose ``services``
are taken, such as ``data/examples/linux-web.json`` -- in JSON, or in YAML
when the file name ends in ``.yaml``/``.yml`` (PyYAML comes with
oslo.config); or from options (``--type``, ``--name``, ``--units``,
``--set FIELD=VALUE``).  The API checks every field.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fornace.common import jsonlimits
from fornace.common.errors import FornaceError

from fornace.cli.client.common import (OK, add_command, add_group, dispatch, find_environment,
                         find_service, key_values)
from fornace.cli.client.output import print_json, print_table
from fornace.cli.client.http import ApiClient
from fornace.cli.client.session import Sessions

FILE_HELP = "a JSON or YAML (.yaml, .yml) file: a service, a list of them, or an " \
            "environment model with 'services'"


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    actions = add_group(
        subparsers, "service", "add, list or remove the services of an environment",
        "Change the services of an environment. Changes are kept in a configuration "
        "session and take effect with 'fornace deploy ENV'.",
        ["fornace service add demo --file data/examples/linux-web.json",
         "fornace service add demo --type linuxWebServer --name site --units 2 "
         "--set port=8080",
         "fornace service list demo",
         "fornace service remove demo site"])
    add = add_command(
        actions, "add", "add services from files or options",
        "Add services to the environment's configuration session (opened if needed). "
        "From --file: " + FILE_HELP + ". From options: --type and --name make one "
        "service of --units units; --set sets any other field (VALUE is JSON when it "
        "parses as JSON: 8080, true, {\"name\": \"local\"}; else text; FIELD may be "
        "dotted: osImage.name=local). Nothing runs until 'fornace deploy ENV'.",
        ["fornace service add demo --file data/examples/linux-web.json",
         "fornace service add demo --file web.yaml --file db.json",
         "fornace service add demo --type linuxWebServer --name site --units 2 "
         "--set port=8080 --set osImage.name=local"])
    add.add_argument("environment", metavar="ENV", help="environment id or name")
    add.add_argument("--file", action="append", default=[], metavar="FILE", help=FILE_HELP)
    add.add_argument("--type", dest="service_type", metavar="TYPE",
                     help="service type (linuxWebServer, linuxApp, webServer...)")
    add.add_argument("--name", dest="service_name", metavar="NAME", help="service name")
    add.add_argument("--units", type=int, default=1, metavar="N",
                     help="number of units (default 1)")
    add.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="another field of the service; repeatable")

    listing = add_command(
        actions, "list", "list the services (with pending changes)",
        "List the services of the environment: those of its configuration session when "
        "changes are pending (not deployed yet), else the deployed ones with their units' "
        "hostnames and addresses.",
        ["fornace service list demo", "fornace service list demo --deployed --json"])
    listing.add_argument("environment", metavar="ENV", help="environment id or name")
    listing.add_argument("--deployed", action="store_true",
                         help="the deployed services even when changes are pending")

    remove = add_command(
        actions, "remove", "remove services",
        "Remove services (by name or id) in the environment's configuration session; "
        "'fornace deploy ENV' then tears their units down.",
        ["fornace service remove demo site", "fornace service remove demo 4f1c09e2..."])
    remove.add_argument("environment", metavar="ENV", help="environment id or name")
    remove.add_argument("services", nargs="+", metavar="SERVICE", help="service name or id")


def run(conf: Any) -> int:
    return dispatch(conf.command, {"service": _run})


def _run(command: Any, client: ApiClient) -> int:
    return {"add": add, "list": list_services, "remove": remove}[command.service_action](
        command, client)


# -- reading services ----------------------------------------------------------------------

def load_services(path: str) -> list[dict[str, Any]]:
    """The services of a file (see the module's docstring for the shapes taken)."""
    data = _parse(path)
    if isinstance(data, dict) and "type" not in data and isinstance(data.get("services"),
                                                                    list):
        data = data["services"]
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(item, dict) for item in items):
        raise FornaceError(f"{path}: expected a service object, a list of them or an "
                           f"environment model with 'services'")
    return items


MAX_FILE_JSON = 16 * 1024 * 1024   # what a service file may amount to as JSON


def _parse(path: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise FornaceError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise FornaceError(f"{path}: not a UTF-8 text file") from None
    if path.endswith((".yaml", ".yml")):
        import yaml     # a dependency of oslo.config

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise FornaceError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None
        except RecursionError:
            raise FornaceError(f"{path}: YAML nested too deeply") from None
        try:   # aliases share values: a few lines can stand for gigabytes of JSON
            jsonlimits.measure(data, max_bytes=MAX_FILE_JSON,
                               max_depth=jsonlimits.DEFAULT_MAX_DEPTH)
        except jsonlimits.JsonLimitError as exc:
            raise FornaceError(f"{path}: {exc.message} once its YAML aliases are expanded") \
                from None
        return data
    try:
        return jsonlimits.loads(text, source=path)
    except json.JSONDecodeError as exc:
        raise FornaceError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") \
            from None
    except jsonlimits.JsonLimitError as exc:
        raise FornaceError(str(exc)) from None


def service_from_options(command: Any) -> dict[str, Any]:
    """The one service ``--type``/``--name``/``--units``/``--set`` describe."""
    if command.units < 1:
        raise FornaceError(f"--units must be at least 1, got {command.units}")
    service: dict[str, Any] = {"type": command.service_type, "units": [
        {} for _ in range(command.units)]}
    if command.service_name:
        service["name"] = command.service_name
    for field, value in key_values(command.set, "--set").items():
        _set_path(service, field.split("."), value)
    return service


def _set_path(target: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[keys[-1]] = value


def requested_services(command: Any) -> list[dict[str, Any]]:
    """Every service ``add`` was asked for, read and checked before any API call."""
    if command.set and not command.service_type:
        raise FornaceError("--set describes a service given with --type and --name")
    if not command.file and not command.service_type:
        raise FornaceError("say which services to add: --file FILE, or --type TYPE "
                           "--name NAME")
    services = [service for path in command.file for service in load_services(path)]
    if command.service_type:
        services.append(service_from_options(command))
    return services


# -- the actions ------------------------------------------------------------------------------

def add(command: Any, client: ApiClient) -> int:
    services = requested_services(command)
    env = find_environment(client, command.environment)
    session, _ = Sessions(client).open(env["id"])
    added = [client.post(f"/environments/{env['id']}/services", service, session=session)
             for service in services]
    if command.json:
        print_json(added)
        return OK
    for service in added:
        print(f"added service {service.get('name')} ({service.get('type')}, "
              f"{len(service.get('units') or [])} unit(s), id {service.get('id')})")
    print(f"not deployed yet: run 'fornace deploy {command.environment}' "
          f"(session {session})")
    return OK


def list_services(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    session = None if command.deployed else Sessions(client).current(env["id"])
    services = client.get(f"/environments/{env['id']}/services", session=session)
    if command.json:
        print_json(services)
        return OK
    if session:
        print(f"pending changes (session {session}, deploy them with 'fornace deploy "
              f"{command.environment}'):")
    print_table(("NAME", "TYPE", "UNIT", "HOSTNAME", "ADDRESS", "ID"), service_rows(services),
                empty="(no services)")
    return OK


def service_rows(services: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A row per unit (a service without units: one row)."""
    rows = []
    for service in services:
        units = service.get("units") or [{}]
        for unit in units:
            state = unit.get("state") if isinstance(unit.get("state"), dict) else {}
            rows.append((service.get("name"), service.get("type"), unit.get("name"),
                         state.get("hostname"), state.get("address"), service.get("id")))
    return rows


def remove(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    session, _ = Sessions(client).open(env["id"])
    services = client.get(f"/environments/{env['id']}/services", session=session)
    chosen = [find_service(services, wanted) for wanted in command.services]
    for service in chosen:
        client.delete(f"/environments/{env['id']}/services/{service['id']}", session=session)
    if command.json:
        print_json(chosen)
        return OK
    for service in chosen:
        print(f"removed service {service.get('name')} (id {service.get('id')})")
    print(f"not deployed yet: run 'fornace deploy {command.environment}' (session {session})")
    return OK
