"""``fornace trace ENV [JOB]``: why a job did what it did, rule by rule.

The conductor keeps each job's trace (which rule fired on which object,
what it set, which actions it queued and how they ended, round by round and
pass by pass) and the API serves it at ``.../jobs/{job_id}/trace``; this
prints it as ``fornace workflow simulate`` prints a simulated run, or as
the API's JSON with ``--json``.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from fornace.cli.client.common import OK, add_command, dispatch, find_environment, find_job
from fornace.cli.client.http import ApiClient
from fornace.cli.client.formats import print_json
from fornace.common.tracetext import cause_text, matched_text, trace_events, unit_hosts


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    trace = add_command(
        subparsers, "trace", "show which workflow rule fired on which object during a job",
        "The trace of a job (the environment's newest unless JOB is given): round by "
        "round, each rule that matched an object (its id, workflow file:line and the "
        "object's path and id), what it set, the actions it queued, the task each "
        "became and how it ended, and the job's reports; first, the workflow package "
        "versions the job ran and the units change detection sent to be configured "
        "again, with why. Secrets are masked. Jobs run "
        "before Fornace kept traces have none.",
        ["fornace trace demo", "fornace trace demo 3f2a9c0e41d84b7f9a56e1c2d3b4a5f6",
         "fornace trace demo --json"])
    trace.add_argument("environment", metavar="ENV", help="environment id or name")
    trace.add_argument("job", nargs="?", metavar="JOB", help="a job id (default: the newest)")


def run(conf: Any) -> int:
    return dispatch(conf.command, {"trace": trace})


def trace(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    job = find_job(client, env["id"], command.job)
    document = client.get(f"/environments/{env['id']}/jobs/{job['id']}/trace")
    if command.json:
        print_json(document)
    else:
        print("\n".join(trace_lines(document)))
    return OK


def _value(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _unit(unit: Any, hosts: dict[str, str]) -> str:
    host = hosts.get(str(unit))
    return f"{unit} ({host})" if host else str(unit)


def event_line(event: dict[str, Any], hosts: dict[str, str] | None = None) -> str:
    """One event of a trace, for operators (an unknown kind is shown as JSON);
    ``hosts``: unit id -> host, naming the units actions ran on."""
    kind = event.get("e")
    hosts = hosts or {}
    if kind == "rule":
        return (f"  pass {event.get('pass')}: rule {event.get('rule') or '(top level)'} at "
                f"{event.get('at')} matched {matched_text(event)}")
    if kind == "set":
        return f"    set {event.get('path')} = {_value(event.get('value'))}"
    if kind == "queued" and event.get("kind") == "operation":
        return (f"  operation #{event.get('n')} {event.get('operation')} "
                f"({event.get('template')}) on unit {_unit(event.get('unit'), hosts)}, "
                f"{event.get('reason')}: run by the action, not by a workflow")
    if kind == "queued":
        unit = f" on unit {_unit(event['unit'], hosts)}" if event.get("unit") else ""
        return (f"    queued #{event.get('n')} {event.get('kind')} "
                f"{event.get('template') or ''}{unit}")
    if kind == "task":
        return f"    #{event.get('n')} became task {event.get('change')}"
    if kind == "ended":
        error = f": {event['error']}" if event.get("error") else ""
        return f"  action #{event.get('n')} {event.get('outcome')}{error}"
    if kind == "report":
        return f"  report [{event.get('level')}] {event.get('text')}"
    return f"  {json.dumps(event, ensure_ascii=False)}"


def trace_lines(document: dict[str, Any]) -> list[str]:
    """The whole trace: a heading, then each round's events."""
    size = document.get("size") or {}
    lines = [f"job {document.get('job_id')}: {document.get('action')} "
             f"{document.get('state') or ''}, {len(document.get('rounds') or [])} round(s)"
             + (f", trace of {size['json']} bytes ({size['compressed']} compressed)"
                if size.get("json") is not None else "")]
    if document.get("packages"):
        lines.append(f"packages: {', '.join(document['packages'])}")
    for entry in document.get("reconfigured") or []:
        name = f" ({entry['name']})" if entry.get("name") else ""
        lines.append(f"reconfigure {entry.get('id')}{name}: {entry.get('reason')}")
    hosts = unit_hosts(trace_events(document))
    for entry in document.get("rounds") or []:
        lines.append(f"== round {entry.get('round')}")
        for event in entry.get("events") or []:
            lines.append(event_line(event, hosts))
            cause = cause_text(event) if event.get("e") == "rule" else ""
            if cause:
                lines.append(f"      because {cause}")
    if document.get("truncated"):
        lines.append(document.get("note") or "trace truncated")
    return lines
