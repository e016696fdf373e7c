#!/usr/bin/env python3
"""Hostile inputs, tried as an attacker and a careless operator would (not a test).

Groups of tries, each judged from the outside:

* operator inputs -- workflow XML, filters, templates, ``--model`` JSON and
  workflows that grow data -- given to ``fornace workflow check`` and
  ``fornace workflow simulate`` as subprocesses under a memory limit
  (``--memory``, 1 GiB) and a time limit (``--timeout``, 60 s).  A clean
  refusal: the command ends by itself within both limits with a non-zero
  status, prints no Python traceback, and its message says where (the
  file's name, or a JSON path for a model); a try that is harmless input
  (values with quotes in a filter, say) must instead end as its case says.
* the command line -- service files (too deep, a YAML alias bomb, not UTF-8,
  a folder), ``--set`` and ``--params`` values -- given to ``fornace service
  add`` and ``fornace action`` against that API: a clean refusal is a
  non-zero exit, no traceback, and a message naming the input.
* API requests -- cross-site ones (foreign ``Origin``/``Referer``,
  ``text/plain`` and form bodies, a malformed ``Content-Type``), another
  tenant's environments, oversized services, secrets in action parameters --
  sent to a ``fornace api`` process (SQLite, noauth).  A clean refusal: the
  status the case expects, a JSON ``error`` body, nothing changed, and no
  password or other tenant's data in the answer.
* ids and names (``names``): NUL and control characters in service and unit
  names, service and unit ids the message contract would refuse -- a 400
  naming the field.
* workflow packages (``packages``): a regex bomb as a type's ``pattern``
  (answered at once, another tenant's request not held), patterns no
  linear-time engine runs (refused at upload naming ``types.json:LINE``),
  package.json, types.json, schemas and workflow XML nested too deep (a 400
  naming the file), and another project's package name (one 409 that tells
  nothing of its versions; its private packages not found).
* secrets (``secrets``): a field a package's type declares ``writeOnly``
  never echoed by a validation error nor shown by the deployments, the
  environment, its services and jobs after a deployment.
* the dashboard (``dashboard``): forms posted with a token the client chose,
  ``Origin: null``, a foreign Origin or Referer, the login form alike (login
  CSRF), and a foreign ``Host`` (DNS rebinding) on the API and the dashboard.
* messages (``messages``): a tenant's deployment whose report cannot be
  stored (a NUL, on PostgreSQL) beside another tenant's: the other's reports
  all stored.
* the logs: no traceback in what the API and the conductor logged.

``--database`` and ``--broker`` run the API on PostgreSQL and RabbitMQ
(tests/system/test_probe_inputs.py does both runs).

Prints one line per try that was not clean (``-v``: every try), then::

    N tries: C clean, U not clean

and exits 1 when any try was not clean.

    python tools/probe_inputs.py
    python tools/probe_inputs.py --only operator -v
    python tools/probe_inputs.py --only packages --only dashboard \
        --database postgresql+psycopg://postgres@127.0.0.1/probe \
        --broker amqp://guest:guest@127.0.0.1:5672/probe --keep
"""
from __future__ import annotations

import argparse
import contextlib
import http.client
import http.cookies
import io
import itertools
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the tools beside this one
from ports import free_port  # noqa: E402

TRACEBACK = "Traceback (most recent call last)"
SECRET = "Probe-Secret-9431"


@dataclass
class Verdict:
    clean: bool
    detail: str


@dataclass
class Tally:
    verbose: bool = False
    tries: int = 0
    clean: int = 0
    failures: list[str] = field(default_factory=list)

    def record(self, group: str, name: str, verdict: Verdict) -> None:
        self.tries += 1
        self.clean += verdict.clean
        line = f"{'clean' if verdict.clean else 'NOT CLEAN'}  {group}: {name}: {verdict.detail}"
        if not verdict.clean:
            self.failures.append(line)
        if self.verbose or not verdict.clean:
            print(line, flush=True)


# ============================================================ operator inputs

WORKFLOW = """<?xml version="1.0"?>
<workflow>
{body}
</workflow>
"""
SITE_RULE = """    <rule id="probe" match="$.services[?(@.type == 'probeType')]">
{body}
    </rule>"""


def model(**service: object) -> dict:
    return {"id": "e1", "name": "probe", "services": [{
        "id": "s1", "name": "probe", "type": "probeType",
        "units": [{"id": "u1", "name": "probe_instance_0"}], **service}]}


def nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_model(depth: int) -> str:
    return json.dumps(model())[:-2] + ', "deep": ' + nested_json(depth) + "}]}"


@dataclass
class OperatorCase:
    """One catalog folder (workflow ``probe.xml``, templates) and a command on it."""

    name: str
    workflow: str | bytes | None = None    # probe.xml's content (None: a harmless one)
    command: str = "check"                 # check | simulate
    model: str | None = None               # --model text (simulate)
    templates: dict[str, str | bytes] = field(default_factory=dict)  # path -> content
    links: dict[str, str] = field(default_factory=dict)              # path -> target
    expect: str = "refused"                # refused | ok | warned
    where: str = "probe.xml"               # what the message must name


HARMLESS = WORKFLOW.format(body=SITE_RULE.format(body='        <set path="state.x">1</set>'))


def rule(body: str, match: str = "$.services[?(@.type == 'probeType')]") -> str:
    return WORKFLOW.format(body=f'    <rule id="probe" match="{match}">\n{body}\n    </rule>')


