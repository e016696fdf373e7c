"""``fornace outputs ENV``: where the services and units of a deployed
environment are reached (URLs, addresses, hostnames)."""
from __future__ import annotations

import argparse
from typing import Any

from fornace.cli.client.common import OK, add_environment_view, dispatch, environment_view
from fornace.cli.client.formats import emit, print_table
from fornace.cli.client.http import ApiClient


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_environment_view(
        subparsers, "outputs", "show where the services and units are reached",
        "The endpoints of the deployed environment: per service the URL and address of "
        "what stands in front of its units (a farm's load balancer), per unit its "
        "hostname, address and URL. A service type whose workflows set no URL shows "
        "addresses only. While a job runs: what it has set up so far (an instance's "
        "address as soon as it exists).",
        ["fornace outputs demo", "fornace outputs demo -f value | cut -f5 | grep .",
         "fornace outputs demo --json"])


def run(conf: Any) -> int:
    return dispatch(conf.command, {"outputs": outputs})


def outputs(command: Any, client: ApiClient) -> int:
    _, data = environment_view(command, client, "outputs")
    rows = output_rows(data)
    emit(command, data, rows, lambda: show_outputs(data, rows))
    return OK


def show_outputs(data: dict[str, Any], rows: list[tuple[Any, ...]]) -> None:
    """The table; without a URL anywhere once no job runs (types whose workflows
    set none) no URL column of dashes, but a line saying the units are reached at
    their addresses."""
    if data.get("job"):
        print(f"job {data['job']} running: the endpoints it has set up so far")
    if not rows or data.get("job") or any(row[4] for row in rows):
        print_table(("SERVICE", "UNIT", "HOSTNAME", "ADDRESS", "URL"), rows,
                    empty="(no services)")
        return
    print_table(("SERVICE", "UNIT", "HOSTNAME", "ADDRESS"), [row[:4] for row in rows])
    print("(no URLs: the workflows of these services' types set none; the units are "
          "reached at their addresses)")


def output_rows(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A row per service (its own address and URL, a farm's load balancer) followed
    by a row per unit (hostname, address, URL)."""
    rows: list[tuple[Any, ...]] = []
    for service in data.get("services") or []:
        rows.append((service.get("name"), None, None, service.get("address"),
                     service.get("url")))
        rows.extend((service.get("name"), unit.get("name"), unit.get("hostname"),
                     unit.get("address"), unit.get("url"))
                    for unit in service.get("units") or [])
    return rows
