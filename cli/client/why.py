"""``fornace why ENV RULE [UNIT]``: does a workflow rule match a unit, and if not, why not.

The API evaluates the rule (named by its desc, its id or its file:line, as
``fornace trace`` shows rules) on the environment's model as its next
deployment would start from it, with the workflow files in effect for it
(``GET /environments/{id}/why``), and says per object the rule's match
reaches (a unit, a service) whether it matches: if not, the step of the
match that refused it and the clauses of that filter that were false, with
the values they read; if so, what made it match and what the rule does.
"""
from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from fornace.cli.client.common import OK, add_command, dispatch, find_environment
from fornace.cli.client.formats import print_json
from fornace.cli.client.http import ApiClient
from fornace.common.tracetext import matched_text


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    why = add_command(
        subparsers, "why", "say why a workflow rule matches a unit, or which clause does not",
        "Evaluate RULE (its desc, its id or its file:line, as 'fornace trace' names "
        "rules) of the workflow files in effect for ENV (the data folder's and its pinned"
        " packages') on ENV's model as its next deployment would start from it (no temp "
        "values but its types' views, temp.instance; change detection has undone the "
        "marks of changed units), before any rule has run. For each object the rule's "
        "match reaches (or those of UNIT: a unit's id, hostname or name, and the service "
        "above it), it says whether the rule matches; if not, the step of the match that "
        "refused it (a filter such as the type test) and the clauses of that filter that "
        "were false, with the values they read; if it does, the clauses that held and "
        "what the rule does. Values named like secrets are masked. An unknown rule or "
        "unit is an error naming close names (exit status 2).",
        ["fornace why demo Common.xml:37",
         "fornace why demo 'Units that have no hostname yet' web1",
         "fornace why demo line37 --json"])
    why.add_argument("environment", metavar="ENV", help="environment id or name")
    why.add_argument("rule", metavar="RULE", help="a rule's desc, id or file:line")
    why.add_argument("unit", nargs="?", metavar="UNIT",
                     help="a unit's id, hostname or name (default: every object)")


def run(conf: Any) -> int:
    return dispatch(conf.command, {"why": why})


def why(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    query = {"rule": command.rule}
    if command.unit:
        query["unit"] = command.unit
    answer = client.get(f"/environments/{env['id']}/why?{urllib.parse.urlencode(query)}")
    if command.json:
        print_json(answer)
    else:
        print("\n".join(why_lines(answer)))
    return OK


def why_lines(answer: dict[str, Any]) -> list[str]:
    """The answer for a reader: the rule, then each object and why."""
    rule = answer.get("rule") or {}
    desc = f"  -- {rule['desc']}" if rule.get("desc") else ""
    lines = [f"rule {rule.get('id')} at {rule.get('at')}{desc}"]
    if rule.get("match"):
        lines.append(f"  match: {rule['match']}")
    for at in rule.get("enclosing") or []:
        lines.append(f"  inside the rule at {at}")
    if answer.get("problem"):
        lines.append(f"  {answer['problem']}")
    objects = answer.get("objects") or []
    lines.append(f"on the model the next deployment starts from: matches "
                 f"{answer.get('matched', 0)} of {len(objects) + answer.get('more', 0)} "
                 f"object(s) its match reaches")
    for entry in objects:
        within = f" (in the match of {entry['within']})" if entry.get("within") else ""
        lines.append(f"  {matched_text(entry)}{within}: "
                     f"{'matches' if entry.get('matched') else 'does not match'}")
        refused = entry.get("refused")
        if refused:
            tested = "" if refused.get("object") == entry.get("object") else \
                f" (tested on {refused.get('object')})"
            lines.append(f"      failed: {refused.get('step')} of rule {refused.get('rule')}"
                         f"{tested}")
            lines.extend(f"        {line}" for line in refused.get("because") or [])
        else:
            lines.extend(f"      {line}" for line in entry.get("because") or [])
    if answer.get("more"):
        lines.append(f"  and {answer['more']} more object(s) (see --json)")
    if answer.get("matched") and answer.get("does"):
        lines.append("where it matches, the rule does: " + ", ".join(answer["does"]))
    if answer.get("skipped"):
        lines.append(f"not read (they do not compile): {', '.join(answer['skipped'])}")
    return lines
