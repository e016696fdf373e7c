#!/usr/bin/env python3
"""Benchmark of the workflow engine on the simulated cloud (not a test).

It deploys environments of growing size -- one Active Directory service
(domain ``acme.loc``, a master and a secondary unit) plus web server services
whose units join that domain -- with the workflows of
``tools/bench_catalog/workflows`` (written like Murano 0.2 workflow files),
and times ``Session(...).run()`` only: building the model and loading the
workflows are left out.  Every run is checked (status, final state of every
unit, number of actions of each kind, rounds) before its time is printed, so
a broken run can never show up as a fast one.

    python tools/bench_engine.py                      # 10, 100, 1000, 5000 units
    python tools/bench_engine.py --sizes 10,100,1000 --repeat 3
    python tools/bench_engine.py --profile 1000       # cProfile top 25 of one run

The domain join has the shape of Murano 0.2's own workflow (a rule per unit
whose nested rule finds the domain controller): every web unit joins in one
round, which the "join rounds" column shows and the checks enforce.

Targets: 1000 units in under 1 s, and time(5000) / time(1000) under 6
(time per unit must not grow with the size of the model).
"""
from __future__ import annotations

import argparse
import base64
import collections
import cProfile
import gc
import io
import math
import pstats
import random
import re
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from fornace.conductor.dsl.workflows import Workflow  # noqa: E402
from fornace.conductor.executors.simulator import SimulatedCloud  # noqa: E402
from fornace.conductor.session import Session, Settings  # noqa: E402
from fornace.conductor.templates import TemplateStore  # noqa: E402
from fornace.conductor.workflowfiles import load_workflows  # noqa: E402

CATALOG = Path(__file__).resolve().parent / "bench_catalog"

DOMAIN = "acme.loc"
DNS_IP = "10.0.0.10"
ADMIN_PASSWORD = "Bench-Adm1n!pass"
RECOVERY_PASSWORD = "Bench-Rec0very!pass"

DEFAULT_SIZES = (10, 100, 1000, 5000)
TARGET_1000 = 1.0   # seconds for 1000 units
TARGET_RATIO = 6.0  # time(5000) / time(1000)
TARGET_JOB = 1.5    # the deploy job / the bare engine, at 1000 units
EXPECTED_ROUNDS = 7  # create, passwords+IIS, primary DC, DNS IP, joins, secondary DC, idle


# ----------------------------------------------------------------- model

@dataclass
class Shape:
    units: int
    services: int
    web_units: int


def build_model(total_units: int, units_per_service: int, seed: int) -> tuple[dict, Shape]:
    """An environment as the API sends it: ids everywhere, units named."""
    if total_units < 3:
        raise ValueError("at least 3 units: 2 for Active Directory and 1 web server")
    rng = random.Random(seed)

    def new_id() -> str:
        return uuid.UUID(int=rng.getrandbits(128), version=4).hex

    def service(name: str, type_: str, pattern: str, units: list[dict], **extra: Any) -> dict:
        body = {
            "id": new_id(), "name": name, "type": type_,
            "osImage": {"name": "ws-2012-std", "type": "ws-2012-std"},
            "flavor": "m1.medium", "availabilityZone": "nova",
            "adminPassword": ADMIN_PASSWORD, "unitNamingPattern": pattern,
            **extra, "units": units,
        }
        for index, unit in enumerate(units):
            unit["id"] = new_id()
            unit["name"] = f"{name}_instance_{index}"
        return body

    services = [service("acme", "activeDirectory", "dc#", [
        {"isMaster": True, "recoveryPassword": RECOVERY_PASSWORD},
        {"isMaster": False, "recoveryPassword": RECOVERY_PASSWORD},
    ], domain=DOMAIN)]
    web_units = total_units - 2
    for k in range(1, math.ceil(web_units / units_per_service) + 1):
        count = min(units_per_service, web_units - (k - 1) * units_per_service)
        services.append(service(f"web{k}", "webServer", f"web{k}-#",
                                [{} for _ in range(count)], domain=DOMAIN))
    model = {"id": new_id(), "name": f"bench-{total_units}", "tenant_id": new_id(),
             "token": "bench-token-" + new_id(), "services": services}
    return model, Shape(total_units, len(services), web_units)


