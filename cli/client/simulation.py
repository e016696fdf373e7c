"""``fornace workflow simulate --environment ENV``: what edited workflows would
change for a live environment.

Through the API (the client commands' connection options), it fetches the
environment's last deploy job (or ``--job``), the object model that job was
given (``GET /environments/{id}/model?job=``, secrets masked) and its trace;
it runs the workflows of ``--data`` on that model with the simulated cloud,
recording a trace as a real job does, and prints what differs
(:mod:`fornace.cli.client.tracediff`).  Replaying the job's own model keeps
the comparison about the workflows: after a deployment the environment's
model marks its units configured, and unchanged workflows run on it would
do (almost) nothing.

The cloud is assumed to answer as it did: a template that failed (or timed
out) on a unit in the real job does so in the simulation, everything else
succeeds; an agent command returns the result its template last recorded in
the environment's model (``status.configs``), else ``"ok"``.
"""
from __future__ import annotations

import json
import sys
import urllib.parse
from typing import Any

from oslo_config import cfg

from fornace.cli.client.common import dispatch, find_environment, note
from fornace.cli.client.http import ApiClient
from fornace.cli.client.tracediff import compare, differs, diff_lines, events, summary
from fornace.common.contract import UNENDED_JOB_STATES
from fornace.common.errors import FornaceError

# the job actions that run the workflows on the model they are given, as is
WORKFLOW_JOBS = ("deploy", "install")


def simulate_environment(conf: cfg.ConfigOpts) -> int:
    """The command (see the module's docstring): 0 nothing differs, 1 something
    does; API errors end it as the client commands' do (2 or 3)."""
    command = conf.command
    return dispatch(command, {command.name: lambda cmd, client: _compare(conf, client)})


def _compare(conf: cfg.ConfigOpts, client: ApiClient) -> int:
    from fornace.cli.workflow import engine

    command = conf.command
    found = engine(conf)      # bad --data or --workflows: said before any request
    env = find_environment(client, command.environment)
    job = deploy_job(client, env, command.job)
    base = f"/environments/{env['id']}"
    real = client.get(f"{base}/jobs/{job['id']}/trace")
    model = client.get(f"{base}/model?job={urllib.parse.quote(job['id'], safe='')}")
    current = client.get(f"{base}/model")
    if not isinstance(model, dict) or not isinstance(real, dict):
        raise FornaceError(f"the API sent no model or trace for job {job['id']} of "
                           f"environment {env['name']}")
    simulated, status, errors = simulate_job(conf, found, env, job, model, real,
                                             recorded_results(current))
    diff = compare(real, simulated)
    if real.get("truncated"):
        note(f"the trace of job {job['id']} was truncated: what it did past that point is "
             f"not compared")
    if status != job.get("state"):
        said = "; ".join(str(r.get("text")) for r in errors[:3])
        note(f"the simulated deployment ended {status}, the job {job.get('state')}"
             + (f": {said}" if said else ""))
    if command.json:
        json.dump(diff, sys.stdout, indent=2)
        print()
    else:
        for line in diff_lines(diff, unit_names(model)):
            print(line)
        print(f"{summary(diff)} (workflows of {found.folder}, compared with job {job['id']}: "
              f"{job.get('action')} {job.get('state')}, started {job.get('started')})")
    return 1 if differs(diff) else 0


def deploy_job(client: ApiClient, env: dict[str, Any], wanted: str | None) -> dict[str, Any]:
    """The job to compare with: ``wanted``, else the environment's newest deploy
    job; one that ran no workflows on its model, or still runs, is bad input."""
    name = env["name"]
    if wanted:
        job = client.get(f"/environments/{env['id']}/jobs/{urllib.parse.quote(wanted, safe='')}")
    else:
        jobs = client.get(f"/environments/{env['id']}/jobs")["jobs"]
        job = next((j for j in jobs if j.get("action") in WORKFLOW_JOBS), None)
        if job is None:
            raise FornaceError(f"environment {name} has no deploy job yet: deploy it first "
                               f"(fornace deploy {name})")
    if job.get("action") not in WORKFLOW_JOBS:
        raise FornaceError(f"job {job['id']} of environment {name} is a {job.get('action')} "
                           f"job: only {' and '.join(WORKFLOW_JOBS)} jobs run the workflows "
                           f"on the model they are given")
    if job.get("state") in UNENDED_JOB_STATES:
        raise FornaceError(f"job {job['id']} of environment {name} is still {job['state']}: "
                           f"wait for it (fornace logs {name} --follow)")
    return job


