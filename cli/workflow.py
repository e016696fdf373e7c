"""``fornace workflow check|simulate``: the operator's tools for workflow files."""
from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oslo_config import cfg

from fornace.common.errors import FornaceError
from fornace.cli.suggest import add_actions
from fornace.common.jsonlimits import JsonLimitError, loads, read_bounded
from fornace.common.secrets import find_secrets, masked
from fornace.conductor.dsl.limits import Limits

if TYPE_CHECKING:  # the engine is imported when a workflow command runs, not for --help
    from fornace.conductor.executors.simulator import SimulatedCloud


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "workflow", help="check or simulate workflow files",
        description="Check workflow files, or run them on a simulated cloud.")
    actions = add_actions(parser, dest="action", metavar="ACTION", required=True)

    checker = actions.add_parser(
        "check", help="report problems in workflow files",
        description="Report every problem in workflow files as file:line: message "
                    "(XML syntax, unknown functions, filter syntax, unknown <parameter> "
                    "names, missing, unreadable or oversized templates, templates outside "
                    "the catalog). Exit status 1 if any; 2 when a FILE_OR_DIR is missing or "
                    "unreadable. Warnings (file:line: warning: message: a DOCTYPE or "
                    "entities the parser ignored) do not change it.")
    checker.add_argument("paths", nargs="+", metavar="FILE_OR_DIR",
                         help="workflow files or folders of *.xml files")
    checker.add_argument("--data", metavar="DIR",
                         help="catalog folder with templates/ (default: the folder above "
                              "each file's workflows/ folder, then the data_dir option's "
                              "folder for what it lacks, as a job of a workflow package "
                              "looks for templates and scripts)")
    checker.add_argument("--json", action="store_true",
                         help='print one JSON document: {"problems": [{"file", "line", '
                              '"message"}], "warnings": [...]}')

    sim = actions.add_parser(
        "simulate", help="run workflows on a simulated cloud and print a trace, or what "
                         "they would change for a live environment",
        description="Run the workflow loop on a model with a simulated cloud: every Heat "
                    "action and agent command succeeds unless --fail/--time-out says "
                    "otherwise. Prints per round the rules that matched, what they set, "
                    "the actions and reports, then the final model. Exit status 0 when "
                    "the deployment succeeds, 1 when it ends with an error, an error "
                    "report (as a failed unit's workflow sends; the API marks such a job "
                    "completed_w_errors) or a stop, 2 for bad usage or input (unreadable "
                    "model, a service of a type the catalog's types.json lacks).  "
                    "With --environment ENV instead of --model: what the workflows of "
                    "DATA would change for a live environment. Through the API, it "
                    "fetches the model its last deploy job (or --job) was given (secrets "
                    "masked: the simulation needs no password) and that job's trace, "
                    "runs the workflows on that model as the conductor does (change "
                    "detection as the job asked), and prints each difference with the "
                    "real run: actions (kind, template, unit) added (+), removed (-) or "
                    "changed (~: queued by another rule or place, or ending otherwise), "
                    "and rules that fired on an object in one run only; then a summary. "
                    "It assumes the cloud answers as it did: a template that failed or "
                    "timed out on a unit in the real job fails or times out there in the "
                    "simulation, every other action succeeds; an agent command returns "
                    "the result its template last recorded in the environment (else "
                    "\"ok\"), stacks return --outputs (default {}). Exit status 0 when "
                    "nothing differs, 1 when something does, 2 for bad input (an "
                    "unknown environment or job, no deploy job yet, a job still "
                    "running), 3 when the API is unreachable or refuses.")
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="ENV.json",
                        help="the environment object model (JSON)")
    source.add_argument("--environment", metavar="ENV",
                        help="a live environment (id or name): compare with its last "
                             "deploy job (uses --url, --token...)")
    sim.add_argument("--job", metavar="JOB",
                     help="with --environment: the deploy job to compare with (default: "
                          "the newest)")
    sim.add_argument("--data", metavar="DIR",
                     help="catalog laid out like Fornace's data/ folder (DIR/workflows, "
                          "DIR/templates/cf, DIR/templates/agent); default: data_dir option")
    sim.add_argument("--workflows", metavar="DIR", help="workflow folder (default: DATA/workflows)")
    sim.add_argument("--fail", action="append", default=[], metavar="TEMPLATE[:UNIT]",
                     help="make this template fail (on one unit: id, name or hostname); "
                          "repeatable")
    sim.add_argument("--time-out", action="append", default=[], metavar="TEMPLATE[:UNIT]",
                     help="make this template time out; repeatable")
    sim.add_argument("--result", action="append", default=[], metavar="TEMPLATE=JSON",
                     help="value each command of an agent template returns (default \"ok\")")
    sim.add_argument("--outputs", metavar="JSON", help="Heat stack outputs (default {})")
    sim.add_argument("--json", action="store_true",
                     help="print one JSON document (with --environment: {\"added\", "
                          "\"removed\", \"changed\", \"rules_added\", "
                          "\"rules_removed\"})")
    sim.add_argument("--show-secrets", action="store_true",
                     help="print passwords in the final model instead of *** (not with "
                          "--environment)")
    _add_connection_options(sim)


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    """How ``simulate --environment`` reaches the API, as the client commands do
    (``fornace.cli.client.common.client_of``), without their --json and without
    keystoneauth1's option list (~0.3 s on every ``workflow`` command): OpenStack
    credentials come from the OS_* variables or a cloud of clouds.yaml."""
    api = parser.add_argument_group(
        "API (--environment)", "A token given is sent as is; else OS_AUTH_URL or "
        "OS_CLOUD (and the other OS_* variables) log in to Keystone; else noauth.")
    api.add_argument("--url", help="the Fornace API (default: $FORNACE_URL, the catalog's "
                                   "endpoint with OpenStack credentials, else "
                                   "http://127.0.0.1:8082)")
    api.add_argument("--token", help="a Keystone token sent as X-Auth-Token "
                                     "(default: $FORNACE_TOKEN)")
    api.add_argument("--tenant", help="tenant id in noauth mode (default: $FORNACE_TENANT)")
    api.add_argument("--timeout", type=float, metavar="SECONDS",
                     help="for Keystone and Fornace (default 30)")
    api.add_argument("--os-cloud", metavar="NAME", default=os.environ.get("OS_CLOUD"),
                     help="a cloud of clouds.yaml (default: $OS_CLOUD)")
    api.add_argument("--os-auth-url", metavar="URL", default=os.environ.get("OS_AUTH_URL"),
                     help="Keystone (default: $OS_AUTH_URL)")


