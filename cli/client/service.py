"""``fornace service add|update|list|remove``: the services of an environment.

Services are changed in a configuration session (see :mod:`fornace.cli.client.session`)
and take effect with ``fornace deploy``.  A service comes from a file -- one
service object, a list of them, or an environment model whose ``services``
are taken, such as ``data/examples/linux-web.json`` -- in JSON, or in YAML
when the file name ends in ``.yaml``/``.yml`` (PyYAML comes with
oslo.config); or from options (``--type``, ``--name``, ``--units``,
``--set FIELD=VALUE``).  Every field is checked before anything changes, against
the service's type as the API serves it (``GET /types/{name}``, see
:mod:`fornace.cli.client.type`), and the API checks it again.  ``update`` changes
fields of a service in the same session: ``--set`` (dotted fields set inside
objects) or ``--file`` (fields merged in as a JSON merge patch), and prints
each field that changed.
"""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

from fornace.common import jsonlimits
from fornace.common.errors import FornaceError

from fornace.cli.client.common import (BUSY_STATES, OK, add_command, add_group, dispatch,
                                       find_environment, find_service, first_deployment,
                                       key_values, note)
from fornace.cli.client.confirm import DECLINED, add_yes_option, confirmed, plural
from fornace.cli.client.formats import (add_format_option, cell, emit, format_of,
                                        print_json, print_table)
from fornace.cli.client.http import ApiClient
from fornace.cli.client.session import Sessions
from fornace.cli.client.type import ServerTypes, check_changed, check_new

