"""``fornace dead-letters list``: the messages from the conductor that the
API could not store and set aside (reports, results, job events), newest
first -- for the cloud admin (policy rule ``dead_letter:list``)."""
from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import urlencode

from fornace.cli.client.common import OK, add_command, add_group, dispatch
from fornace.cli.client.formats import add_format_option, emit, format_of, local_time, print_table
from fornace.cli.client.http import ApiClient

REASON_SHOWN = 100   # characters of a reason in the table (-f value/json/yaml: whole)


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    actions = add_group(
        subparsers, "dead-letters", "list the messages the API set aside (cloud admin)",
        "Reports, results and job events from the conductor that the API could not "
        "store, even alone (a NUL PostgreSQL cannot hold, a body the contract refuses, "
        "one that failed too often), set aside so that they hold nothing back.",
        ["fornace dead-letters list", "fornace dead-letters list --project 3f2a9c0e",
         "fornace dead-letters list -f json"])
    listing = add_command(
        actions, "list", "list the dead letters, newest first",
        "List the dead letters, newest first: when, queue, kind, tenant, job, message "
        "id and why. -f json or yaml shows each one whole, with the masked copy of its "
        "body. Only the cloud admin may.",
        ["fornace dead-letters list", "fornace dead-letters list --limit 10",
         "fornace dead-letters list --project 3f2a9c0e -f yaml"])
    listing.add_argument("--project", metavar="ID",
                         help="only those of this project (tenant) id")
    listing.add_argument("--limit", type=int, default=100, metavar="N",
                         help="at most N (default 100, at most 1000)")
    add_format_option(listing)


def run(conf: Any) -> int:
    return dispatch(conf.command, {"dead-letters": list_dead_letters})


def list_dead_letters(command: Any, client: ApiClient) -> int:
    format_of(command)
    query = {"limit": command.limit, **({"tenant": command.project} if command.project else {})}
    data = client.get(f"/dead-letters?{urlencode(query)}")
    headers = ("CREATED", "QUEUE", "KIND", "TENANT", "JOB", "MESSAGE", "REASON")
    rows = [(local_time(d["created"]), d["queue"], d["kind"], d["tenant_id"], d["job_id"],
             d["message_id"], d["reason"]) for d in data["dead_letters"]]
    shown = [row[:-1] + (_short(row[-1]),) for row in rows]
    emit(command, data, rows, lambda: print_table(headers, shown, empty="(no dead letters)"))
    return OK


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_SHOWN else text[:REASON_SHOWN - 3] + "..."