def operator_cases() -> list[OperatorCase]:
    cases: list[OperatorCase] = []
    add = cases.append
    # -- XML itself
    for name, text in [
        ("empty file", ""),
        ("not XML", "this is not xml"),
        ("binary garbage", "\x00\x01\x02\xff"),
        ("unclosed tag", "<workflow><rule id='a' match='$'>"),
        ("two roots", "<workflow/><workflow/>"),
        ("wrong root", "<flow/>"),
        ("unknown element", rule("        <launch-missiles/>")),
        ("unknown attribute value", rule('        <set path="">1</set>')),
        ("rule without match", WORKFLOW.format(body='    <rule id="x"><set path="a">1</set></rule>')),
        ("rule id with a slash", WORKFLOW.format(
            body='    <rule id="a/b" match="$"><set path="x">1</set></rule>')),
        ("deeply nested elements", WORKFLOW.format(body="<true>" * 5000 + "</true>" * 5000)),
        ("invalid UTF-8", b"<?xml version='1.0' encoding='utf-8'?><workflow>\xff\xfe</workflow>"),
    ]:
        add(OperatorCase(name, text))
    # -- DTDs and entities: ignored, but said
    for name, doctype in [
        ("XXE file entity", '<!DOCTYPE w [<!ENTITY x SYSTEM "file:///etc/passwd">]>'),
        ("XXE network entity", '<!DOCTYPE w [<!ENTITY x SYSTEM "http://127.0.0.1:1/x">]>'),
        ("external DTD", '<!DOCTYPE w SYSTEM "http://127.0.0.1:1/evil.dtd">'),
        ("billion laughs", '<!DOCTYPE w [<!ENTITY a "aaaaaaaaaa">' + "".join(
            f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(9))
         + "]>"),
        ("parameter entity", '<!DOCTYPE w [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]>'),
    ]:
        body = SITE_RULE.format(body='        <set path="state.x">&x;</set>'
                                if "x SYSTEM" in doctype else
                                '        <set path="state.x">&j;</set>'
                                if "laughs" in name else '        <set path="state.x">1</set>')
        add(OperatorCase(name, f'<?xml version="1.0"?>\n{doctype}\n<workflow>\n{body}\n</workflow>\n',
                         expect="warned"))
    # -- filters
    for name, match in [
        ("5000-digit integer in a filter", "$.services[?(@.port == " + "9" * 5000 + ")]"),
        ("deep parentheses", "$.services[?(" + "(" * 3000 + "@.a" + ")" * 3000 + ")]"),
        ("unterminated string", "$.services[?(@.a == 'x)]"),
        ("python in a filter", "$.services[?(__import__('os').system('id'))]"),
        ("dunder attribute", "$.services[?(@.__class__.__mro__)]"),
        ("lambda in a filter", "$.services[?(lambda: 1)]"),
        ("function call in a filter", "$.services[?(open('/etc/passwd'))]"),
        ("unbalanced brackets", "$.services[?(@.a == 1]"),
        ("empty filter", "$.services[?()]"),
        ("regex bomb", "$.services[?(@.name =~ /(a+)+$/)]"),
        ("bad JSONPath", "$..[[[[*"),
    ]:
        add(OperatorCase(name, rule('        <set path="state.x">1</set>',
                                    match=match.replace('"', "&quot;"))))
    # -- templates
    add(OperatorCase("template name with ..", rule(
        '        <update-cf-stack template="../../../etc/passwd"/>')))
    add(OperatorCase("absolute template name", rule(
        '        <update-cf-stack template="/etc/passwd"/>')))
    add(OperatorCase("template name with ~", rule(
        '        <update-cf-stack template="~root/x"/>')))
    add(OperatorCase("missing template", rule('        <update-cf-stack template="Nope"/>')))
    add(OperatorCase("symlink out of the catalog", rule(
        '        <update-cf-stack template="Linked"/>'),
        links={"templates/cf/Linked.template": "/etc/hostname"}, where="Linked"))
    add(OperatorCase("symlinked folder out of the catalog", rule(
        '        <update-cf-stack template="out/hostname"/>'),
        links={"templates/cf/out": "/etc"}, where="out"))
    for name, text in [("deeply nested template", nested_json(200_000)),
                       ("invalid template JSON", "{\"Resources\": "),
                       ("template that is a list", "[1, 2]"),
                       ("huge integer in a template", "{\"a\": " + "9" * 10000 + "}")]:
        add(OperatorCase(name, rule('        <update-cf-stack template="Bad"/>'),
                         command="simulate", model=json.dumps(model()),
                         templates={"templates/cf/Bad.template": text}, where="Bad"))
    # -- models
    for name, text in [("deeply nested model", deep_model(200_000)),
                       ("model that is not JSON", "{services: ["),
                       ("model that is a list", "[]"),
                       ("huge integer in the model", json.dumps(model())[:-2]
                        + ', "n": ' + "9" * 10000 + "}]}"),
                       ("model with NaN", json.dumps(model())[:-2] + ', "n": NaN}]}'),
                       ("services not a list", json.dumps({"id": "e1", "services": 5}))]:
        add(OperatorCase(name, HARMLESS, command="simulate", model=text, where="model"))
    # -- growth
    for name, body in [
        ("model nested into itself", '        <set path="state.copy"><select path="/"/></set>'),
        ("string doubled every round",
         '        <set path="state.s"><select path="state.s" default="xxxxxxxx"/>'
         '<select path="state.s" default="xxxxxxxx"/></set>'),
        ("list grown every round",
         '        <set path="state.n"><list><item><select path="state.n" default="0"/></item>'
         '<item><select path="state.n" default="0"/></item></list></set>'),
        ("counter that never settles",
         '        <set path="state.n"><select path="state.n" default="0"/>1</set>'),
    ]:
        # <unmute/>: the rule matches its service again next round (0.2's muting
        # would otherwise let it fire once)
        add(OperatorCase(name, rule(body + "\n        <unmute/>", match="$.services[*]"),
                         command="simulate", model=json.dumps(model()), where="probe"))
    # -- values are data: quotes, parentheses and operators in model values
    tricky = ["a' or '1' == '1", "x') or (@.type == 'probeType", "]) || true || ([",
              "\\' == \\'", "a\" or \"b", "@.type == 'probeType'"]
    for value in tricky:
        add(OperatorCase(f"filter value {value!r}", rule(
            '        <set path="state.matched"><true/></set>',
            match="$.services[?(@.domain == 'corp.example')]"), command="simulate",
            model=json.dumps(model(domain=value)), expect="ok-unmatched"))
    return cases