FILE_HELP = "a JSON or YAML (.yaml, .yml) file: a service, a list of them, or an " \
            "environment model with 'services'"


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    actions = add_group(
        subparsers, "service", "add, update, list or remove the services of an environment",
        "Change the services of an environment. Changes are kept in a configuration "
        "session and take effect with 'fornace deploy ENV'.",
        ["fornace service add demo --file data/examples/linux-web.json",
         "fornace service add demo --type linuxWebServer --name site --units 2 "
         "--set port=8080",
         "fornace service update demo site --set port=8081",
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

    update = add_command(
        actions, "update", "change fields of a service",
        "Change fields of a service in the environment's configuration session (opened "
        "if needed): --set FIELD=VALUE (VALUE is JSON when it parses as JSON, else text; "
        "a dotted FIELD sets inside an object: osImage.name=debian-12) and/or --file "
        "FILE (a JSON or YAML object merged into the service as a JSON merge patch: "
        "objects merge, null removes a field; --set applies after it). Prints each "
        "field that changed. Nothing runs until 'fornace deploy ENV'.",
        ["fornace service update demo site --set port=8081",
         "fornace service update demo site --set osImage.name=debian-12",
         "fornace service update demo site --file changes.yaml"])
    update.add_argument("environment", metavar="ENV", help="environment id or name")
    update.add_argument("service", metavar="SERVICE", help="service name or id")
    update.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a field to set (dotted: inside an object); repeatable")
    update.add_argument("--file", metavar="FILE",
                        help="a JSON or YAML (.yaml, .yml) object of fields to merge in")

    listing = add_command(
        actions, "list", "list the services (with pending changes)",
        "List the services of the environment: those of its configuration session when "
        "changes are pending (not deployed yet), else the deployed ones with their units' "
        "hostnames and addresses.",
        ["fornace service list demo", "fornace service list demo --deployed --json",
         "fornace service list demo --deployed -f value | cut -f4"])
    listing.add_argument("environment", metavar="ENV", help="environment id or name")
    listing.add_argument("--deployed", action="store_true",
                         help="the deployed services even when changes are pending")
    add_format_option(listing)

    remove = add_command(
        actions, "remove", "remove services",
        "Remove services (by name or id) in the environment's configuration session; "
        "'fornace deploy ENV' then tears their units down. Asks first on a terminal; "
        "--yes does not ask (and is needed when standard input is not a terminal).",
        ["fornace service remove demo site", "fornace service remove demo 4f1c09e2... --yes"])
    remove.add_argument("environment", metavar="ENV", help="environment id or name")
    remove.add_argument("services", nargs="+", metavar="SERVICE", help="service name or id")
    add_yes_option(remove)


def run(conf: Any) -> int:
    return dispatch(conf.command, {"service": _run})


def _run(command: Any, client: ApiClient) -> int:
    return {"add": add, "update": update, "list": list_services, "remove": remove}[
        command.service_action](command, client)


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
    return [service for service, _ in _requested(command)]


def _requested(command: Any) -> list[tuple[dict[str, Any], str]]:
    """(service, where it comes from) for every service ``add`` was asked for."""
    if command.set and not command.service_type:
        raise FornaceError("--set describes a service given with --type and --name")
    if not command.file and not command.service_type:
        raise FornaceError("say which services to add: --file FILE, or --type TYPE "
                           "--name NAME")
    services = [(service, path) for path in command.file for service in load_services(path)]
    if command.service_type:
        services.append((service_from_options(command), "--type/--name/--set"))
    return services


# -- the actions ------------------------------------------------------------------------------

def add(command: Any, client: ApiClient) -> int:
    requested = _requested(command)
    services = [service for service, _ in requested]
    env = find_environment(client, command.environment)
    # checked against the environment's types before any change (no session opened)
    check_new(services, [origin for _, origin in requested], ServerTypes(client, env["id"]))
    session, _ = Sessions(client).open(env["id"])
    # a list goes in one request: all of it is added, or nothing (the error names the entry)
    answer = client.post(f"/environments/{env['id']}/services",
                         services if len(services) > 1 else services[0], session=session)
    added = answer if isinstance(answer, list) else [answer]
    if command.json:
        print_json(added)
        return OK
    for service in added:
        print(f"added service {service.get('name')} ({service.get('type')}, "
              f"{len(service.get('units') or [])} unit(s), id {service.get('id')})")
    print(f"not deployed yet: run 'fornace deploy {command.environment}' "
          f"(session {session})")
    return OK


def update(command: Any, client: ApiClient) -> int:
    """Change fields of one service in the session; print each field that changed."""
    if not command.set and not command.file:
        raise FornaceError("say what to change: --set FIELD=VALUE (repeatable) or --file "
                           "FILE")
    patch = _patch_file(command.file) if command.file else {}
    settings = key_values(command.set, "--set")
    touched = set(settings) | set(_leaves(patch))
    env = find_environment(client, command.environment)
    sessions = Sessions(client)
    session = sessions.current(env["id"])
    if session is None and env.get("status") in BUSY_STATES:
        sessions.open(env["id"])   # refused (409: busy, naming the job) before any check
    base = f"/environments/{env['id']}/services"
    # read (the session's services, else the environment's) and checked before any change
    before = find_service(client.get(base, session=session), command.service)
    wanted = changed_service(before, patch, settings)
    types = ServerTypes(client, env["id"])
    try:
        check_changed(wanted, touched, types)
    except FornaceError as exc:
        raise FornaceError(f"service {before.get('name')}: {exc}") from None
    if session is None:
        session, _ = sessions.open(env["id"])
    after = client.request("PUT", f"{base}/{before['id']}", wanted,
                           {"X-Configuration-Session": session})
    if command.json:
        print_json(after)
        return OK
    label = f"{after.get('name')} ({after.get('type')}, id {after.get('id')})"
    changes = field_changes(before, after, touched=set(settings) | set(_leaves(patch)))
    if not changes:
        print(f"service {label}: nothing changed (it has these values already)")
    else:
        print(f"updated service {label}:")
        for path, old, new in changes:
            print(f"  {path}: {old} -> {new}")
    for field in unknown_fields(after, touched, types):
        note(f"{field!r} is not a field of {after.get('type')} services: the API keeps it "
             f"without checking it (a misspelt name?)")
    print(f"not deployed yet: run 'fornace deploy {command.environment}' (session {session})")
    return OK


def _patch_file(path: str) -> dict[str, Any]:
    data = _parse(path)
    if not isinstance(data, dict):
        raise FornaceError(f"{path}: expected an object of the fields to change, not "
                           f"{type(data).__name__}")
    return data


def changed_service(service: dict[str, Any], patch: dict[str, Any],
                    settings: dict[str, Any]) -> dict[str, Any]:
    """``service`` with ``patch`` merged in (JSON merge patch, RFC 7386) and then each
    ``settings`` field (dotted: inside objects) set; ``id`` cannot change."""
    changed = _merge_patch(copy.deepcopy(service), patch)
    for field, value in settings.items():
        _set_path(changed, field.split("."), value)
    if changed.get("id") != service.get("id"):
        raise FornaceError(f"the id of service {service.get('name')} cannot change "
                           f"({service.get('id')})")
    return changed


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge_patch(merged.get(key), value)
    return merged


def _leaves(patch: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted fields a merge patch sets or removes."""
    found = []
    for key, value in patch.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            found.extend(_leaves(value, f"{path}."))
        else:
            found.append(path)
    return found


_MISSING = object()


def unknown_fields(service: dict[str, Any], fields: set[str],
                   types: ServerTypes | None = None) -> list[str]:
    """The top-level names of ``fields`` (dotted) that the service's type does not
    declare: the API accepts them in an update without a check.  The types are
    the API's (``types``), or without it this installation's built-in ones
    (:mod:`fornace.api.specs`, loaded only here); a type not known is not judged."""
    from fornace.api import specs

    kind = service.get("type")
    if types is not None:
        spec = types.spec(kind)
    else:
        spec = specs.SERVICE_TYPES.get(kind) if isinstance(kind, str) else None
    if spec is None:
        return []
    known = set(spec.service_fields()) | set(specs.MANAGED_KEYS) | {"units", "?"}
    return sorted({field.split(".")[0] for field in fields} - known)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted field -> value (objects flattened, lists kept whole)."""
    if isinstance(value, dict) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: value}


def field_changes(before: dict[str, Any], after: dict[str, Any],
                  touched: set[str] = frozenset()) -> list[tuple[str, str, str]]:
    """(dotted field, old, new) for each field that differs (``updated`` left out),
    values as JSON (``-`` for a field that is not there).  A secret field is
    ``***`` on both sides: one that was ``touched`` shows as changed."""
    old, new = _flat(before), _flat(after)
    old.pop("updated", None)
    new.pop("updated", None)
    changes = []
    for path in sorted(set(old) | set(new)):
        was, now = old.get(path, _MISSING), new.get(path, _MISSING)
        if was != now:
            changes.append((path, _shown(was), _shown(now)))
        elif path in touched and now == "***":     # the API never shows a secret
            changes.append((path, _shown(was), f"{_shown(now)} (changed)"))
    return changes


def _shown(value: Any) -> str:
    return "-" if value is _MISSING else cell(json.dumps(value, ensure_ascii=False))


def list_services(command: Any, client: ApiClient) -> int:
    format_of(command)
    env = find_environment(client, command.environment)
    session = None if command.deployed else Sessions(client).current(env["id"])
    services = client.get(f"/environments/{env['id']}/services", session=session)
    rows = service_rows(services)

    def show() -> None:
        if session:
            print(f"pending changes (session {session}, deploy them with 'fornace deploy "
                  f"{command.environment}'):")
        elif first_deployment(env):
            print(f"being deployed (the environment's first deployment; 'fornace status "
                  f"{command.environment}' follows it):")
        print_table(("NAME", "TYPE", "UNIT", "HOSTNAME", "ADDRESS", "ID"), rows,
                    empty="(no services)")
    emit(command, services, rows, show)
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
    sessions = Sessions(client)
    session = sessions.current(env["id"])
    if session is None and env.get("status") in BUSY_STATES:
        sessions.open(env["id"])   # refused (409: busy, naming the job) before asking
    # the services as the session (or, without one yet, the environment) has them:
    # no session is opened for a removal that is not confirmed
    services = client.get(f"/environments/{env['id']}/services", session=session)
    chosen = list({id(s): s for s in (find_service(services, wanted)
                                      for wanted in command.services)}.values())
    names = " and ".join(f"{s.get('name')} ({plural(len(s.get('units') or []), 'unit')})"
                         for s in chosen)
    question = (f"Remove service{'s' if len(chosen) > 1 else ''} {names} from environment "
                f"{env['name']}?")
    if not confirmed(command, question, f"nothing removed from environment {env['name']}"):
        return DECLINED
    if session is None:
        session, _ = sessions.open(env["id"])
    for service in chosen:
        client.delete(f"/environments/{env['id']}/services/{service['id']}", session=session)
    if command.json:
        print_json(chosen)
        return OK
    for service in chosen:
        print(f"removed service {service.get('name')} (id {service.get('id')})")
    print(f"not deployed yet: run 'fornace deploy {command.environment}' (session {session})")
    return OK