# ----------------------------------------------------------------- one run

@dataclass
class Run:
    shape: Shape
    seconds: float
    cpu: float          # CPU seconds of the process meanwhile (all its threads)
    rounds: int
    heat_updates: int   # update-cf-stack actions (merged into stack_applies)
    stack_applies: int
    agent_commands: int
    join_rounds: int    # rounds that sent JoinDomain to web units

    @property
    def actions(self) -> int:
        return self.heat_updates + self.agent_commands


def load_bench_workflows() -> list[Workflow]:
    return load_workflows(CATALOG / "workflows")


def job_runner(model: dict, workflows: list[Workflow], store: TemplateStore, stacks: Any,
               agents: Any, settings: Settings) -> Any:
    """The deploy job as the conductor runs it (hooks, change detection, task
    records and node status), its task events and reports collected in memory."""
    from fornace.common import contract
    from fornace.common.catalog import load_catalog
    from fornace.conductor.jobs.lifecycle import Job, run_job
    from fornace.conductor.jobs.records import JobRecorder

    body = contract.task_body(model, None, "bench", job=contract.job_section(
        "bench-job", "deploy", {}))
    task = contract.parse_task(body)
    events: list = []
    recorder = JobRecorder(task.environment_id, "bench-job",
                           lambda event, message_id: events.append(event))
    job = Job(task=task, workflows=workflows, store=store, catalog=load_catalog(
        CATALOG / "types.json") if (CATALOG / "types.json").exists() else None,
        stacks=stacks, agents=agents, recorder=recorder, engine=settings,
        reporter=events.append, plan_seed="bench")
    return lambda: run_job(job)


def run_once(size: int, workflows: list[Workflow], args: argparse.Namespace,
             profiler: cProfile.Profile | None = None, job: bool = False) -> Run:
    model, shape = build_model(size, args.units_per_service, seed=size)
    store = TemplateStore(CATALOG)
    stacks, agents = SimulatedCloud(command_results={"AskDnsIp": DNS_IP}).executors()
    requests = []
    apply = stacks.apply

    def counting_apply(request):  # record what Heat was asked, outside the engine
        requests.append(request)
        return apply(request)
    stacks.apply = counting_apply
    batches: list[list[str]] = []  # the units sent JoinDomain, per agent batch (round)
    run_agents = agents.run

    def counting_run(requests):
        batches.append([r.unit for r in requests if r.template == "JoinDomain"])
        return run_agents(requests)
    agents.run = counting_run
    settings = Settings()  # the default round limit

    gc.collect()
    if profiler is not None:
        profiler.enable()
    run = (job_runner(model, workflows, store, stacks, agents, settings) if job
           else Session(model, workflows, store, stacks, agents, settings).run)
    started, cpu_started = time.perf_counter(), time.process_time()
    outcome = run()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if profiler is not None:
        profiler.disable()

    check(outcome, shape, stacks, agents, requests, EXPECTED_ROUNDS)
    web_units = {u["id"] for s in outcome.model["services"][1:] for u in s["units"]}
    join_rounds = sum(1 for batch in batches if web_units & set(batch))
    assert join_rounds == 1, f"web units joined the domain over {join_rounds} rounds, not one"
    return Run(shape, seconds, cpu, outcome.rounds, sum(len(r.sources) for r in requests),
               len(requests), len(agents.plans), join_rounds)


# ----------------------------------------------------------------- checks