def limit_memory(megabytes: int) -> Callable[[], None]:
    def apply() -> None:
        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def run_operator(case: OperatorCase, root: Path, fornace: list[str], memory: int,
                 timeout: float) -> Verdict:
    folder = Path(tempfile.mkdtemp(dir=root))
    for sub in ("workflows", "templates/cf", "templates/agent"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    content = case.workflow if case.workflow is not None else HARMLESS
    (folder / "workflows" / "probe.xml").write_bytes(
        content if isinstance(content, bytes) else content.encode())
    for path, content in case.templates.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    for path, target in case.links.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, folder / path)
    if case.command == "check":
        argv = [*fornace, "workflow", "check", "--data", str(folder),
                str(folder / "workflows" / "probe.xml")]
    else:
        (folder / "model.json").write_text(case.model or json.dumps(model()))
        argv = [*fornace, "workflow", "simulate", "--data", str(folder), "--model",
                str(folder / "model.json"), "--json"]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, cwd=folder,
                              preexec_fn=limit_memory(memory))
    except subprocess.TimeoutExpired:
        return Verdict(False, f"still running after {timeout:g} s")
    took = time.monotonic() - started
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    size = len(done.stdout) + len(done.stderr)
    first = next((line for line in out.splitlines() if line.strip()), "")[:160]
    if done.returncode < 0:
        return Verdict(False, f"killed by signal {-done.returncode} after {took:.1f} s")
    if TRACEBACK in out or "MemoryError" in out or "RecursionError" in out:
        return Verdict(False, f"traceback: {out.strip().splitlines()[-1][:200]}")
    if size > 50 * 1024 * 1024:
        return Verdict(False, f"printed {size / 1e6:.0f} MB")
    if case.expect == "ok-unmatched":
        try:
            final = json.loads(done.stdout)
        except ValueError:
            return Verdict(False, f"exit {done.returncode}, no JSON: {first}")
        matched = [s for s in _final_services(final) if (s.get("state") or {}).get("matched")]
        ok = done.returncode == 0 and not matched
        return Verdict(ok, f"exit {done.returncode}, matched {len(matched)} (a value is data)")
    if case.expect == "warned":
        said = re.search(r"(?i)doctype|entit|dtd", out) is not None
        return Verdict(said and "root:" not in out,
                       f"exit {done.returncode}, {'says so' if said else 'SAYS NOTHING'}: "
                       f"{first}")
    if done.returncode == 0:
        return Verdict(False, f"accepted (exit 0): {first}")
    named = case.where in out or (case.where == "model" and ("$" in out or "model" in out))
    return Verdict(named, f"exit {done.returncode} in {took:.1f} s: {first}")


def _final_services(document: object) -> list[dict]:
    found = []
    model_ = document.get("model") if isinstance(document, dict) else None
    for service in (model_ or {}).get("services") or []:
        if isinstance(service, dict):
            found.append(service)
    return found


# ============================================================ API requests

@contextlib.contextmanager
def api_process(root: Path, fornace: list[str], database: str | None = None,
                broker: str | None = None) -> Iterator[int]:
    port = free_port()
    config = root / "api.conf"
    config.write_text(f"[api]\nstate_dir = {root / 'api-state'}\n"
                      f"[broker]\nurl = {broker or 'filesystem://' + str(root / 'broker')}\n"
                      f"[conductor]\ncloud_dir = {root / 'cloud'}\n"
                      + (f"[database]\nconnection = {database}\n" if database else ""))
    log = open(root / "api.log", "wb")
    # the API with a conductor and the local cloud: actions need a deployed environment
    process = subprocess.Popen([*fornace, "--config-file", str(config), "up", "--host",
                                "127.0.0.1", "--port", str(port)], stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"fornace up did not start: "
                                 f"{(root / 'api.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        process.kill()
        log.close()
        # local-cloud units outlive `fornace up` (a try that broke off left them)
        subprocess.run(["pkill", "-f", str(root / "cloud")], check=False)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> object:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class Api:
    def __init__(self, port: int) -> None:
        self.port = port

    def call(self, method: str, path: str, body: bytes | str | object | None = None,
             headers: dict[str, str] | None = None, tenant: str = "probe-a",
             prefix: str = "/v1") -> Answer:
        sent = {"X-Tenant-Id": tenant, **(headers or {})}
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            sent.setdefault("Content-Type", "application/json")
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, prefix + path, body=body, headers=sent)
            response = connection.getresponse()
            return Answer(response.status, dict(response.getheaders()), response.read())
        finally:
            connection.close()


def site(units: int = 1, **extra: object) -> dict:
    return {"name": "web", "type": "linuxWebServer", "unitNamingPattern": "web#",
            "osImage": {"name": "local", "type": "linux"}, "port": 8080,
            "adminPassword": SECRET, "units": [{} for _ in range(units)], **extra}


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def deploy_site(api: Api) -> str:
    """A deployed one-unit environment (local cloud) of tenant probe-a."""
    env_id = api.call("POST", "/environments", {"name": "probe-deployed"}).json()["id"]
    session = api.call("POST", f"/environments/{env_id}/configure").json()["id"]
    api.call("POST", f"/environments/{env_id}/services", site(port=free_port()),
             {"X-Configuration-Session": session})
    api.call("POST", f"/environments/{env_id}/sessions/{session}/deploy")
    wait_until(lambda: api.call("GET", f"/environments/{env_id}").json()["status"]
               not in ("deploying", "pending"), 120, "the deployment")
    return env_id


def delete_and_wait(api: Api, env_id: str, tenant: str = "probe-a") -> None:
    """Delete the environment (its local-cloud processes stop) and wait for it."""
    api.call("DELETE", f"/environments/{env_id}", tenant=tenant)
    wait_until(lambda: api.call("GET", f"/environments/{env_id}", tenant=tenant).status == 404,
               120, "the deletion")


def refused(answer: Answer, statuses: set[int]) -> Verdict:
    error = answer.json()
    is_error = isinstance(error, dict) and isinstance(error.get("error"), dict)
    leaks = SECRET.encode() in answer.body
    ok = answer.status in statuses and is_error and not leaks and TRACEBACK.encode() not in answer.body
    message = error["error"].get("message", "") if is_error else answer.body[:120]
    return Verdict(ok, f"{answer.status}{' LEAKS A SECRET' if leaks else ''}: {message!s:.140}")


