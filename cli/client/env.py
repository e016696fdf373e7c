"""``fornace env list|create|show|delete``: environments, by id or by name."""
from __future__ import annotations

import argparse
from typing import Any

from fornace.cli.client.common import (OK, add_command, add_group, dispatch, find_environment,
                                       first_deployment)
from fornace.cli.client.confirm import DECLINED, add_yes_option, confirmed, extent
from fornace.cli.client.formats import (add_format_option, emit, format_of, local_time,
                                        print_json, print_table)
from fornace.cli.client.http import ApiClient, ClientError

# show and delete import what they use when they run (following a job, the
# service rows, the sessions file): 'env list' starts without them


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    actions = add_group(
        subparsers, "env", "list, create, show or delete environments, or abandon their job",
        "Environments hold services; commands name them by id or by name (when only "
        "one environment has that name).",
        ["fornace env create demo", "fornace env list", "fornace env show demo",
         "fornace env delete demo"])
    listing = add_command(
        actions, "list", "list the environments",
        "List the environments of your tenant: id, name, status (ready, pending: "
        "changes not deployed, deploying, deploy failure, deleting...), version "
        "(deployments that changed it), when it last changed (local time) and its "
        "region (- for none: the conductor's default).",
        ["fornace env list", "fornace env list --json", "fornace env list -f value"])
    add_format_option(listing)
    create = add_command(actions, "create", "create an empty environment",
                         "Create an environment without services; add some with "
                         "'fornace service add' and deploy them with 'fornace deploy'. "
                         "--region names the OpenStack region its stack (every unit of "
                         "it) is deployed to; without it, the conductor's [heat] "
                         "region_name. It cannot be changed later.",
                         ["fornace env create demo", "fornace env create demo --region RegionTwo"])
    create.add_argument("env_name", metavar="NAME", help="its name")
    create.add_argument("--region", metavar="REGION",
                        help="the OpenStack region of its stack (a region of the Keystone "
                             "catalog)")
    show = add_command(actions, "show", "show an environment and its units",
                       "Show an environment: status, version, and each service's units "
                       "with their hostnames and addresses once deployed. -f value prints "
                       "the environment's own fields on one line: id, name, status, "
                       "version, created, updated, region (empty for none).",
                       ["fornace env show demo", "fornace env show demo --json",
                        "fornace env show demo -f value | cut -f3"])
    show.add_argument("environment", metavar="ENV", help="environment id or name")
    add_format_option(show)
    delete = add_command(
        actions, "delete", "delete an environment and its instances",
        "Delete an environment. A deployed one is torn down first (its instances are "
        "removed): the deletion job is followed until the environment is gone, unless "
        "--no-follow. --abandon forgets it at once, leaving its instances as they are. "
        "Asks first on a terminal; --yes does not ask (and is needed when standard input "
        "is not a terminal).",
        ["fornace env delete demo", "fornace env delete demo --yes --no-follow",
         "fornace env delete stuck-env --abandon"])
    add_yes_option(delete)
    delete.add_argument("environment", metavar="ENV", help="environment id or name")
    delete.add_argument("--abandon", action="store_true",
                        help="forget the environment without tearing it down")
    delete.add_argument("--no-follow", action="store_true",
                        help="start the deletion and return")


    abandon = add_command(
        actions, "abandon", "give up the running job of an environment",
        "Give up the job running on an environment (a deployment or action that hangs): "
        "it ends 'abandoned' at once, its conductor stops it, and the environment stays "
        "(a deployment that was abandoned is a failed one: deploy again to finish it). "
        "Asks first on a terminal; --yes does not ask.",
        ["fornace env abandon demo", "fornace env abandon demo --yes"])
    add_yes_option(abandon)
    abandon.add_argument("environment", metavar="ENV", help="environment id or name")


def run(conf: Any) -> int:
    return dispatch(conf.command, {"env": _run})


def _run(command: Any, client: ApiClient) -> int:
    actions = {"list": list_environments, "create": create, "show": show, "delete": delete,
               "abandon": abandon}
    return actions[command.env_action](command, client)