def run(conf: cfg.ConfigOpts) -> int:
    command = conf.command
    if command.action == "check":
        from fornace.common.options import data_folder
        from fornace.conductor.config import engine_limits
        from fornace.conductor.workflowcheck import inspect

        readable_paths(command.paths)
        found = inspect(command.paths, command.data, engine_limits(conf),
                        beneath=None if command.data else data_folder(conf))
        problems, warnings = found.problems, found.warnings
        if command.json:
            json.dump({"problems": [_located(p) for p in problems],
                       "warnings": [_located(w, "warning: ") for w in warnings]},
                      sys.stdout, indent=2)
            print()
        else:
            for line in problems + warnings:
                print(line)
        if not problems:
            print("no problems found" + (f" ({len(warnings)} warning(s))" if warnings else ""),
                  file=sys.stderr)
        return 1 if problems else 0
    return simulate(conf)


def readable_paths(paths: list[str]) -> None:
    """Each FILE_OR_DIR of ``check`` exists and can be read: else bad usage (exit
    status 2), not a problem found in a workflow (1)."""
    for name in paths:
        path = Path(name)
        try:
            if path.is_dir():
                os.listdir(path)
            else:
                with open(path, "rb"):
                    pass
        except FileNotFoundError:
            raise FornaceError(f"{name}: no such file or folder") from None
        except OSError as exc:
            raise FornaceError(f"{name}: cannot read it: {exc.strerror or exc}") from None


def _located(problem: str, prefix: str = "") -> dict[str, Any]:
    """``file:line: message`` (as the checker words them) as an object; ``prefix``
    (``warning: ``) is left out of the message."""
    match = re.match(r"^(.*?):(\d+): (.*)$", problem, re.S)
    if match is None:
        file, _, message = problem.partition(": ")
        found = {"file": file or None, "line": None, "message": message or problem}
    else:
        found = {"file": match.group(1), "line": int(match.group(2)),
                 "message": match.group(3)}
    found["message"] = found["message"].removeprefix(prefix)
    return found


def _json_arg(text: str, what: str, limits: Limits) -> Any:
    try:
        return loads(text, max_depth=limits.max_json_depth)
    except json.JSONDecodeError as exc:
        raise FornaceError(f"{what}: invalid JSON at column {exc.colno}: {exc.msg}") from None
    except JsonLimitError as exc:
        raise FornaceError(f"{what}: {exc}") from None


def _shape_problem(model: dict[str, Any]) -> str | None:
    """What makes ``model`` no environment: services and units not lists of objects
    (a deletion's services may be an object, as in 0.2)."""
    services = model.get("services", [])
    if not isinstance(services, (list, dict)):
        return f"$.services must be a list of services, not {type(services).__name__}"
    items = services.items() if isinstance(services, dict) else enumerate(services)
    for key, service in items:
        where = f"$.services[{key!r}]" if isinstance(key, str) else f"$.services[{key}]"
        if not isinstance(service, dict):
            return f"{where} must be an object, not {type(service).__name__}"
        units = service.get("units", [])
        if not isinstance(units, list):
            return f"{where}.units must be a list of units, not {type(units).__name__}"
        for number, unit in enumerate(units):
            if not isinstance(unit, dict):
                return f"{where}.units[{number}] must be an object, not {type(unit).__name__}"
    return None