def api_cases(api: Api) -> Iterator[tuple[str, Callable[[], Verdict]]]:
    env = api.call("POST", "/environments", {"name": "probe-env"}).json()
    assert isinstance(env, dict) and "id" in env, env
    env_id = env["id"]
    session = api.call("POST", f"/environments/{env_id}/configure").json()["id"]
    count_before = lambda: len(api.call("GET", "/environments").json()["environments"])  # noqa: E731
    known = count_before()

    def unchanged(verdict: Verdict) -> Verdict:
        now = count_before()
        if now != known:
            return Verdict(False, f"{verdict.detail}; environments {known} -> {now}")
        return verdict

    # -- cross-site requests
    foreign = {"Origin": "http://evil.example"}
    for name, method, path, body, headers, statuses in [
        ("foreign Origin creates", "POST", "/environments", {"name": "x"}, foreign, {403}),
        ("Origin null creates", "POST", "/environments", {"name": "x"}, {"Origin": "null"}, {403}),
        ("foreign Referer creates", "POST", "/environments", {"name": "x"},
         {"Referer": "http://evil.example/page"}, {403}),
        ("foreign Origin deletes", "DELETE", f"/environments/{env_id}", None, foreign, {403}),
        ("foreign Origin configures", "POST", f"/environments/{env_id}/configure", None,
         foreign, {403}),
        ("foreign Origin abandons", "POST", f"/environments/{env_id}/abandon", None, foreign,
         {403}),
        ("foreign Origin runs uninstall", "POST", f"/environments/{env_id}/actions/uninstall",
         None, foreign, {403}),
        ("text/plain JSON body", "POST", "/environments", '{"name": "x"}',
         {"Content-Type": "text/plain"}, {415}),
        ("form body", "POST", "/environments", "name=x",
         {"Content-Type": "application/x-www-form-urlencoded"}, {415}),
        ("multipart body", "POST", "/environments", "--b\r\n\r\n--b--",
         {"Content-Type": "multipart/form-data; boundary=b"}, {415}),
        ("empty text/plain uninstall", "POST", f"/environments/{env_id}/actions/uninstall", "",
         {"Content-Type": "text/plain"}, {415}),
        ("malformed Content-Type", "POST", "/environments", '{"name": "x"}',
         {"Content-Type": ";;;=/"}, {400, 415}),
        ("no Content-Type", "POST", "/environments", '{"name": "x"}', {}, {415}),
    ]:
        yield name, lambda m=method, p=path, b=body, h=headers, s=statuses: unchanged(
            refused(api.call(m, p, b, h), s))
    # -- odd bodies, ids and headers
    json_type = {"Content-Type": "application/json"}
    for name, method, path, body, headers, statuses in [
        ("deeply nested body", "POST", "/environments", '{"name": ' + nested_json(100_000) + "}",
         json_type, {400, 413}),
        ("body over the size limit", "POST", "/environments",
         json.dumps({"name": "x" * (8 * 1024 * 1024)}), json_type, {413}),
        ("body that is not UTF-8", "POST", "/environments", b'{"name": "\xff\xfe"}',
         json_type, {400}),
        ("body that is not JSON", "POST", "/environments", "{name: x", json_type, {400}),
        ("NaN in a body", "POST", "/environments", '{"name": NaN}', json_type, {400}),
        ("NUL in a name", "POST", "/environments", '{"name": "a\u0000b"}', json_type, {400}),
        ("a list for an object", "POST", "/environments", "[1, 2]", json_type, {400}),
        ("huge integer", "POST", "/environments", '{"name": ' + "9" * 5000 + "}", json_type,
         {400}),
        ("id with ..", "GET", "/environments/..%2F..%2Fetc", None, {}, {404}),
        ("service path with ..", "GET", f"/environments/{env_id}/services/../../x", None, {},
         {400, 404}),
        ("unknown action", "POST", f"/environments/{env_id}/actions/rm-rf", {}, {}, {400, 404}),
        ("action parameters not an object", "POST", f"/environments/{env_id}/actions/check",
         [1], {}, {400}),
        ("tenant header too long", "GET", "/environments", None, {"X-Tenant-Id": "t" * 5000},
         {401, 400}),
        ("tenant header with a NUL", "GET", "/environments", None,
         {"X-Tenant-Id": "a\x01b"}, {401, 400}),
    ]:
        yield name, lambda m=method, p=path, b=body, h=headers, s=statuses: unchanged(
            refused(api.call(m, p, b, h), s))
    # -- another tenant
    for name, method, path, body in [
        ("read", "GET", f"/environments/{env_id}", None),
        ("rename", "PUT", f"/environments/{env_id}", {"name": "stolen"}),
        ("delete", "DELETE", f"/environments/{env_id}", None),
        ("configure", "POST", f"/environments/{env_id}/configure", None),
        ("read its session", "GET", f"/environments/{env_id}/sessions/{session}", None),
        ("add a service", "POST", f"/environments/{env_id}/services", site()),
        ("deploy", "POST", f"/environments/{env_id}/sessions/{session}/deploy", None),
        ("run an action", "POST", f"/environments/{env_id}/actions/check", {}),
        ("abandon", "POST", f"/environments/{env_id}/abandon", None),
        ("list its jobs", "GET", f"/environments/{env_id}/jobs", None),
        ("read its status", "GET", f"/environments/{env_id}/status", None),
        ("read its topology", "GET", f"/environments/{env_id}/topology", None),
        ("read its deployments", "GET", f"/environments/{env_id}/deployments", None),
    ]:
        def other(m=method, p=path, b=body) -> Verdict:
            answer = api.call(m, p, b, tenant="probe-b")
            verdict = refused(answer, {403, 404})
            if b"probe-env" in answer.body:
                return Verdict(False, f"{answer.status}: the other tenant's data came back")
            return verdict
        yield f"another tenant: {name}", other
    yield "another tenant's list", lambda: Verdict(
        b"probe-env" not in api.call("GET", "/environments", tenant="probe-b").body,
        "its list does not show the environment")
    # -- sizes
    yield "3000 units in one service", lambda: refused(api.call(
        "POST", f"/environments/{env_id}/services", site(units=3000),
        {"X-Configuration-Session": session}), {400, 413})
    # -- secrets
    def secret_in_action() -> Verdict:
        deployed = deploy_site(api)
        try:
            answer = api.call("POST", f"/environments/{deployed}/actions/execute_operation",
                              {"operation": "run", "operation_kwargs": {
                                  "command": "true", "password": SECRET}})
            if answer.status != 202:
                return Verdict(False, f"the action was not started: {answer.status} "
                                      f"{answer.body[:200]!r}")
            job = answer.json()["id"]
            wait_until(lambda: api.call("GET", f"/environments/{deployed}/jobs/{job}")
                       .json()["state"] not in ("queued", "running"), 120, "the action to end")
            bodies = [answer.body, api.call("GET", f"/environments/{deployed}/jobs").body,
                      api.call("GET", f"/environments/{deployed}/jobs/{job}").body,
                      api.call("GET", f"/environments/{deployed}/jobs/{job}/tasks.tsv").body]
            leaks = [b for b in bodies if SECRET.encode() in b]
            return Verdict(not leaks, f"{answer.status}, "
                                      f"{'the password came back' if leaks else 'masked'} "
                                      f"in the job, its listing and its tasks")
        finally:
            delete_and_wait(api, deployed)
    yield "password in action parameters", secret_in_action
    def secret_in_service() -> Verdict:
        api.call("POST", f"/environments/{env_id}/services", site(),
                 {"X-Configuration-Session": session})
        answer = api.call("GET", f"/environments/{env_id}/services",
                          headers={"X-Configuration-Session": session})
        return Verdict(SECRET.encode() not in answer.body, f"{answer.status}, service read back")
    yield "password in a service", secret_in_service


