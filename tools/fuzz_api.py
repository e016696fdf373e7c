#!/usr/bin/env python3
# Fuzzer of the Fornace API, written against schemathesis==4.32.5
# (pip install 'schemathesis==4.32.5'; it brings hypothesis along).
"""Fuzz the Fornace REST API from the OpenAPI schema FastAPI generates.

By default the app is built in this process on a temporary SQLite database
(``--db URL`` for any other database) with a publisher that only records the
tasks, so no broker is needed; ``--base-url URL`` fuzzes a running server
instead.

Before fuzzing, realistic state is seeded: environments with an open
configuration session holding valid services, a deployed one (with a
finished deployment and its reports, in process), one being deployed, an
empty one and one of another tenant.  A schemathesis ``flatmap_case`` hook
puts those ids into the generated cases (path parameters, the
``X-Configuration-Session`` header, service paths below ``/services``,
realistic service bodies), so the services tree, sessions and deploy are
really reached instead of answering 404.  A group of seeded state that a
request changed is read back (it must still be readable) and seeded anew.

Every operation gets ``--max-examples`` generated cases per generation mode
(positive and negative) and these checks: no 5xx and no crash ever
(``not_a_server_error``), every 4xx is JSON with an ``error`` object, 2xx
status codes, content types and bodies conform to the schema, error codes are
ones the API is known to use, and no seeded password comes back in clear.
Then hand-made nasty bodies outside the schema (malformed JSON, deep
nesting, huge strings near the body limit, wrong content types, NUL bytes,
non-UTF-8 bytes, 1e999, arrays for objects, ...) go to every route with a
body, and nesting is built up by sub-path PUTs.

Prints per-operation counts and ``fuzz: N operations, M requests, K
failures``; exits 1 if anything failed.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent

SCHEMATHESIS_PINNED = "4.32.5"

TENANT, USER = "t1", "u1"                # the seeded default tenant/user (noauth)
OTHER_TENANT, OTHER_USER = "t2", "u2"    # owner of the "foreign" environment
STRANGER = "u9"                           # same tenant, another user
KNOWN_ERRORS = {400, 401, 403, 404, 405, 409, 413, 415}
SECRETS = ("P@ssw0rd-web", "Adm1n!Secret", "R3cov3ry!Pw", "F0reign!Pw")
# ids and names no seeded object has, but that have broken databases: NUL (PostgreSQL
# text refuses it), longer than the String(64) id columns, non-ASCII, path-like
TRICKY = ("a\x00b", "\x00", "x" * 64, "x" * 65, "x" * 300, "\u00e9" * 40, "..", "%", "0",
          "-1", "null", "a/b", "\u2028")


# -- reporting -----------------------------------------------------------------

@dataclass
class OpStats:
    requests: int = 0
    statuses: Counter = field(default_factory=Counter)
    failures: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self, label: str) -> str:
        classes = Counter()
        for status, count in self.statuses.items():
            classes[f"{status // 100}xx" if isinstance(status, int) else status] += count
        detail = " ".join(f"{k}={classes[k]}" for k in sorted(classes))
        notes = f"  ({'; '.join(self.notes)})" if self.notes else ""
        return (f"  {label:<62} {self.requests:6d} req  {detail:<30} "
                f"failures={self.failures}{notes}")


@dataclass
class Failure:
    where: str
    title: str
    message: str
    reproduce: str
    count: int = 1


class Report:
    def __init__(self, show: int) -> None:
        self.stats: dict[str, OpStats] = defaultdict(OpStats)
        self.failures: dict[tuple, Failure] = {}
        self.show = show

    def request(self, label: str, status: int | str) -> None:
        stats = self.stats[label]
        stats.requests += 1
        stats.statuses[status] += 1

    def fail(self, label: str, title: str, message: str, reproduce: str) -> None:
        self.stats[label].failures += 1
        key = (label, title, _signature(message))
        if key in self.failures:
            self.failures[key].count += 1
            return
        self.failures[key] = Failure(label, title, message, reproduce)
        print(f"  FAIL {label}: {title}: {_first_line(message)}", flush=True)

    @property
    def total_requests(self) -> int:
        return sum(s.requests for s in self.stats.values())


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:200] if lines else ""


def _signature(message: str) -> str:
    """Failures that differ only in ids and numbers are one failure."""
    text = re.sub(r"[0-9a-f]{32}", "<id>", message)
    return re.sub(r"\d+", "<n>", text)[:300]


# -- where requests go ---------------------------------------------------------

class Target:
    """The API under test: in process (app + store) or a running server."""

    def __init__(self, args: argparse.Namespace) -> None:
        import requests

        self.extra_headers = dict(h.split(":", 1) for h in args.header)
        self.extra_headers = {k.strip(): v.strip() for k, v in self.extra_headers.items()}
        self.body_limit = args.body_limit
        self.store = None
        self.app = None
        self.tmp = None
        if args.base_url:
            self.base_url = args.base_url.rstrip("/")
            self.client = requests.Session()
            self.description = f"server at {self.base_url}"
            return
        from fornace.api.app import create_app
        from fornace.api.auth import NoAuth
        from fornace.api.hosts import allowed_hosts
        from fornace.api.packages.store import Packages
        from fornace.conductor.packages.check import package_checker
        from fornace.common.db.engine import make_engine, session_factory, upgrade
        from fornace.api.stores.store import Store
        from schemathesis.python import asgi

        url = args.db
        if not url:
            self.tmp = tempfile.TemporaryDirectory(prefix="fornace-fuzz-")
            url = f"sqlite:///{self.tmp.name}/fuzz.sqlite"
        upgrade(url)
        self.published: list[tuple[dict, str]] = []
        self.store = Store(session_factory(make_engine(url)),
                           lambda body, message_id: self.published.append((body, message_id)))
        # the in-process clients send Host: testserver (a name of this tool's app only)
        # with the package checker, as `fornace api` has: uploads are fuzzed for real
        self.app = create_app(self.store, NoAuth(TENANT, USER), self.body_limit,
                              allowed_hosts=allowed_hosts(["testserver"]),
                              packages=Packages(self.store.sessions, check=package_checker()))
        self.client = asgi.get_client(self.app)
        self.base_url = "http://testserver"
        self.description = f"in-process app on {url.split('@')[-1]}"

    def schema(self) -> Any:
        import schemathesis

        if self.app is not None:
            return schemathesis.openapi.from_asgi("/openapi.json", self.app)
        return schemathesis.openapi.from_url(f"{self.base_url}/openapi.json",
                                             headers=self.extra_headers)

    def send(self, method: str, path: str, *, headers: dict | None = None,
             data: Any = None, json_body: Any = None, content_type: str | None = None) -> Any:
        """One raw request; returns the requests.Response (raises on a crash)."""
        sent = {**self.extra_headers, **(headers or {})}
        if content_type is not None:
            sent["Content-Type"] = content_type
        if json_body is not None:
            data = json.dumps(json_body).encode()
            sent.setdefault("Content-Type", "application/json")
        return self.client.request(method, self.base_url + path, headers=sent, data=data,
                                   timeout=60)

    def finish(self, env_id: str, reports: Iterable[tuple[str, str, str]]) -> bool:
        """Complete the running deployment of ``env_id`` as the conductor would."""
        if self.store is None:
            return False
        from fornace.common import contract

        for body, message_id in reversed(self.published):
            if body.get("id") == env_id and not body.get("deleted"):
                model = {k: v for k, v in body.items() if k not in ("token", "tenant_id")}
                for index, (level, entity_id, text) in enumerate(reports):
                    self.store.reports.add(contract.report_body(
                        entity_id, "unit", text, level, env_id), f"{message_id}-r{index}")
                self.store.results.apply(contract.result_body(model), message_id)
                return True
        return False


# -- seeded state --------------------------------------------------------------

def web_server(name: str = "frontend", password: str = SECRETS[0], **extra: Any) -> dict:
    return {"name": name, "type": "webServer", "adminPassword": password,
            "domain": "acme.loc", "units": [{"location": "west-dc"}, {}], **extra}


def active_directory() -> dict:
    return {"name": "ad", "type": "activeDirectory", "domain": "acme.loc",
            "adminPassword": SECRETS[1],
            "units": [{"isMaster": True, "recoveryPassword": SECRETS[2]},
                      {"isMaster": False, "recoveryPassword": SECRETS[2]}]}


@dataclass
class Group:
    """One seeded environment and what hangs on it."""

    name: str
    env_id: str = ""
    tenant: str = TENANT
    user: str = USER
    sessions: dict[str, str] = field(default_factory=dict)   # role -> id (first = main)
    services: list[dict] = field(default_factory=list)
    deployments: list[str] = field(default_factory=list)

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Tenant-Id": self.tenant, "X-User-Id": self.user}


class SeedError(RuntimeError):
    pass


class Seed:
    """Builds the seeded groups over HTTP and rebuilds a group a request changed."""

    NAMES = ("open", "deployed", "busy", "empty", "foreign")

    def __init__(self, target: Target) -> None:
        self.target = target
        self.groups: dict[str, Group] = {}
        self.rebuilds = 0

    def build_all(self) -> None:
        for name in self.NAMES:
            self.rebuild(name)
        self.rebuilds = 0

    # helpers
    def _call(self, group: Group, method: str, path: str, body: Any = None,
              headers: dict | None = None, user: str | None = None) -> Any:
        sent = {**group.headers, **(headers or {})}
        if user:
            sent["X-User-Id"] = user
        response = self.target.send(method, path, headers=sent, json_body=body)
        if response.status_code != 200:
            raise SeedError(f"seeding {group.name}: {method} {path} -> "
                            f"{response.status_code} {response.text[:300]}")
        return response.json() if response.content else None

    def _env(self, group: Group) -> str:
        env = self._call(group, "POST", "/environments", {"name": f"fuzz-{group.name}"})
        group.env_id = env["id"]
        return env["id"]

    def _session(self, group: Group, role: str, user: str | None = None) -> str:
        session = self._call(group, "POST", f"/environments/{group.env_id}/configure",
                             user=user)
        group.sessions[role] = session["id"]
        return session["id"]

    def _service(self, group: Group, session_id: str, body: dict) -> dict:
        service = self._call(group, "POST", f"/environments/{group.env_id}/services",
                             body, {"X-Configuration-Session": session_id})
        group.services.append(service)
        return service

    def _deploy(self, group: Group, session_id: str) -> None:
        self._call(group, "POST",
                   f"/environments/{group.env_id}/sessions/{session_id}/deploy")
        deployments = self._call(group, "GET", f"/environments/{group.env_id}/deployments")
        group.deployments = [d["id"] for d in deployments["deployments"]]

    def rebuild(self, name: str) -> None:
        old = self.groups.get(name)
        if old is not None and old.env_id:  # forget the old one (no task is sent)
            self.target.send("DELETE", f"/environments/{old.env_id}?abandon=true",
                             headers=old.headers)
        group = Group(name)
        if name == "foreign":
            group.tenant, group.user = OTHER_TENANT, OTHER_USER
        self._env(group)
        if name in ("open", "foreign"):
            main = self._session(group, name)
            password = SECRETS[3] if name == "foreign" else SECRETS[0]
            self._service(group, main, web_server(password=password))
            if name == "open":
                self._service(group, main, active_directory())
                self._session(group, "stranger", user=STRANGER)
        elif name == "deployed":
            stale = self._session(group, "stale")
            done = self._session(group, "deployed")
            group.sessions = {"deployed": done, "stale": stale}
            service = self._service(group, done, web_server("site"))
            self._deploy(group, done)
            units = [u["id"] for u in service["units"]]
            finished = self.target.finish(group.env_id, [
                ("info", units[0], "unit created"), ("warning", units[1], "slow agent"),
                ("info", service["id"], "service deployed")])
            if finished:  # a fresh open session on the deployed version
                fresh = self._session(group, "fresh")
                group.sessions = {"fresh": fresh, "deployed": done, "stale": stale}
        elif name == "busy":
            session = self._session(group, "deploying")
            self._service(group, session, web_server("busy"))
            self._deploy(group, session)
        self.groups[name] = group
        self.rebuilds += 1

    # what the hook draws from
    def group(self, name: str) -> Group:
        return self.groups[name]

    def owner_of(self, url_path: str) -> list[str]:
        return [name for name, group in self.groups.items()
                if group.env_id and group.env_id in url_path]

    def service_paths(self, group: Group) -> list[str]:
        services = group.services or self.groups["open"].services
        paths = ["", "/", "/0", "/0/units", "/0/units/1", "/9"]
        for service in services:
            sid = service["id"]
            units = service.get("units") or []
            paths += [f"/{sid}", f"/{sid}/", f"/{sid}/units", f"/{sid}/units/0",
                      f"/{sid}/units/1", f"/{sid}/units/0/location", f"/{sid}/units/0/name",
                      f"/{sid}/name", f"/{sid}/adminPassword", f"/{sid}/domain",
                      f"/{sid}/osImage", f"/{sid}/dependsOn", f"/{sid}/type",
                      f"/{sid}/nosuchfield", f"/{sid}/units/7", f"/{sid}/name/deeper"]
            paths += [f"/{sid}/units/{u['id']}" for u in units if isinstance(u, dict)]
        return paths


# -- the hook: seeded values in generated cases -----------------------------------

def install_hooks(schema: Any, seed: Seed, remote: bool) -> None:
    from hypothesis import strategies as st

    # header values: no surrounding blanks (the client refuses them), and no NUL to a
    # server (its HTTP parser answers before the app does)
    header_tricky = [v for v in TRICKY if v == v.strip() and "/" not in v
                     and not (remote and "\x00" in v)]

    group_names = ["open"] * 5 + ["deployed"] * 2 + ["busy", "empty", "foreign"]
    json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                          st.text(max_size=20))
    any_json = st.recursive(json_leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)),
        max_leaves=8)
    field_names = st.sampled_from(["name", "type", "domain", "adminPassword", "units", "id",
                                   "osImage", "dependsOn", "unitNamingPattern", "flavor",
                                   "keyPair", "uri", "availabilityZone", "extra"])
    header_text = st.one_of(st.sampled_from(header_tricky), st.text(st.characters(
        min_codepoint=0x21, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=100))
    types = st.sampled_from(["webServer", "aspNetApp", "webServerFarm", "msSqlServer",
                             "activeDirectory", "linuxWebServer", "nope"])

    @st.composite
    def service(draw: Callable) -> dict:
        """A valid webServer create spec most of the time, with one or two faults else."""
        body = web_server(draw(st.text(min_size=1, max_size=12)),
                          password=draw(st.sampled_from(["n3w-Passw0rd", "***", ""])))
        if draw(st.integers(0, 9)) < 2:
            body["type"] = draw(types)
        if draw(st.integers(0, 9)) < 3:
            for _ in range(draw(st.integers(1, 2))):
                body[draw(field_names)] = draw(any_json)
        if draw(st.integers(0, 9)) < 2:
            body.pop(draw(st.sampled_from(sorted(body))), None)
        return body

    @st.composite
    def unit(draw: Callable) -> dict:
        return draw(st.fixed_dictionaries({}, optional={
            "location": st.text(max_size=8), "name": st.text(max_size=8),
            "isMaster": st.booleans(), "address": json_leaf, "id": st.text(max_size=8)}))

    @st.composite
    def existing(draw: Callable, group: Group) -> Any:
        """The group's stored services (masked, as a GUI would PUT them back), edited."""
        services = json.loads(json.dumps(group.services or seed.groups["open"].services))
        if services and draw(st.booleans()):
            victim = draw(st.sampled_from(services))
            victim[draw(field_names)] = draw(any_json)
        return services if draw(st.booleans()) else draw(st.sampled_from(services))

    def service_body(method: str, path: str, group: Group) -> Any:
        """Bodies that fit where they go most of the time, anything else sometimes."""
        segments = [part for part in path.split("/") if part]
        anything = st.one_of(service(), st.lists(service(), max_size=2), unit(),
                             st.lists(unit(), max_size=2), existing(group), any_json)
        if not segments:
            fitting = service() if method == "POST" else st.one_of(
                st.lists(service(), max_size=2), existing(group))
        elif len(segments) == 1:
            fitting = st.one_of(service(), existing(group))
        elif segments[-1] == "units":
            fitting = st.one_of(unit(), st.lists(unit(), max_size=2))
        elif len(segments) == 3 and segments[1] == "units":
            fitting = unit()
        else:
            fitting = st.one_of(st.text(max_size=20), json_leaf, any_json)
        return st.integers(0, 9).flatmap(lambda n: fitting if n < 8 else anything)

    def pick(draw: Callable, mapping: dict[str, str], generated: Any) -> Any:
        """A seeded id (mostly the first, the 'main' one), a tricky one, or the generated one."""
        choice = draw(st.integers(0, 19))
        if choice == 19:
            return draw(st.sampled_from(TRICKY))
        if not mapping or choice >= 17:
            return generated
        values = list(mapping.values())
        return values[0] if draw(st.booleans()) else draw(st.sampled_from(values))

    @st.composite
    def seeded(draw: Callable, case: Any) -> Any:
        operation = case.operation
        # read before any change: schemathesis re-classifies an edited case (an empty
        # service path is "negative" to it)
        positive = case.meta is None or case.meta.generation.mode.is_positive
        params = dict(case.path_parameters or {})
        group = seed.group(draw(st.sampled_from(group_names)))
        if "env_id" in params:
            params["env_id"] = quote(pick(draw, {group.name: group.env_id},
                                          params["env_id"]), safe="")
        if "session_id" in params:
            own = draw(st.integers(0, 9)) < 8
            pool = group.sessions if own else seed.group(
                draw(st.sampled_from(group_names))).sessions
            params["session_id"] = quote(pick(draw, pool, params["session_id"]), safe="")
        if "deployment_id" in params:
            pool = {d: d for d in group.deployments} or {
                d: d for d in seed.groups["deployed"].deployments}
            params["deployment_id"] = quote(pick(draw, pool, params["deployment_id"]), safe="")
        raw_path = None
        if "path" in params and draw(st.integers(0, 9)) < 8:
            raw_path = draw(st.sampled_from(seed.service_paths(group)))
            params["path"] = quote(raw_path, safe="/")
        case.path_parameters = params

        headers = dict(case.headers or {})
        if operation.get_parameter("X-Configuration-Session", "header") is not None:
            choice = draw(st.integers(0, 9))
            if choice < 8:
                own = choice < 7
                pool = group.sessions if own else seed.group(
                    draw(st.sampled_from(group_names))).sessions
                value = pick(draw, pool, "")
                if value in header_tricky or value in pool.values():
                    headers["X-Configuration-Session"] = value
            elif choice == 8:
                headers.pop("X-Configuration-Session", None)
        who = draw(st.integers(0, 19))
        if group.tenant != TENANT and who < 17:
            headers.update(group.headers)
        elif who == 17:  # noauth takes any tenant and user the client names
            headers[draw(st.sampled_from(["X-Tenant-Id", "X-User-Id"]))] = draw(header_text)
        elif who == 18:
            headers.update({"X-Tenant-Id": OTHER_TENANT, "X-User-Id": OTHER_USER})
        elif who == 19:
            headers["X-User-Id"] = STRANGER
        case.headers = headers

        if "deployment_id" in params and draw(st.booleans()):
            ids = [s["id"] for s in group.services] + ["nope"]
            case.query = {**(case.query or {}),
                          "service_id": draw(st.lists(st.sampled_from(ids), max_size=2))}
        method = operation.method.upper()
        if raw_path is not None and positive and method in ("POST", "PUT") \
                and draw(st.integers(0, 9)) < 7:
            case.body = draw(service_body(method, raw_path, group))
        return case

    def flatmap_case(context: Any, case: Any) -> Any:
        return seeded(case)

    schema.hook(flatmap_case)