def list_environments(command: Any, client: ApiClient) -> int:
    format_of(command)
    data = client.get("/environments")
    headers = ("ID", "NAME", "STATUS", "VERSION", "UPDATED", "REGION")
    rows = [(e["id"], e["name"], e["status"], e["version"], local_time(e["updated"]),
             e.get("region")) for e in data["environments"]]
    shown = [row[:-1] + (row[-1] or "-",) for row in rows]
    emit(command, data, rows, lambda: print_table(headers, shown, empty="(no environments)"))
    return OK


def create(command: Any, client: ApiClient) -> int:
    body = {"name": command.env_name}
    if command.region is not None:
        body["region"] = command.region
    env = client.post("/environments", body)
    if command.json:
        print_json(env)
    else:
        region = f" in region {env['region']}" if env.get("region") else ""
        print(f"created environment {env['name']} (id {env['id']}){region}")
    return OK


def show(command: Any, client: ApiClient) -> int:
    from fornace.cli.client.service import service_rows
    from fornace.cli.client.session import Sessions

    format_of(command)
    env = client.get(f"/environments/{find_environment(client, command.environment)['id']}")
    # -f value: the environment's own fields (its units: 'service list --deployed')
    fields = (env["id"], env["name"], env["status"], env["version"],
              local_time(env["created"]), local_time(env["updated"]), env.get("region"))

    def table() -> None:
        print(f"environment {env['name']} (id {env['id']})\n"
              f"  status   {env['status']}\n  version  {env['version']}\n"
              f"  created  {fields[4]}\n  updated  {fields[5]}\n"
              f"  region   {fields[6] or '-'}")
        session = Sessions(client).current(env["id"])
        if session:
            print(f"  pending changes in session {session}: 'fornace service list "
                  f"{command.environment}' shows them, 'fornace deploy "
                  f"{command.environment}' deploys them")
        if first_deployment(env):
            print(f"  its first deployment runs: the services below are being deployed "
                  f"('fornace status {command.environment}' follows their units)")
        print()
        print_table(("SERVICE", "TYPE", "UNIT", "HOSTNAME", "ADDRESS", "SERVICE ID"),
                    service_rows(env.get("services") or []), empty="(no services deployed)")
    emit(command, env, [fields], table)
    return OK


def delete(command: Any, client: ApiClient) -> int:
    from fornace.cli.client.follow import follow_or_return, newest_job
    from fornace.cli.client.session import Sessions

    env = find_environment(client, command.environment)
    services = client.get(f"/environments/{env['id']}").get("services") or []
    question = (f"Forget environment {env['name']} ({extent(services)}), leaving its "
                f"instances as they are?" if command.abandon else
                f"Delete environment {env['name']} ({extent(services)})?")
    if not confirmed(command, question, f"environment {env['name']} not deleted"):
        return DECLINED
    suffix = "?abandon=true" if command.abandon else ""
    client.delete(f"/environments/{env['id']}{suffix}")
    Sessions(client).forget(env["id"])
    try:
        job = newest_job(client, env["id"], "delete")
    except ClientError as exc:
        if exc.status != 404:
            raise
        return _deleted(command, env)
    return follow_or_return(command, client, env, job)


def abandon(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    if not confirmed(command, f"Abandon the running job of environment {env['name']}?",
                     f"the job of environment {env['name']} not abandoned"):
        return DECLINED
    job = client.post(f"/environments/{env['id']}/abandon")
    if command.json:
        print_json(job)
    else:
        status = client.get(f"/environments/{env['id']}")["status"]
        print(f"job {job['id']} ({job.get('action') or job.get('kind')}) of environment "
              f"{env['name']} abandoned; the environment is {status}")
    return OK


def _deleted(command: Any, env: dict[str, Any]) -> int:
    """The environment is gone already: never deployed, abandoned, or torn down fast."""
    if command.json:
        print_json({"job": None, "reports": [], "environment_deleted": True})
    else:
        print(f"environment {env['name']} deleted (id {env['id']})")
    return OK