# ============================================================ packages, names, dashboard, messages

def archive(files: dict[str, bytes | str]) -> bytes:
    """A zip of ``files`` (a workflow package as a tenant uploads it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as made:
        for name, data in files.items():
            made.writestr(name, data if isinstance(data, bytes) else data.encode())
    return buffer.getvalue()


def package(name: str, version: str = "1.0.0", types: dict | None = None,
            workflow: str | None = None, **raw: bytes | str) -> bytes:
    files: dict[str, bytes | str] = {
        "package.json": json.dumps({"name": name, "version": version}, indent=2),
        "workflows/Probe.xml": workflow or PACKAGE_WORKFLOW}
    if types is not None:
        files["types.json"] = json.dumps({"types": types}, indent=2)
    files.update(raw)
    return archive(files)


PACKAGE_WORKFLOW = """<workflow>
  <rule match="$[?(not @.temp.probed)]" desc="probe">
    <set path="temp.probed"><true/></set>
  </rule>
</workflow>
"""
# a report quoting a service's note: a NUL there is what PostgreSQL refuses to store
TELLING_WORKFLOW = """<workflow>
  <rule match="$.services[?(@.note and not @.temp.told)]" desc="tell">
    <set path="temp.told"><true/></set>
    <report entity="environment"><parameter name="id"><select path="/id"/></parameter>
      <parameter name="text"><select path="note"/></parameter></report>
  </rule>