# -- checks ----------------------------------------------------------------------

def error_is_json(ctx: Any, response: Any, case: Any) -> None:
    """Every 4xx/5xx is ``{"error": {"code": status, "title": str, "message": str}}``."""
    if response.status_code < 400:
        return None
    assert_error_body(response.status_code, _content_type(response.headers), response.content)
    return None


def assert_error_body(status: int, content_type: str, content: bytes) -> None:
    assert content_type.split(";")[0].strip() == "application/json", \
        f"{status} error with content type {content_type!r}: {content[:200]!r}"
    try:
        body = json.loads(content)
    except ValueError as exc:
        raise AssertionError(f"{status} error body is not JSON ({exc}): {content[:200]!r}")
    error = body.get("error") if isinstance(body, dict) else None
    assert isinstance(error, dict), f"{status} error body has no 'error' object: {body!r:.300}"
    assert error.get("code") == status, f"error code {error.get('code')!r} != status {status}"
    assert isinstance(error.get("title"), str) and isinstance(error.get("message"), str), \
        f"error object needs string title and message: {error!r:.300}"


def known_status(ctx: Any, response: Any, case: Any) -> None:
    """2xx must be documented; errors must be ones the API uses (never 422, never 5xx)."""
    status = response.status_code
    if 200 <= status < 300:
        from schemathesis.specs.openapi.checks import status_code_conformance
        return status_code_conformance(ctx, response, case)
    assert status in KNOWN_ERRORS or status >= 500, \
        f"status {status} is neither documented nor one of the API's errors {sorted(KNOWN_ERRORS)}"
    return None