def check(outcome: Any, shape: Shape, stacks: Any, agents: Any, requests: list,
          expected_rounds: int) -> None:
    """Refuse to time a run that did not deploy everything exactly once."""
    problems = [r["text"] for r in outcome.reports if r["level"] != "info"]
    assert outcome.status == "success", f"status {outcome.status}: {problems[:5]}"
    assert not problems, f"warnings/errors reported: {problems[:5]}"
    assert outcome.rounds == expected_rounds, \
        f"{outcome.rounds} rounds, expected {expected_rounds}"
    model = outcome.model
    assert "token" not in model and "temp" not in model, "token/temp left in the final model"

    ad, webs = model["services"][0], model["services"][1:]
    assert ad["type"] == "activeDirectory"
    assert ad.get("state", {}).get("primaryDcIp") == DNS_IP, f"AD state: {ad.get('state')}"
    hostnames = set()
    env = model["id"]
    resources = stacks.stacks[f"e{env}"]["Resources"]

    def common(service: dict, unit: dict, pattern: str) -> dict:
        assert "temp" not in unit and "temp" not in service, "temp left in the final model"
        state = unit.get("state") or {}
        hostname = state.get("hostname")
        assert isinstance(hostname, str) and re.fullmatch(pattern, hostname), \
            f"{unit['name']}: hostname {hostname!r}"
        assert hostname not in hostnames, f"hostname {hostname} given twice"
        hostnames.add(hostname)
        assert state.get("adminPasswordSet") is True, f"{unit['name']}: {state}"
        instance = resources.get(hostname)
        assert instance is not None, f"no Heat resource for {hostname}"
        user_data = instance["Properties"]["UserData"]
        queue = f"e{env}-{service['id']}-{unit['id']}".lower()
        assert "%" not in user_data and hostname in user_data, f"{hostname}: user data"
        assert queue in _agent_config(user_data), f"{hostname}: agent queue missing"
        return state

    for unit in ad["units"]:
        state = common(ad, unit, r"dc\d+")
        if unit["isMaster"]:
            assert state.get("domainAdminPasswordSet") and state.get("primaryDcCreated"), \
                f"master DC {unit['name']}: {state}"
        else:
            assert state.get("domain") == DOMAIN and state.get("secondaryDcCreated"), \
                f"secondary DC {unit['name']}: {state}"
    web_units = 0
    for service in webs:
        pattern = re.escape(service["unitNamingPattern"]).replace("\\#", "#").replace("#", r"\d+")
        for unit in service["units"]:
            state = common(service, unit, pattern)
            assert state.get("iisInstalled") is True and state.get("domain") == DOMAIN, \
                f"web unit {unit['name']}: {state}"
            web_units += 1
    assert web_units == shape.web_units and len(model["services"]) == shape.services
    assert len(resources) == shape.units + 1, f"{len(resources)} Heat resources"

    heat = sum(len(r.sources) for r in requests)
    assert heat == shape.units, f"{heat} update-cf-stack actions for {shape.units} units"
    plans = collections.Counter(p.template for p in agents.plans)
    expected = {"SetLocalAdminPassword": shape.units, "SetDomainAdminPassword": 1,
                "CreatePrimaryDC": 1, "AskDnsIp": 1, "JoinDomain": shape.web_units + 1,
                "CreateSecondaryDC": 1, "InstallIIS": shape.web_units}
    assert plans == expected, f"agent plans {dict(plans)}, expected {expected}"
    joined = sum(1 for r in outcome.reports if " joined domain " in r["text"])
    assert joined == shape.web_units + 1, f"{joined} 'joined domain' reports"


def _agent_config(user_data: str) -> str:
    """The agent configuration the boot script carries (base64 inside it)."""
    match = re.search(r"\$ConfigBase64 = '([^']*)'", user_data)
    assert match, "no agent configuration in the user data"
    return base64.b64decode(match.group(1)).decode()


# ----------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="total units per run, comma separated (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per size; the best time is kept (default 1)")
    parser.add_argument("--units-per-service", type=int, default=10,
                        help="units of each web server service (default 10)")
    parser.add_argument("--job", action="store_true",
                        help="also time the deploy job as the conductor runs it (hooks, "
                             "change detection, task records) on the same models")
    parser.add_argument("--profile", type=int, metavar="SIZE",
                        help="profile one run of SIZE units and print the top 25 functions")
    parser.add_argument("--profile-sort", default="cumulative",
                        help="pstats sort key for --profile (default cumulative)")
    args = parser.parse_args(argv)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error("--sizes takes integers separated by commas")
    if any(s < 3 for s in args.sizes) or (args.profile is not None and args.profile < 3):
        parser.error("sizes must be at least 3 units")
    if args.repeat < 1 or args.units_per_service < 1:
        parser.error("--repeat and --units-per-service must be at least 1")
    return args