</workflow>
"""
ZIP = {"Content-Type": "application/zip"}


def note_type(**fields: dict) -> dict:
    return {"extends": "linuxService", "schema": {"properties": fields}}


def nested_properties(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def located(answer: Answer, statuses: set[int], where: str) -> Verdict:
    """:func:`refused`, and the error names ``where`` (a file, a field)."""
    verdict = refused(answer, statuses)
    if verdict.clean and where not in answer.body.decode("utf-8", "replace"):
        return Verdict(False, f"{verdict.detail} (does not name {where})")
    return verdict


_NUMBERS = itertools.count(1)


def using(api: Api, name: str, tenant: str = "probe-a") -> tuple[str, str]:
    """A new environment of ``tenant`` pinned to package ``name``, and a session of it."""
    made = api.call("POST", "/environments", {"name": f"uses-{name}-{next(_NUMBERS)}"},
                    tenant=tenant)
    if made.status != 200:
        raise RuntimeError(f"creating an environment: {made.status} {made.body[:200]!r}")
    env_id = made.json()["id"]
    pinned = api.call("PUT", f"/environments/{env_id}/packages/{name}", {}, tenant=tenant)
    if pinned.status != 200:
        raise RuntimeError(f"pinning {name}: {pinned.status} {pinned.body[:200]!r}")
    session = api.call("POST", f"/environments/{env_id}/configure", tenant=tenant).json()["id"]
    return env_id, session


def note_service(type_name: str, **fields: object) -> dict:
    return {"name": "note", "type": type_name, "osImage": {"name": "local", "type": "linux"},
            "units": [{}], **fields}


def package_cases(api: Api) -> Iterator[tuple[str, Callable[[], Verdict]]]:
    upload = lambda data, tenant="probe-a": api.call(  # noqa: E731
        "POST", "/packages", data, ZIP, tenant=tenant)
    # -- regular expressions
    bomb = upload(package("probe-bomb", types={"bombNote": note_type(
        code={"type": "string", "pattern": "^(a+)+$"})}))

    def bounded_bomb() -> Verdict:
        if bomb.status != 201:
            return refused(bomb, {400})
        env_id, session = using(api, "probe-bomb")
        timings: dict[str, float] = {}

        def bombing() -> None:
            started = time.monotonic()
            try:
                timings["status"] = api.call(
                    "POST", f"/environments/{env_id}/services",
                    note_service("bombNote", code="a" * 40 + "!"),
                    {"X-Configuration-Session": session}).status
            except OSError:
                timings["status"] = 0   # no answer in time
            timings["bomb"] = time.monotonic() - started
        thread = threading.Thread(target=bombing)
        thread.start()
        time.sleep(0.1)   # the bomb first
        started = time.monotonic()
        other = api.call("GET", "/environments", tenant="probe-b")
        timings["other"] = time.monotonic() - started
        thread.join()
        ok = (timings["status"] == 400 and other.status == 200 and timings["bomb"] < 2
              and timings["other"] < 2)
        return Verdict(ok, f"{timings['status']} in {timings['bomb'] * 1000:.0f} ms; another "
                           f"tenant's request {timings['other'] * 1000:.0f} ms")
    yield "regex bomb pattern (^(a+)+$) on 41 characters", bounded_bomb
    yield "invalid pattern in types.json", lambda: located(upload(package(
        "probe-badpattern", types={"badNote": note_type(
            code={"type": "string", "pattern": "([a-"})})), {400}, "types.json:")
    yield "backreference pattern (no linear engine runs it)", lambda: located(upload(package(
        "probe-backref", types={"refNote": note_type(
            code={"type": "string", "pattern": "^(a+)\\1$"})})), {400}, "types.json:")
    # -- nesting
    deep = "[" * 5000 + "]" * 5000
    yield "package.json nested 5000 deep", lambda: located(upload(archive({
        "package.json": '{"name": "probe-deep", "version": "1.0.0", "x": ' + deep + "}",
        "workflows/Probe.xml": PACKAGE_WORKFLOW})), {400}, "package.json")
    yield "types.json nested 5000 deep", lambda: located(upload(package(
        "probe-deeptypes", **{"types.json": '{"types": {"x": ' + deep + "}}"})), {400},
        "types.json")
    yield "400 levels of properties", lambda: located(upload(package(
        "probe-deepschema", types={"deepNote": note_type(x=nested_properties(400))})),
        {400}, "types.json")
    yield "workflow XML nested 5000 deep", lambda: located(upload(package(
        "probe-deepxml", workflow="<workflow>" + "<true>" * 5000 + "</true>" * 5000
        + "</workflow>")), {400}, "Probe.xml")
    # -- names belong to the project that first uploaded them
    private = upload(package("probe-mine", "1.0.0"))

    def taken(version: str) -> Answer:
        return upload(package("probe-mine", version), tenant="probe-b")

    def squatted() -> Verdict:
        if private.status != 201:
            return Verdict(False, f"the first upload failed: {private.status}")
        verdict = refused(taken("2.0.0"), {403, 409})
        listed = api.call("GET", "/packages", tenant="probe-b").body
        if b"probe-mine" in listed:
            return Verdict(False, "another project lists the private package")
        return verdict
    yield "another project takes the next version of my name", squatted

    def no_hint() -> Verdict:
        existing, other = taken("1.0.0"), taken("9.9.9")
        same = (existing.status == other.status and existing.body.replace(b"1.0.0", b"V")
                == other.body.replace(b"9.9.9", b"V"))
        return Verdict(same and existing.status in (403, 409),
                       f"{existing.status} / {other.status}: "
                       f"{'the same answer' if same else 'TELLS WHICH VERSIONS EXIST'}")
    yield "another project learns which private versions exist", no_hint
    if private.status == 201:
        package_id = private.json()["id"]
        yield "another project reads my private package", lambda: refused(api.call(
            "GET", f"/packages/{package_id}", tenant="probe-b"), {404})
        yield "another project downloads my private package", lambda: refused(api.call(
            "GET", f"/packages/{package_id}/download", tenant="probe-b"), {404})


def name_cases(api: Api) -> Iterator[tuple[str, Callable[[], Verdict]]]:
    env_id = api.call("POST", "/environments", {"name": "probe-names"}).json()["id"]
    session = api.call("POST", f"/environments/{env_id}/configure").json()["id"]
    into = {"X-Configuration-Session": session}
    services = f"/environments/{env_id}/services"
    for name, service, where in [
        ("NUL in a service name", site(name="we\x00b"), "name"),
        ("control character in a service name", site(name="we\x1bb"), "name"),
        ("service id of 10,000 characters", site(name="n1", id="s" * 10_000), "id"),
        ("service id with a slash", site(name="n2", id="../../x"), "id"),
        ("unit id of 300 characters", {**site(name="n3"), "units": [{"id": "u" * 300}]},
         "units"),
        ("NUL in a unit name", {**site(name="n4"), "units": [{"name": "a\x00b"}]}, "units"),
    ]:
        yield name, lambda s=service, w=where: located(api.call("POST", services, s, into),
                                                       {400}, w)
    yield "environment name of 10,000 characters", lambda: located(api.call(
        "POST", "/environments", {"name": "e" * 10_000}), {400, 413}, "name")


def secret_cases(api: Api) -> Iterator[tuple[str, Callable[[], Verdict]]]:
    """A field its package declares secret (``writeOnly``): masked everywhere."""
    uploaded = api.call("POST", "/packages", package("probe-secret", types={
        "secretNote": note_type(token={"type": "string", "writeOnly": True, "minLength": 40})}),
        ZIP)

    def invalid_echoed() -> Verdict:
        if uploaded.status != 201:
            return refused(uploaded, set())
        env_id, session = using(api, "probe-secret")
        return refused(api.call("POST", f"/environments/{env_id}/services",
                                note_service("secretNote", token=SECRET),
                                {"X-Configuration-Session": session}), {400})
    yield "an invalid secret field is not echoed", invalid_echoed

    def deployed_masked() -> Verdict:
        if uploaded.status != 201:
            return refused(uploaded, set())
        env_id, session = using(api, "probe-secret")
        value = SECRET + "-" * 30
        added = api.call("POST", f"/environments/{env_id}/services",
                         note_service("secretNote", token=value),
                         {"X-Configuration-Session": session})
        if added.status != 200:
            return Verdict(False, f"the service was refused: {added.status} {added.body[:200]!r}")
        api.call("POST", f"/environments/{env_id}/sessions/{session}/deploy")
        wait_until(lambda: api.call("GET", f"/environments/{env_id}").json()["status"]
                   not in ("deploying", "pending"), 120, "the deployment")
        bodies = {path: api.call("GET", path).body for path in (
            f"/environments/{env_id}/deployments", f"/environments/{env_id}",
            f"/environments/{env_id}/services", f"/environments/{env_id}/jobs")}
        bodies["unversioned deployments"] = api.call(
            "GET", f"/environments/{env_id}/deployments", prefix="").body
        delete_and_wait(api, env_id)
        leaks = [path for path, body in bodies.items() if SECRET.encode() in body]
        return Verdict(not leaks, f"shown in {', '.join(leaks)}" if leaks else
                       f"masked in {len(bodies)} answers")
    yield "a package's secret field after a deployment", deployed_masked


def poison_cases(api: Api) -> Iterator[tuple[str, Callable[[], Verdict]]]:
    """A report that cannot be stored (a NUL, on PostgreSQL) beside another tenant's deployment."""
    types = {"poisonNote": note_type(note={"type": "string"})}
    made = [api.call("POST", "/packages", package(name, types=types, workflow=TELLING_WORKFLOW),
                     ZIP, tenant=tenant) for name, tenant in (("probe-poison", "probe-a"),
                                                              ("probe-honest", "probe-b"))]

    def beside() -> Verdict:
        if any(answer.status != 201 for answer in made):
            return Verdict(False, f"uploads: {[answer.status for answer in made]}")
        started = []
        for name, tenant, note in (("probe-poison", "probe-a", "poi\x00son"),
                                   ("probe-honest", "probe-b", "honest report")):
            env_id, session = using(api, name, tenant)
            added = api.call("POST", f"/environments/{env_id}/services",
                             note_service("poisonNote", note=note),
                             {"X-Configuration-Session": session}, tenant=tenant)
            if added.status == 400 and tenant == "probe-a":
                continue   # refused at the door: nothing to poison with
            if added.status != 200:
                return Verdict(False, f"{tenant}'s service: {added.status} {added.body[:200]!r}")
            api.call("POST", f"/environments/{env_id}/sessions/{session}/deploy", tenant=tenant)
            started.append((env_id, tenant))
        for env_id, tenant in started:
            wait_until(lambda: api.call("GET", f"/environments/{env_id}", tenant=tenant)
                       .json()["status"] not in ("deploying", "pending"), 120, "the deployments")
        honest, tenant = started[-1]
        [deployment] = api.call("GET", f"/environments/{honest}/deployments",
                                tenant=tenant).json()["deployments"]
        reports = api.call("GET", f"/environments/{honest}/deployments/{deployment['id']}",
                           tenant=tenant).json()["reports"]
        told = any(report.get("text") == "honest report" for report in reports)
        for env_id, tenant in started:
            delete_and_wait(api, env_id, tenant)
        return Verdict(told, f"{len(started)} deployments; the other tenant's report "
                             f"{'stored' if told else 'NOT STORED'} ({len(reports)} reports)")
    yield "a poisoned report beside another tenant's deployment", beside