def success_conforms(ctx: Any, response: Any, case: Any) -> None:
    """A 2xx with a body has the documented content type and matches the schema."""
    if not 200 <= response.status_code < 300 or not response.content:
        return None
    from schemathesis.specs.openapi.checks import (content_type_conformance,
                                                   response_schema_conformance)
    content_type_conformance(ctx, response, case)
    return response_schema_conformance(ctx, response, case)


def no_secret_leak(ctx: Any, response: Any, case: Any) -> None:
    """Seeded passwords never come back in clear."""
    text = response.content.decode("utf-8", "replace")
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"response shows seeded secret(s) {leaked}"


def _content_type(headers: Any) -> str:
    value = headers.get("content-type") or headers.get("Content-Type") or ""
    return value[0] if isinstance(value, list) else (value or "")


# -- the schema-driven phase ---------------------------------------------------------

class Fuzzer:
    def __init__(self, target: Target, seed: Seed, report: Report, args: argparse.Namespace):
        self.target = target
        self.seed = seed
        self.report = report
        self.args = args
        from schemathesis.checks import not_a_server_error

        self.checks = [not_a_server_error, error_is_json, known_status, success_conforms,
                       no_secret_leak]

    def after_change(self, label: str, method: str, url_path: str, status: int | None,
                     reproduce: str) -> None:
        """A request that (may have) changed seeded state: read it back, seed it anew.

        ``status`` None is a crash: what it left behind must be readable too.
        """
        if method == "GET" or (status is not None and status >= 400):
            return
        for name in self.seed.owner_of(url_path):
            group = self.seed.group(name)
            reads = [f"/environments/{group.env_id}", f"/environments/{group.env_id}/services",
                     f"/environments/{group.env_id}/lastStatus", "/environments",
                     f"/environments/{group.env_id}/deployments"]
            for role, session_id in group.sessions.items():
                reads.append((f"/environments/{group.env_id}/services", session_id))
            for read in reads:
                path, session = read if isinstance(read, tuple) else (read, None)
                headers = dict(group.headers)
                if session:
                    headers["X-Configuration-Session"] = session
                self.check_raw(f"{label} (read back)", "GET", path, headers=headers,
                               reproduce=f"after: {reproduce}")
            self.seed.rebuild(name)

    def check_raw(self, label: str, method: str, path: str, *, reproduce: str,
                  **kwargs: Any) -> Any:
        """Send one raw request and check it (no 5xx, no crash, JSON errors)."""
        try:
            response = self.target.send(method, path, **kwargs)
        except Exception as exc:
            self.report.request(label, "crash")
            self.report.fail(label, "crash", _crash_text(exc), reproduce)
            return None
        self.report.request(label, response.status_code)
        status = response.status_code
        if status >= 500:
            self.report.fail(label, f"server error {status}", response.text[:500], reproduce)
        elif status >= 400:
            try:
                assert_error_body(status, response.headers.get("content-type", ""),
                                  response.content)
            except AssertionError as exc:
                self.report.fail(label, "error is not a JSON error object", str(exc), reproduce)
            if status not in KNOWN_ERRORS:
                self.report.fail(label, "unexpected status", f"status {status}", reproduce)
        elif response.content:
            try:
                json.loads(response.content, parse_constant=_reject_constant)
            except ValueError as exc:
                self.report.fail(label, "2xx body is not strict JSON", str(exc)[:300],
                                 reproduce)
        return response

    def run_case(self, label: str, case: Any) -> None:
        from schemathesis.core.failures import FailureGroup

        stats_label = label
        try:
            curl = case.as_curl_command()
        except Exception:  # pragma: no cover - curl of odd cases
            curl = repr(case)
        url_path = case.formatted_path
        try:
            response = case.call(headers=self.target.extra_headers or None, timeout=60,
                                 **({"base_url": self.target.base_url}
                                    if self.target.app is None else {}))
        except Exception as exc:
            self.report.request(stats_label, "crash")
            self.report.fail(stats_label, "crash", _crash_text(exc), curl)
            self.after_change(stats_label, case.method.upper(), url_path, None, curl)
            return
        self.report.request(stats_label, response.status_code)
        try:
            case.validate_response(response, checks=self.checks)
        except FailureGroup as group:
            for failure in group.exceptions:
                self.report.fail(stats_label, failure.title, failure.message or "", curl)
        except AssertionError as exc:  # pragma: no cover - defensive
            self.report.fail(stats_label, "check", str(exc), curl)
        self.after_change(stats_label, case.method.upper(), url_path, response.status_code,
                          curl)

    def run_operation(self, operation: Any, mode: Any) -> None:
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis.errors import Unsatisfiable

        label = operation.label
        stats = self.report.stats[label]
        before = stats.requests
        strategy = operation.as_strategy(generation_mode=mode)

        @settings(max_examples=self.args.max_examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate],
                  derandomize=self.args.seed is None, print_blob=False)
        @given(case=strategy)
        def fuzz(case: Any) -> None:
            self.run_case(label, case)

        if self.args.seed is not None:
            from hypothesis import seed as hypothesis_seed
            fuzz = hypothesis_seed(self.args.seed)(fuzz)
        try:
            fuzz()
        except Unsatisfiable:
            pass
        if stats.requests == before:
            stats.notes.append(f"{mode.value}: no cases (cannot be generated)")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _crash_text(exc: BaseException) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    ours = [line for line in lines if "/api/" in line or "/conductor/" in line]
    return (f"{type(exc).__name__}: {exc}"[:500] + "\n" + "".join(ours[-6:]))