def simulate_job(conf: cfg.ConfigOpts, found: Any, env: dict[str, Any], job: dict[str, Any],
                 model: dict[str, Any], real: dict[str, Any],
                 results: dict[str, Any]) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """Run the workflows on ``model`` as ``job`` ran (its change detection, the
    failures of ``real``): the simulated trace document, the run's status as
    the API would judge it and its error reports."""
    from fornace.cli.workflow import (check_service_types, judged, run_session,
                                      simulated_cloud)
    from fornace.conductor.executors.simulator import Fault
    from fornace.conductor.jobs import changes
    from fornace.conductor.jobs.tracing import JobTrace
    from fornace.common.secrets import find_secrets

    command = conf.command
    where = f"environment {env['name']} (job {job['id']})"
    model.setdefault("tenant_id", env.get("tenant_id"))   # as a task's model has it
    try:
        found.limits.check_model(model, f"the model of {where}")
    except FornaceError as exc:
        raise FornaceError(f"{exc} ([engine] limits)") from None
    keys = check_service_types(model, found.data / "types.json", where)
    changes.prepare(model, (job.get("parameters") or {}).get("change_detection", "evaluate"))
    cloud = simulated_cloud(command, found.limits)
    cloud.command_results = {**results, **cloud.command_results}
    failures, timeouts = failed_actions(real)
    cloud.failures += [Fault(template, unit) for template, unit in failures]
    cloud.timeouts += [Fault(template, unit) for template, unit in timeouts]
    trace = JobTrace(find_secrets(model, keys=keys), conf.conductor.trace_bytes)
    outcome = run_session(found, model, cloud, trace, keys)
    status, errors = judged(outcome.status, outcome.reports)
    return (trace.document(env["id"], "simulated", job.get("action") or "deploy"), status,
            errors)


def failed_actions(real: dict[str, Any]) -> tuple[list[tuple[str, str | None]],
                                                    list[tuple[str, str | None]]]:
    """(template, unit) of each action that failed in the real job, and of each
    that timed out (an agent's timeout error says ``"type": "timeout"``)."""
    queued: dict[Any, tuple[str, str | None]] = {}
    failures: list[tuple[str, str | None]] = []
    timeouts: list[tuple[str, str | None]] = []
    for event in events(real):
        if event.get("e") == "queued" and event.get("template"):
            queued[event.get("n")] = (str(event["template"]), event.get("unit") or None)
        elif (event.get("e") == "ended" and event.get("outcome") == "failure"
              and event.get("n") in queued):
            error = str(event.get("error") or "")
            timed_out = '"timeout"' in error or "timed out" in error
            (timeouts if timed_out else failures).append(queued[event["n"]])
    return list(dict.fromkeys(failures)), list(dict.fromkeys(timeouts))


def _units(model: Any) -> list[dict[str, Any]]:
    services = model.get("services") if isinstance(model, dict) else None
    services = services.values() if isinstance(services, dict) else services or []
    return [unit for service in services if isinstance(service, dict)
            for unit in service.get("units") or [] if isinstance(unit, dict)]


def unit_names(model: dict[str, Any]) -> dict[str, str]:
    """Unit id -> its name (else its hostname), as the lines show units."""
    names = {}
    for unit in _units(model):
        state = unit.get("state") if isinstance(unit.get("state"), dict) else {}
        shown = unit.get("name") or state.get("hostname")
        if unit.get("id") is not None and shown:
            names[str(unit["id"])] = str(shown)
    return names


def recorded_results(model: Any) -> dict[str, Any]:
    """Template -> the value its agent command last returned, as change detection
    recorded it on the units (``status.configs["TEMPLATE@UNIT"].result``: the
    first command's first value; masked as the API masks everything)."""
    results: dict[str, Any] = {}
    for unit in _units(model):
        status = unit.get("status") if isinstance(unit.get("status"), dict) else {}
        configs = status.get("configs") if isinstance(status.get("configs"), dict) else {}
        for key, config in configs.items():
            template = str(key).rpartition("@")[0] or str(key)
            result = config.get("result") if isinstance(config, dict) else None
            if not (isinstance(config, dict) and config.get("ok") and isinstance(result, list)
                    and result and isinstance(result[0], dict)):
                continue
            values = result[0].get("Result")
            if isinstance(values, list) and values:
                results.setdefault(template, values[0])
    return results