# -- the dashboard, as a browser (cookies kept) and as a forging page

class Browser:
    """HTTP with a cookie jar, no redirects followed: the dashboard as a browser sees it."""

    def __init__(self, port: int, host: str | None = None) -> None:
        self.port = port
        self.host = host
        self.cookies: dict[str, str] = {}

    def call(self, method: str, path: str, form: dict[str, str] | None = None,
             headers: dict[str, str] | None = None) -> Answer:
        sent = dict(headers or {})
        if method == "POST" and not {"Origin", "Referer"} & set(sent):
            sent["Origin"] = f"http://{self.host or '127.0.0.1'}:{self.port}"   # as browsers do
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        if self.host:
            sent["Host"] = self.host
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, "/dashboard" + path, body=body, headers=sent)
            response = connection.getresponse()
            for header in response.msg.get_all("Set-Cookie") or []:
                jar = http.cookies.SimpleCookie()
                jar.load(header)
                for name, morsel in jar.items():
                    if morsel["max-age"] == "0" or not morsel.value:
                        self.cookies.pop(name, None)
                    else:
                        self.cookies[name] = morsel.value
            return Answer(response.status, dict(response.getheaders()), response.read())
        finally:
            connection.close()

    def token(self, path: str) -> str:
        page = self.call("GET", path).body.decode("utf-8", "replace")
        found = re.search(r'name="csrf_token"\s+value="([^"]+)"', page)
        if not found:
            raise RuntimeError(f"no CSRF token on {path}")
        return found.group(1)

    def log_in(self, tenant: str = "probe-a") -> None:
        answer = self.call("POST", "/login", {"tenant": tenant, "user": "probe",
                                              "csrf_token": self.token("/login")})
        if answer.status != 303:
            raise RuntimeError(f"the dashboard login failed: {answer.status}")


def page_refused(answer: Answer, statuses: set[int]) -> Verdict:
    leaks = TRACEBACK.encode() in answer.body
    return Verdict(answer.status in statuses and not leaks, f"{answer.status}")


def dashboard_cases(api: Api) -> Iterator[tuple[str, Callable[[], Verdict]]]:
    count = lambda: len(api.call("GET", "/environments").json()["environments"])  # noqa: E731

    def forged(headers: dict[str, str], chosen: bool = False, path: str = "/environments",
               form: dict[str, str] | None = None) -> Verdict:
        browser = Browser(api.port)
        browser.log_in()
        token = browser.token("/")
        if chosen:   # a page that could set a cookie for the host chose both halves
            token = "A" * 43
            browser.cookies = {name: (token if "csrf" in name else value)
                               for name, value in browser.cookies.items()}
            browser.cookies.setdefault("fornace_csrf", token)
        before = count()
        answer = browser.call("POST", path, {"name": "forged", "csrf_token": token,
                                             **(form or {})}, headers)
        verdict = page_refused(answer, {400, 403})
        if count() != before:
            return Verdict(False, f"{answer.status}: the forged form created an environment")
        return verdict
    yield "form with a token the client chose", lambda: forged({}, chosen=True)
    yield "form with Origin null", lambda: forged({"Origin": "null"})
    yield "form with a foreign Origin", lambda: forged({"Origin": "http://evil.example"})
    yield "form with a foreign Referer", lambda: forged(
        {"Referer": "http://evil.example/page"})

    def forged_login(headers: dict[str, str], chosen: bool = False) -> Verdict:
        browser = Browser(api.port)
        token = "A" * 43 if chosen else browser.token("/login")
        if chosen:
            browser.cookies = {name: token for name in browser.cookies} or {"fornace_csrf": token}
        answer = browser.call("POST", "/login", {"tenant": "probe-attacker", "user": "x",
                                                 "csrf_token": token}, headers)
        logged = any("attacker" in value for value in browser.cookies.values())
        verdict = page_refused(answer, {400, 403})
        return Verdict(verdict.clean and not logged, verdict.detail
                       + (" and the browser is logged in as the attacker" if logged else ""))
    yield "login with Origin null", lambda: forged_login({"Origin": "null"})
    yield "login with a token the client chose", lambda: forged_login({}, chosen=True)
    yield "login with a foreign Referer", lambda: forged_login(
        {"Referer": "http://evil.example/"})
    # -- DNS rebinding: another name for this address
    yield "Host attacker.test, REST", lambda: refused(api.call(
        "GET", "/environments", headers={"Host": "attacker.test"}), {400})
    yield "Host attacker.test with its own Origin", lambda: refused(api.call(
        "POST", "/environments", {"name": "rebound"},
        headers={"Host": "attacker.test", "Origin": "http://attacker.test"}), {400})
    yield "Host attacker.test, dashboard", lambda: page_refused(
        Browser(api.port, host="attacker.test").call("GET", "/"), {400})