# -- the nasty bodies ----------------------------------------------------------------

def nasty_bodies(limit: int) -> list[tuple[str, Any, str | None, set[int] | None]]:
    """(name, body bytes or a chunk generator factory, content type, statuses expected
    or None for any that is not 5xx), all outside the schema."""
    def nest(depth: int, open_: bytes, close: bytes, leaf: bytes = b"1") -> bytes:
        return open_ * depth + leaf + close * depth

    def chunks() -> Iterable[bytes]:
        yield b'{"name": "'
        for _ in range(limit // 65536 + 2):
            yield b"a" * 65536
        yield b'"}'

    def service_with(extra: bytes) -> bytes:
        return json.dumps(web_server()).encode()[:-1] + b", " + extra + b"}"

    bad = {400}
    huge_fit = b'{"name": "' + b"x" * (limit - 64) + b'"}'
    huge_service = json.dumps(web_server(name="big", uri="u" * (limit - 300))).encode()
    js = "application/json"
    return [
        ("malformed: truncated", b'{"name": "x",', js, bad),
        ("malformed: bare words", b"{name: x}", js, bad),
        ("malformed: trailing garbage", b'{"name": "x"} junk', js, bad),
        ("malformed: single quotes", b"{'name': 'x'}", js, bad),
        ("malformed: lone brace", b"}", js, bad),
        ("malformed: empty body", b"", js, bad),
        ("malformed: whitespace", b" \r\n\t ", js, bad),
        ("nested arrays x10000", nest(10000, b"[", b"]"), js, bad),
        ("nested objects x10000", nest(10000, b'{"a":', b"}"), js, bad),
        ("nested arrays x900", nest(900, b"[", b"]"), js, None),
        ("nested objects x900", nest(900, b'{"a":', b"}"), js, None),
        ("nested objects x400 as name", b'{"name":' + nest(400, b'{"a":', b"}") + b"}", js,
         None),
        ("nested arrays x900 in a service", service_with(b'"notes": ' + nest(900, b"[", b"]")),
         js, None),
        ("huge string just under the limit", huge_fit, js, None),
        ("huge service just under the limit", huge_service, js, None),
        ("huge string over the limit", huge_fit + b" " * 128, js, {413}),
        ("huge chunked body over the limit (no length)", chunks, js, {413}),
        ("text/plain JSON object", b'{"name": "x"}', "text/plain", None),
        ("text/plain service", json.dumps(web_server()).encode(), "text/plain", None),
        ("text/plain JSON string", b'"just text"', "text/plain", None),
        ("form encoded", b"name=x&type=webServer", "application/x-www-form-urlencoded", None),
        ("multipart", b'--b\r\nContent-Disposition: form-data; name="name"\r\n\r\nx\r\n--b--\r\n',
         "multipart/form-data; boundary=b", None),
        ("xml", b"<environment><name>x</name></environment>", "application/xml", None),
        ("octet-stream", b"\x00\x01\x02\xff", "application/octet-stream", None),
        ("no content type", b'{"name": "x"}', None, None),
        ("garbage content type", b'{"name": "x"}', "application/json; charset=\x7f;;==", None),
        ("JSON in latin-1", '{"name": "caf\xe9"}'.encode("latin-1"),
         "application/json; charset=latin-1", None),
        ("vendor +json", b'{"name": "x"}', "application/vnd.fornace+json", None),
        ("raw NUL in a JSON string", b'{"name": "a\x00b"}', js, bad),
        ("raw NUL bytes", b"\x00" * 16, js, bad),
        ("escaped NUL in a value", b'{"name": "a\\u0000b"}', js, None),
        ("escaped NUL in a key", b'{"na\\u0000me": "x"}', js, None),
        ("escaped NUL in a service", json.dumps(web_server(name="a\x00b")).encode(), js, None),
        ("escaped NUL string", b'"\\u0000"', js, None),
        ("non-UTF-8 bytes", b'{"name": "\xff\xfe\xfd"}', js, bad),
        ("UTF-16 JSON", '{"name": "x"}'.encode("utf-16"), js, None),
        ("UTF-8 BOM", b'\xef\xbb\xbf{"name": "x"}', js, None),
        ("lone surrogate", b'{"name": "\\ud800"}', js, None),
        ("lone surrogate in a service", json.dumps(web_server(name="x\ud800")).encode(), js,
         None),
        ("lone surrogate string", b'"\\udfff"', js, None),
        ("1e999", b"1e999", js, None),
        ("-1e999 as name", b'{"name": -1e999}', js, None),
        ("1e999 in a service", service_with(b'"notes": 1e999'), js, None),
        ("NaN", b"NaN", js, None),
        ("Infinity in an object", b'{"name": "x", "notes": Infinity}', js, None),
        ("huge integer", b"1" + b"0" * 5000, js, None),
        ("huge integer in a service", service_with(b'"notes": ' + b"9" * 5000), js, None),
        ("big integer in a service", service_with(b'"notes": ' + b"9" * 400), js, None),
        ("array for an object", b"[]", js, None),
        ("array of objects", b'[{"name": "x"}]', js, None),
        ("array of services", json.dumps([web_server()]).encode(), js, None),
        ("null", b"null", js, None),
        ("true", b"true", js, None),
        ("number", b"42", js, None),
        ("string", b'"x"', js, None),
        ("duplicate keys", b'{"name": "a", "name": "b"}', js, None),
        ("long key", b'{"' + b"k" * 100000 + b'": 1}', js, None),
        ("many keys", b"{" + b",".join(b'"k%d": %d' % (i, i) for i in range(20000)) + b"}",
         js, None),
    ]


def body_routes(seed: Seed, prefixes: Iterable[str]) -> list[tuple[str, str, Callable, Callable]]:
    """(label, method, url builder, headers builder) for every route with a body
    (the seeded ids change when a group is seeded anew: built at each use)."""
    def open_session() -> dict[str, str]:
        return {"X-Configuration-Session": seed.group("open").sessions["open"]}

    routes = []
    for prefix in prefixes:
        routes.append((f"POST {prefix}/environments", "POST", lambda p=prefix: f"{p}/environments",
                       lambda: {}))
        routes.append((f"PUT {prefix}/environments/{{env_id}}", "PUT",
                       lambda p=prefix: f"{p}/environments/{seed.group('open').env_id}",
                       lambda: {}))
        for method in ("POST", "PUT"):
            for sub in ("", "/{service}", "/{service}/units", "/{service}/name",
                        "/{service}/notes", "/{service}/units/0"):
                def url(p: str = prefix, sub: str = sub) -> str:
                    group = seed.group("open")
                    service = group.services[0]["id"]
                    return (f"{p}/environments/{group.env_id}/services"
                            + sub.replace("{service}", service))

                routes.append((f"{method} {prefix}/environments/{{env_id}}/services{sub}",
                               method, url, open_session))
    return routes


def run_nasty(fuzzer: Fuzzer, prefixes: Iterable[str]) -> int:
    bodies = nasty_bodies(fuzzer.target.body_limit)
    routes = body_routes(fuzzer.seed, prefixes)
    for label, method, url, headers in routes:
        for name, body, content_type, expect in bodies:
            path = url()
            data = body() if callable(body) else body
            shown = (repr(body[:80]) + (f"... ({len(body)} bytes)" if len(body) > 80 else "")
                     if isinstance(body, bytes) else "<chunked>")
            reproduce = f"{method} {path} [{content_type}] body {name}: {shown}"
            response = fuzzer.check_raw(f"nasty {label}", method, path, headers=headers(),
                                        data=data, content_type=content_type,
                                        reproduce=reproduce)
            status = response.status_code if response is not None else None
            if expect and status is not None and status not in expect:
                fuzzer.report.fail(f"nasty {label}", f"expected {sorted(expect)}",
                                   f"got {status}: {response.text[:300]}", reproduce)
            fuzzer.after_change(f"nasty {label}", method, path, status, reproduce)
    for prefix in prefixes:
        deep_edits(fuzzer, prefix)
    return len(routes)


def deep_edits(fuzzer: Fuzzer, prefix: str, step: int = 40, rounds: int = 30) -> None:
    """Nesting built up by sub-path PUTs of shallow bodies; the session must stay usable."""
    group = fuzzer.seed.group("open")
    headers = {"X-Configuration-Session": group.sessions["open"]}
    base = f"{prefix}/environments/{group.env_id}/services"
    path = f"{base}/{group.services[0]['id']}/notes"
    value: Any = 1
    for _ in range(step):
        value = {"a": value}
    label = f"nasty PUT {prefix}/environments/{{env_id}}/services/... (nesting by edits)"
    for number in range(rounds):
        reproduce = (f"PUT {path[:120]}... with {step} nested objects, after {number} "
                     f"such PUTs one level deeper each")
        response = fuzzer.check_raw(label, "PUT", path, headers=headers, json_body=value,
                                    reproduce=reproduce)
        read = fuzzer.check_raw(label + " (read back)", "GET", base, headers=headers,
                                reproduce=f"GET after: {reproduce}")
        if response is None or response.status_code != 200 or read is None:
            break
        path += "/a" * step
    fuzzer.seed.rebuild("open")


# -- main --------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"Written against schemathesis=={SCHEMATHESIS_PINNED} "
               f"(pip install 'schemathesis=={SCHEMATHESIS_PINNED}').",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=100,
                        help="generated cases per operation and generation mode (default 100)")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--db", metavar="URL",
                        help="database URL for the in-process app (default: temporary SQLite)")
    target.add_argument("--base-url", metavar="URL",
                        help="fuzz a running server (noauth mode) instead of an in-process app")
    parser.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                        help="extra header on every request (e.g. X-Auth-Token:...)")
    parser.add_argument("--body-limit", type=int, default=1024 * 1024,
                        help="max_body_size of the app (in process) / of the server (bytes)")
    parser.add_argument("--operations", metavar="REGEX",
                        help="only operations whose label ('GET /environments') matches")
    parser.add_argument("--modes", default="positive,negative",
                        help="generation modes, comma-separated (default positive,negative)")
    parser.add_argument("--no-nasty", action="store_true", help="skip the hand-made bodies")
    parser.add_argument("--nasty-only", action="store_true", help="only the hand-made bodies")
    parser.add_argument("--seed", type=int, help="hypothesis seed (default: derandomized)")
    parser.add_argument("--show", type=int, default=20,
                        help="failures shown in full at the end (default 20)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log the app's errors")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.simplefilter("ignore")
    logging.basicConfig(level=logging.WARNING if args.verbose else logging.CRITICAL)
    import schemathesis

    if schemathesis.__version__ != SCHEMATHESIS_PINNED:
        print(f"note: schemathesis {schemathesis.__version__} installed, this script was "
              f"written against {SCHEMATHESIS_PINNED}", file=sys.stderr)
    started = time.monotonic()
    target = Target(args)
    report = Report(args.show)
    seed = Seed(target)
    seed.build_all()
    schema = target.schema()
    install_hooks(schema, seed, remote=target.app is None)
    fuzzer = Fuzzer(target, seed, report, args)
    print(f"fuzzing the {target.description} with schemathesis {schemathesis.__version__}, "
          f"{args.max_examples} examples per operation and mode", flush=True)

    operations = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if args.operations and not re.search(args.operations, operation.label):
            continue
        operations.append(operation)
    modes = [schemathesis.GenerationMode(m.strip()) for m in args.modes.split(",") if m.strip()]
    count = 0
    if not args.nasty_only:
        for operation in operations:
            for mode in modes:
                fuzzer.run_operation(operation, mode)
            count += 1
            print(report.stats[operation.label].line(operation.label), flush=True)
    if not args.no_nasty:
        prefixes = sorted({"/v1" if op.path.startswith("/v1/") else "" for op in operations}) \
            if args.operations else ["", "/v1"]
        before = set(report.stats)
        routes = run_nasty(fuzzer, prefixes)
        for label in sorted(set(report.stats) - before):
            print(report.stats[label].line(label), flush=True)
        if args.nasty_only:
            count += routes

    failures = sorted(report.failures.values(), key=lambda f: (f.where, f.title))
    for failure in failures[:args.show]:
        print(f"\n--- {failure.where}: {failure.title} (x{failure.count})\n"
              f"{failure.message.strip()}\nreproduce: {failure.reproduce}")
    if len(failures) > args.show:
        print(f"\n... and {len(failures) - args.show} more failures")
    elapsed = time.monotonic() - started
    print(f"\nseeded groups rebuilt {seed.rebuilds} times; {elapsed:.1f}s")
    print(f"fuzz: {count} operations, {report.total_requests} requests, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
