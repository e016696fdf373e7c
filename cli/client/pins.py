"""``fornace package use|pins|unpin``: the package versions of an environment.

An environment runs every job with the package versions it is pinned to.
``use`` pins it to a version (default: the newest its project can use) or
moves it to another one, first showing the plan of that move -- the files
and service types that change, with the diffs -- and asking on a terminal;
``--plan`` shows the plan only.  ``pins`` lists an environment's versions
and whether a newer one is there; ``unpin`` removes one.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fornace.cli.client.common import OK, add_command, find_environment
from fornace.cli.client.confirm import DECLINED, add_yes_option, confirmed
from fornace.cli.client.http import ApiClient
from fornace.cli.client.formats import (add_format_option, emit, format_of, local_time,
                                        print_json, print_table)


def add_parsers(actions: Any) -> None:
    """The three commands, under ``fornace package``."""
    use = add_command(
        actions, "use", "pin an environment to a package version, or move it",
        "Pin environment ENV to NAME@VERSION (NAME alone: the newest version the "
        "project can use), or move it from the version it has. The plan of the move "
        "is shown first (files added, removed and changed with their diffs, service "
        "types added, removed and changed) and asked about on a terminal; the next "
        "deployment or action of ENV runs with that version. --plan shows the plan and "
        "changes nothing.",
        ["fornace package use web hello", "fornace package use web hello@1.0.1 --plan",
         "fornace package use web hello@1.0.1 --yes"])
    use.add_argument("environment", metavar="ENV", help="environment name or id")
    use.add_argument("package", metavar="NAME[@VERSION]", help="the package and version")
    use.add_argument("--plan", action="store_true", help="show the plan only")
    add_yes_option(use)
    pins = add_command(actions, "pins", "list an environment's package versions",
                       "List the package versions environment ENV runs with, and the "
                       "newest version of each its project can use.",
                       ["fornace package pins web"])
    pins.add_argument("environment", metavar="ENV", help="environment name or id")
    add_format_option(pins)
    unpin = add_command(actions, "unpin", "stop using a package in an environment",
                        "Unpin package NAME from environment ENV: its next jobs run "
                        "without it.", ["fornace package unpin web hello --yes"])
    unpin.add_argument("environment", metavar="ENV", help="environment name or id")
    unpin.add_argument("package", metavar="NAME", help="the package's name")
    add_yes_option(unpin)


def _path(env: dict[str, Any], name: str) -> str:
    return f"/environments/{env['id']}/packages/{quote(name, safe='')}"


def use(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    name, _, version = command.package.partition("@")
    query = f"?version={quote(version, safe='')}" if version else ""
    plan = client.get(_path(env, name) + "/plan" + query)
    unchanged = plan["from"] is not None and plan["from"]["package_id"] == plan["to"]["package_id"]
    if command.json and (command.plan or unchanged):
        print_json({**plan, "moved": False})
        return OK
    if not command.json:
        print("\n".join(plan_lines(plan)))
    if command.plan or unchanged:
        return OK
    if not confirmed(command, f"Move environment {env['name']} to {name} "
                              f"{plan['to']['version']}?",
                     f"environment {env['name']} not moved"):
        return DECLINED
    moved = client.request("PUT", _path(env, name), {"version": plan["to"]["version"]})
    if command.json:
        print_json(moved)
    else:
        print(f"environment {env['name']} now uses {name} {plan['to']['version']}: its next "
              f"deployment or action runs with it")
        if plan["from"] is not None and plan["files"]["changed"]:
            print(f"its units configured by a changed file are configured again by the next "
                  f"deployment: fornace plan {env['name']} lists them")
    return OK


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """A move's plan as the terminal shows it."""
    env, name, to = plan["environment"]["name"], plan["name"], plan["to"]["version"]
    before = plan["from"]
    if before is not None and before["package_id"] == plan["to"]["package_id"]:
        return [f"environment {env} uses {name} {to} already: nothing to change"]
    head = (f"environment {env}: {name} {before['version']} -> {to}" if before
            else f"environment {env}: start using {name} {to}")
    lines = [head]
    files, types = plan["files"], plan["types"]
    lines += [f"  + {f}" for f in files["added"]] + [f"  - {f}" for f in files["removed"]]
    for change in files["changed"]:
        lines.append(f"  ~ {change['file']}")
        lines += [f"      {line}" for line in change["diff"]]
    for word, sign in (("added", "+"), ("removed", "-"), ("changed", "~")):
        lines += [f"  {sign} service type {t}" for t in types[word]]
    counts = (f"{len(files['added'])} added, {len(files['removed'])} removed, "
              f"{len(files['changed'])} changed, {files['unchanged']} unchanged")
    lines.append(f"files: {counts}")
    return lines


def list_pins(command: Any, client: ApiClient) -> int:
    format_of(command)
    env = find_environment(client, command.environment)
    data = client.get(f"/environments/{env['id']}/packages")
    headers = ("NAME", "VERSION", "NEWEST", "PINNED", "BY")
    rows = [(p["name"], p["version"],
             p["newest"] if p["newest"] != p["version"] else "(this one)",
             local_time(p["updated"]), p["pinned_by"]) for p in data["packages"]]
    emit(command, data, rows, lambda: print_table(
        headers, rows, empty=f"(environment {env['name']} uses no package)"))
    return OK


def unpin(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    label = f"package {command.package} from environment {env['name']}"
    if not confirmed(command, f"Unpin {label}?", f"{label} not unpinned"):
        return DECLINED
    client.delete(_path(env, command.package))
    if command.json:
        print_json({"unpinned": command.package, "environment": env["id"]})
    else:
        print(f"unpinned {label}: its next jobs run without it")
    return OK


HANDLERS = {"use": use, "pins": list_pins, "unpin": unpin}
