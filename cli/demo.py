"""``fornace demo``: a whole deployment on this machine, start to finish.

Starts Fornace (:class:`fornace.cli.onebox.OneBox`) in a fresh state folder,
then works as any API user would: creates an environment, opens a session,
adds a Linux web server service of two units, deploys, follows the
deployment's reports, checks that every unit's web site answers, deletes the
environment and checks its instances are gone.  Exit code 0 only when all of
that worked.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import urllib.request
from typing import Any, Callable

from oslo_config import cfg

from fornace.cli import argtypes, daemonlogs
from fornace.cli.client.http import ApiClient, ClientError
from fornace.common.brokerurl import masked
from fornace.common.errors import FornaceError

POLL = 0.25


class DemoFailed(Exception):
    pass


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="deploy an example environment on this machine and remove it",
        description="Start Fornace in a fresh state folder, deploy an environment with a "
                    "Linux web server service on the local cloud, check that each unit's "
                    "site answers, delete the environment. Exits 0 only on success.")
    parser.add_argument("--units", type=argtypes.positive, default=2,
                        help="units of the service (2)")
    parser.add_argument("--site-port", type=argtypes.port, default=8080,
                        help="port the units serve the site on (8080; each unit has its "
                             "own loopback address)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds the deployment and the deletion may take (300)")
    parser.add_argument("--state-dir", help="state folder (default: a new temporary one, "
                                            "removed at the end)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the environment running and Fornace up until Ctrl-C")


class Demo:
    def __init__(self, client: ApiClient, out: Callable[[str], None], timeout: float) -> None:
        self.client = client
        self.out = out
        self.timeout = timeout
        self.started = time.monotonic()
        self.env_id: str | None = None
        self._seen_reports: set[str] = set()

    def say(self, text: str) -> None:
        self.out(f"[{time.monotonic() - self.started:6.1f}s] {text}")

    def deploy(self, units: int, port: int) -> dict[str, Any]:
        env = self.client.post("/environments", {"name": "demo"})
        self.env_id = env["id"]
        self.say(f"environment 'demo' created (id {env['id']})")
        session = self.client.post(f"/environments/{env['id']}/configure")["id"]
        service = self.client.post(f"/environments/{env['id']}/services", {
            "name": "demo-site", "type": "linuxWebServer", "unitNamingPattern": "web#",
            "osImage": {"name": "local", "type": "linux"}, "port": port,
            "units": [{} for _ in range(units)]}, session=session)
        self.say(f"service '{service['name']}' (linuxWebServer, {units} units, port {port}) "
                 f"added in session {session}")
        self.client.post(f"/environments/{env['id']}/sessions/{session}/deploy")
        self.say("deployment started")
        ready = self.follow(lambda body: body is not None and body["status"] != "deploying"
                            and body["status"] != "pending")
        if ready["status"] != "ready":
            raise DemoFailed(f"the deployment ended with status {ready['status']!r}")
        self.say("environment is ready")
        return ready

    def follow(self, done: Callable[[Any], bool]) -> Any:
        """Print new reports until ``done(environment)``; the environment (None: gone)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                body = self.client.get(f"/environments/{self.env_id}")
            except ClientError as exc:
                if exc.status != 404:
                    raise
                body = None
            self.print_reports()
            if done(body):
                return body
            if time.monotonic() > deadline:
                raise DemoFailed(f"no end after {self.timeout:g} s (status "
                                 f"{body and body.get('status')!r})")
            time.sleep(POLL)

    def print_reports(self) -> None:
        try:
            deployments = self.client.get(f"/environments/{self.env_id}/deployments")
            for deployment in reversed(deployments["deployments"]):
                reports = self.client.get(
                    f"/environments/{self.env_id}/deployments/{deployment['id']}")["reports"]
                for report in reports:
                    self._print_report(report)
        except ClientError as exc:
            if exc.status != 404:      # 404: the environment is gone (deleted)
                raise

    def _print_report(self, report: dict[str, Any]) -> None:
        if report["id"] not in self._seen_reports:
            self._seen_reports.add(report["id"])
            level = "" if report.get("level") == "info" else f"{report['level']}: "
            self.say(f"  report: {level}{report['text']}")

    def check_sites(self, environment: dict[str, Any], port: int) -> None:
        units = [u for s in environment["services"] for u in s["units"]]
        for unit in units:
            state = unit.get("state") or {}
            address = state.get("address")
            if not address:
                raise DemoFailed(f"unit {state.get('hostname')} has no address")
            url = f"http://{address}:{port}/"
            with urllib.request.urlopen(url, timeout=10) as page:
                text = page.read().decode("utf-8", "replace")
            if "demo-site" not in text:
                raise DemoFailed(f"{url} answers without the site's title: {text[:80]!r}")
            self.say(f"unit {state['hostname']}: {url} answers with the site")

    def delete(self) -> None:
        self.client.delete(f"/environments/{self.env_id}")
        self.say("environment deletion started")
        self.follow(lambda body: body is None or body["status"] == "delete failure")
        if self.client_has_environment():
            raise DemoFailed("the environment could not be deleted")
        self.say("environment deleted")

    def client_has_environment(self) -> bool:
        try:
            self.client.get(f"/environments/{self.env_id}")
            return True
        except ClientError as exc:
            if exc.status == 404:
                return False
            raise


def run(conf: cfg.ConfigOpts) -> int:
    daemonlogs.setup(conf, level="WARNING")
    command = conf.command
    temporary = command.state_dir is None
    state_dir = command.state_dir or tempfile.mkdtemp(prefix="fornace-demo-")
    conf.set_override("state_dir", state_dir, group="api")
    from fornace.cli.onebox import OneBox

    box = OneBox(conf, host="127.0.0.1", port=0)
    out(f"fornace demo: starting Fornace in {state_dir}")
    box.start()
    out(f"  API {box.url}/, broker {masked(box.broker_url)}, local cloud {box.cloud.state_dir}")
    demo = Demo(ApiClient(box.url), out, command.timeout)
    ok = False
    try:
        environment = demo.deploy(command.units, command.site_port)
        demo.check_sites(environment, command.site_port)
        if command.keep:
            out(f"the environment stays up; dashboard at {box.url}/dashboard/, API at "
                f"{box.url}/ -- press Ctrl-C to stop")
            _wait_for_interrupt()
        demo.delete()
        left = box.cloud.stack_names()
        if left:
            raise DemoFailed(f"local cloud stacks left after the deletion: {left}")
        demo.say("its instances are stopped and their sandboxes removed")
        ok = True
    except (DemoFailed, ClientError, OSError, FornaceError) as exc:
        out(f"fornace demo: FAILED: {exc}")
    finally:
        box.stop()
        for stack in box.cloud.stack_names():   # what a failed run left behind
            box.cloud.delete(stack)
        if temporary and not command.keep:
            shutil.rmtree(state_dir, ignore_errors=True)
    if ok:
        out(f"fornace demo: success in {time.monotonic() - demo.started:.1f} s")
    return 0 if ok else 1


def out(text: str) -> None:
    print(text, flush=True)


def _wait_for_interrupt() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print(file=sys.stderr)