# ============================================================ the command line

YAML_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
    for i in range(8)) + "name: web\ntype: linuxWebServer\nunits: [{}]\nbomb: *i\n"


def cli_cases(env_id: str) -> list[tuple[str, list[str], dict[str, str | bytes], str]]:
    """(name, argv after `fornace`, files to write, what the error must name)."""
    deep = "[" * 100_000 + "]" * 100_000
    deep_arg = "[" * 30_000 + "]" * 30_000     # an argument is at most 128 KiB
    return [
        ("service file nested too deeply", ["service", "add", env_id, "--file", "deep.json"],
         {"deep.json": deep}, "deep.json"),
        ("service file with a 5000-digit number", ["service", "add", env_id, "--file",
                                                   "big.json"],
         {"big.json": '{"name": "w", "port": ' + "9" * 5000 + "}"}, "big.json"),
        ("YAML service file nested too deeply", ["service", "add", env_id, "--file",
                                                 "deep.yaml"], {"deep.yaml": deep}, "deep.yaml"),
        ("YAML alias bomb", ["service", "add", env_id, "--file", "bomb.yaml"],
         {"bomb.yaml": YAML_BOMB}, "bomb.yaml"),
        ("service file not UTF-8", ["service", "add", env_id, "--file", "latin.json"],
         {"latin.json": b'{"name": "caf\xe9"}'}, "latin.json"),
        ("service file that is a folder", ["service", "add", env_id, "--file", "."], {}, "."),
        ("service file missing", ["service", "add", env_id, "--file", "nope.json"], {},
         "nope.json"),
        ("--set nested too deeply", ["service", "add", env_id, "--type", "linuxWebServer",
                                     "--name", "w", "--set", f"x={deep_arg}"], {}, "x="),
        ("--params nested too deeply", ["action", env_id, "check", "--params", deep_arg], {},
         "--params"),
        ("--params not an object", ["action", env_id, "check", "--params", "[1]"], {},
         "--params"),
        ("--params with a 5000-digit number", ["action", env_id, "check", "--params",
                                               '{"n": ' + "9" * 5000 + "}"], {}, "--params"),
    ]


def run_cli(name: str, argv: list[str], files: dict[str, str | bytes], where: str,
            root: Path, fornace: list[str], port: int, memory: int,
            timeout: float) -> Verdict:
    folder = Path(tempfile.mkdtemp(dir=root))
    for file, content in files.items():
        (folder / file).write_bytes(content if isinstance(content, bytes) else content.encode())
    try:
        done = subprocess.run([*fornace, *argv, "--url", f"http://127.0.0.1:{port}",
                               "--tenant", "probe-a"], capture_output=True, timeout=timeout,
                              cwd=folder, preexec_fn=limit_memory(memory))
    except subprocess.TimeoutExpired:
        return Verdict(False, f"still running after {timeout:g} s")
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    last = (out.strip().splitlines() or [""])[-1][:200]
    if done.returncode < 0:
        return Verdict(False, f"killed by signal {-done.returncode}")
    if TRACEBACK in out or "MemoryError" in out or "RecursionError" in out:
        return Verdict(False, f"traceback: {last}")
    if done.returncode == 0:
        return Verdict(False, f"accepted: {last}")
    return Verdict(where in out, f"exit {done.returncode}: {last}")


# ============================================================ main

GROUPS = {"api": api_cases, "names": name_cases, "packages": package_cases,
          "secrets": secret_cases, "dashboard": dashboard_cases, "messages": poison_cases}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["operator", *GROUPS, "cli"], action="append",
                        help="run only this group (repeat for several)")
    parser.add_argument("--database", metavar="URL",
                        help="the API's [database] connection (default: SQLite in a "
                             "temporary folder); e.g. a PostgreSQL database of its own")
    parser.add_argument("--broker", metavar="URL",
                        help="the [broker] url (default: a folder broker); e.g. a RabbitMQ "
                             "virtual host of its own")
    parser.add_argument("--memory", type=int, default=1024, metavar="MB",
                        help="memory limit of each operator command (MB)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary folder (the API's log, its state) and say where")
    args = parser.parse_args()
    groups = set(args.only or ["operator", *GROUPS, "cli"])
    fornace = [sys.executable, "-m", "fornace.cli"]
    tally = Tally(args.verbose)
    root = Path(tempfile.mkdtemp(prefix="fornace-probe-"))
    try:
        if "operator" in groups:
            for case in operator_cases():
                tally.record(f"{case.command}", case.name,
                             run_operator(case, root, fornace, args.memory, args.timeout))
        if groups - {"operator"}:
            with api_process(root, fornace, args.database, args.broker) as port:
                api = Api(port)
                for group, cases in GROUPS.items():
                    if group in groups:
                        try_all(tally, group, cases, api)
                if "cli" in groups:
                    env_id = api.call("POST", "/environments", {"name": "probe-cli"}).json()["id"]
                    for name, argv, files, where in cli_cases(env_id):
                        tally.record("cli", name, run_cli(name, argv, files, where, root,
                                                          fornace, port, args.memory,
                                                          args.timeout))
            logged = (root / "api.log").read_text(errors="replace")
            tally.record("logs", "no traceback in the API's and conductor's log", Verdict(
                TRACEBACK not in logged, "none" if TRACEBACK not in logged else
                logged[logged.index(TRACEBACK):][:600]))
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{tally.tries} tries: {tally.clean} clean, {tally.tries - tally.clean} not clean")
    return 0 if tally.clean == tally.tries else 1


def try_all(tally: Tally, group: str, cases: Callable[[Api], Iterator], api: Api) -> None:
    """Each try of a group, judged; a probe that breaks says so (and so does a
    group whose setup breaks)."""
    attempts = cases(api)
    while True:
        try:
            name, attempt = next(attempts)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 -- a probe that broke says so
            tally.record(group, "setting up", Verdict(False, f"the probe failed: "
                                                              f"{type(exc).__name__}: {exc}"))
            return
        try:
            verdict = attempt()
        except Exception as exc:  # noqa: BLE001
            verdict = Verdict(False, f"the probe failed: {type(exc).__name__}: {exc}")
        tally.record(group, name, verdict)

if __name__ == "__main__":
    sys.exit(main())