def profile(size: int, workflows: list[Workflow], args: argparse.Namespace) -> None:
    profiler = cProfile.Profile()
    run = run_once(size, workflows, args, profiler, job=args.job)
    print(f"\nProfile of one run of {size} units ({run.seconds:.3f} s under the profiler, "
          f"{run.rounds} rounds, {run.actions} actions), top 25 by {args.profile_sort}:")
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.strip_dirs().sort_stats(args.profile_sort).print_stats(25)
    print(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workflows = load_bench_workflows()
    rules = sum(1 for w in workflows for _ in _rules(w.root))
    print(f"Fornace engine benchmark: {len(workflows)} workflow files "
          f"({', '.join(w.path.name for w in workflows)}), {rules} rules; "
          f"best of {args.repeat}; simulator; {args.units_per_service} units per web service")
    if args.profile is not None:
        profile(args.profile, workflows, args)
        return 0

    header = f"{'units':>6} {'services':>8} {'rounds':>6} {'join rounds':>11} " \
             f"{'actions':>8} {'(heat+agent)':>13} {'seconds':>9} {'us/unit':>9}"
    if args.job:
        header += f" {'job s':>9} {'job/engine':>10} {'CPU ratio':>9}"
    print(header)
    print("-" * len(header))
    best: dict[int, Run] = {}
    best_job: dict[int, Run] = {}
    for size in args.sizes:
        runs, jobs = [], []
        for _ in range(args.repeat):   # engine and job in turn: both see the same machine
            runs.append(run_once(size, workflows, args))
            if args.job:
                jobs.append(run_once(size, workflows, args, job=True))
        run = min(runs, key=lambda r: r.seconds)
        best[size] = run
        split = f"({run.heat_updates}+{run.agent_commands})"
        line = (f"{size:>6} {run.shape.services:>8} {run.rounds:>6} {run.join_rounds:>11} "
                f"{run.actions:>8} "
                f"{split:>13} {run.seconds:>9.4f} {run.seconds / size * 1e6:>9.1f}")
        if args.job:
            job = min(jobs, key=lambda r: r.seconds)
            best_job[size] = job
            line += (f" {job.seconds:>9.4f} {job.seconds / run.seconds:>10.2f}"
                     f" {_cpu_ratio(jobs, runs):>9.2f}")
        print(line, flush=True)

    print(f"\nTargets: 1000 units under {TARGET_1000:g} s; time(5000)/time(1000) "
          f"under {TARGET_RATIO:g}")
    if 1000 in best:
        seconds = best[1000].seconds
        print(f"  1000 units: {seconds:.3f} s  "
              f"{'OK' if seconds < TARGET_1000 else 'MISSED'}")
    if 1000 in best and 5000 in best:
        ratio = best[5000].seconds / best[1000].seconds
        print(f"  time(5000)/time(1000) = {ratio:.2f}  "
              f"{'OK' if ratio < TARGET_RATIO else 'MISSED'}")
    if 1000 in best_job:
        ratio = best_job[1000].seconds / best[1000].seconds
        cpu_ratio = best_job[1000].cpu / best[1000].cpu
        print(f"  the deploy job at 1000 units: {best_job[1000].seconds:.3f} s, {ratio:.2f} x "
              f"the engine; CPU {best_job[1000].cpu:.3f} s, {cpu_ratio:.2f} x "
              f"(target {TARGET_JOB:g} x)  {'OK' if cpu_ratio <= TARGET_JOB else 'MISSED'}")
        print("    (judged on CPU seconds, its recorder thread included: on a shared machine "
              "wall times of the same run vary by a third)")
    if 1000 in best_job and 5000 in best_job:
        ratio = best_job[5000].seconds / best_job[1000].seconds
        print(f"  job time(5000)/time(1000) = {ratio:.2f}  "
              f"{'OK' if ratio < TARGET_RATIO else 'MISSED'}")
    return 0


def _cpu_ratio(jobs: list[Run], runs: list[Run]) -> float:
    """The least CPU of the job runs over the least CPU of the engine runs."""
    return min(j.cpu for j in jobs) / min(r.cpu for r in runs)


def _rules(node: Any):
    if node.tag == "rule":
        yield node
    for child in node.children:
        yield from _rules(child)
    for param in node.params.values():
        yield from _rules(param)


if __name__ == "__main__":
    sys.exit(main())