def read_model(path: str, limits: Limits | None = None) -> dict[str, Any]:
    """The ``--model`` file; over a limit (size, depth, integer length) it is an
    error naming the file and the place."""
    limits = limits or Limits()
    try:
        data = read_bounded(path, limits.max_model_bytes, "the model file")
        text = data.decode("utf-8")
    except OSError as exc:
        raise FornaceError(f"{path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise FornaceError(f"{path}: not UTF-8 (byte {exc.start})") from None
    except JsonLimitError as exc:
        raise FornaceError(f"{exc} ([engine] max_model_bytes)") from None
    try:
        model = loads(text, max_depth=limits.max_json_depth, source=path)
    except json.JSONDecodeError as exc:
        raise FornaceError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except JsonLimitError as exc:
        limit = " ([engine] max_json_depth)" if exc.kind == "depth" else ""
        raise FornaceError(f"{exc}{limit}") from None
    if not isinstance(model, dict):
        raise FornaceError(f"{path}: the model must be a JSON object")
    shape = _shape_problem(model)
    if shape is not None:
        raise FornaceError(f"{path}: {shape}")
    try:
        limits.check_model(model)
    except FornaceError as exc:
        raise FornaceError(f"{path}: {exc}") from None
    return model


def simulated_cloud(command: Any, limits: Limits) -> SimulatedCloud:
    """The simulated cloud of the command's --fail, --time-out, --result and --outputs."""
    from fornace.conductor.executors.simulator import Fault, SimulatedCloud

    results = {}
    for item in command.result:
        template, sep, value = item.partition("=")
        if not sep or not template:
            raise FornaceError(f"--result {item!r}: expected TEMPLATE=JSON")
        results[template] = _json_arg(value, f"--result {template}", limits)
    outputs = _json_arg(command.outputs, "--outputs", limits) if command.outputs else {}
    if not isinstance(outputs, dict):
        raise FornaceError("--outputs must be a JSON object")
    try:
        return SimulatedCloud(stack_outputs=outputs, command_results=results,
                              failures=[Fault.parse(f) for f in command.fail],
                              timeouts=[Fault.parse(f) for f in command.time_out])
    except ValueError as exc:
        raise FornaceError(str(exc)) from None


def simulate(conf: cfg.ConfigOpts) -> int:
    # the whole command, output included, under the sessions' collection policy
    # (about 8% of a 1000-unit run otherwise); what start-up loaded is frozen
    from fornace.conductor.gcpolicy import relaxed_collection

    command = conf.command
    if command.environment is None and command.job:
        raise FornaceError("--job JOB goes with --environment ENV")
    if command.environment is not None and command.show_secrets:
        raise FornaceError("--show-secrets: the API masks an environment's secrets, and "
                           "--environment prints no model")
    gc.freeze()
    try:
        with relaxed_collection():
            if command.environment is not None:
                from fornace.cli.client.simulation import simulate_environment
                return simulate_environment(conf)
            return _simulate(conf)
    finally:
        gc.unfreeze()


@dataclass
class Engine:
    """What a simulated run works with: the catalog folder, its workflows and
    templates, the [engine] settings and limits."""

    data: Path
    folder: Path        # where the workflows were read
    workflows: list[Any]
    store: Any          # a TemplateStore
    settings: Any       # the conductor's session Settings
    limits: Limits


def engine(conf: cfg.ConfigOpts) -> Engine:
    """The engine of ``simulate``: DATA (``--data``, else the data_dir option)
    and its workflows (``--workflows``, else DATA/workflows), which must not be
    empty."""
    from fornace.conductor.config import engine_limits, engine_settings
    from fornace.conductor.templates import TemplateStore
    from fornace.conductor.workflowfiles import load_workflows

    command = conf.command
    limits = engine_limits(conf)
    data = Path(command.data or conf.data_dir)
    folder = Path(command.workflows or data / "workflows")
    workflows = load_workflows(folder)
    if not workflows:
        raise FornaceError(f"no workflow files in {folder}")
    return Engine(data, folder, workflows, TemplateStore(data, limits=limits),
                  engine_settings(conf), limits)


def run_session(found: Engine, model: dict[str, Any], cloud: SimulatedCloud,
                trace: Any, secret_keys: frozenset[str] = frozenset()) -> Any:
    """Run the workflows on ``model`` with ``cloud``, recording into ``trace``:
    the session's Outcome (final model, status, rounds, reports); the values of
    ``secret_keys`` fields (the catalog's declared secrets) masked in them.  Each
    service sees its type's ``temp.instance`` as in a job (the catalog of the
    data folder, else the built-in one, as the conductor's)."""
    from fornace.common.catalog import CatalogError, catalog_file, load_catalog, with_type_views
    from fornace.conductor.session import Session

    try:
        with_type_views(model, load_catalog(catalog_file(found.data)))
    except CatalogError as exc:
        raise FornaceError(str(exc)) from None
    stacks, agents = cloud.executors()
    return Session(model, found.workflows, found.store, stacks, agents, found.settings,
                   trace=trace, secret_keys=secret_keys).run()


def _simulate(conf: cfg.ConfigOpts) -> int:
    from fornace.conductor.dsl.trace import RecordingTrace, format_events

    command = conf.command
    found = engine(conf)
    limits = found.limits
    model = read_model(command.model, limits)
    keys = check_service_types(model, found.data / "types.json", command.model)
    secrets = find_secrets(model, keys=keys)
    cloud = simulated_cloud(command, limits)
    out = sys.stdout
    if command.json:
        # one JSON document, written as the deployment goes: a round per line
        # (C encoder, nothing held), then the status, the reports, the model
        separator = "\n"

        def write_round(entry: dict[str, Any], events: list) -> None:
            nonlocal separator
            out.write(separator + json.dumps(entry))
            separator = ",\n"
        trace = RecordingTrace(write_round)
    else:
        trace = RecordingTrace(lambda entry, events: print(format_events(events), file=out))
    if command.json:
        out.write('{"rounds": [')
    outcome = run_session(found, model, cloud, trace, keys)
    trace.flush()
    final = outcome.model if command.show_secrets else masked(outcome.model, secrets, keys)
    status, errors = judged(outcome.status, outcome.reports)
    if command.json:
        out.write("\n],\n")
        out.write(f'"status": {json.dumps(status)},\n')
        out.write(f'"reports": {json.dumps(outcome.reports)},\n')
        out.write(f'"model": {json.dumps(final)}}}\n')
    else:
        counted = f" ({len(errors)} error report(s))" if errors else ""
        print(f"== deployment {status} after {outcome.rounds} round(s){counted}")
        print(json.dumps(final, indent=2))
    if status != "success":     # after the model: the last thing on the screen
        said = "; ".join(str(r.get("text")) for r in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        print(f"fornace: the deployment ended {status}" + (f": {said}{more}" if said else ""),
              file=sys.stderr)
    return 0 if status == "success" else 1


def judged(status: str, reports: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The deployment's status as the API would record its job, and its error reports.

    The loop ends ``success`` when no action is left, even after a unit's command
    failed: the workflows record such a failure as an error report and go on.
    The API marks a job with an error report ``completed_w_errors``; so does
    ``simulate`` (it used to print ``deployment success`` and exit 0).
    """
    errors = [r for r in reports if r.get("level") == "error"]
    if status == "success" and errors:
        return "completed_w_errors", errors
    return status, errors


def check_service_types(model: dict[str, Any], types_file: Path,
                        source: str) -> frozenset[str]:
    """Every service that names a type names one of the catalog's ``types.json``
    (not an abstract one): else bad input, naming each such service and its type.
    A catalog without ``types.json`` (a Murano 0.2 ``data`` folder) is not checked.
    The field names its types declare secret (``writeOnly``: masked as passwords
    are; the built-in types' without ``types.json``)."""
    from fornace.common.catalog import CatalogError, declared_secrets, load_catalog

    if not types_file.is_file():
        return declared_secrets(None)

    try:
        catalog = load_catalog(types_file)
    except CatalogError as exc:
        raise FornaceError(str(exc)) from None
    services = model.get("services", [])
    items = services.items() if isinstance(services, dict) else enumerate(services)
    wrong = []
    for key, service in items:
        if "type" not in service:
            continue
        kind = service["type"]
        where = f"$.services[{key!r}]" if isinstance(key, str) else f"$.services[{key}]"
        name = service.get("name") or service.get("id") or where
        if not isinstance(kind, str) or not catalog.known(kind):
            wrong.append(f"{where} (service {name}) has the unknown type {kind!r}")
        elif catalog.types[kind].abstract:
            wrong.append(f"{where} (service {name}) has the abstract type {kind!r}")
    if wrong:
        known = ", ".join(sorted(n for n, t in catalog.types.items() if not t.abstract))
        raise FornaceError(f"{source}: {'; '.join(wrong)} (the types of {types_file}: "
                           f"{known})")
    return declared_secrets(catalog)
