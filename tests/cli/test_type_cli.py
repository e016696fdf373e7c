"""``fornace type list|show``, and ``fornace service add|update`` checking fields
against the server's types (``GET /types/{name}``): a type that only the API's
data folder has (``linuxNote``, :mod:`test_new_type`) is known to the command
line, and a bad field is refused by the command line itself -- naming the
field -- before any request that changes anything.  An API without
``/types`` (an older one) has services checked against the built-in types."""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from clikit import as_json, ok, one_line_error, runner
from fornace.api import specs
from fornace.cli.main import build_conf
from localkit import running_onebox
from test_new_type import note_data_folder


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """Fornace on a data folder whose types.json adds ``linuxNote``."""
    root = tmp_path_factory.mktemp("type-cli")
    conf = build_conf()
    conf(["up"], project="fornace", default_config_files=[], default_config_dirs=[])
    conf.set_override("data_dir", str(note_data_folder(root)))
    yield from running_onebox(root / "state", max_environments=1, conf=conf)


class Recorder:
    """A proxy in front of the API recording each request (method, path); with
    ``older`` it answers 404 to ``/types`` as an API from before it did."""

    def __init__(self, target: str, older: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                recorder.calls.append((self.command, self.path))
                if older and self.path.split("?")[0].rstrip("/").startswith("/types"):
                    self._answer(404, b'{"error": {"code": 404, "title": "Not Found", '
                                      b'"message": "Not Found"}}')
                    return
                length = int(self.headers.get("Content-Length") or 0)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection")}
                request = urllib.request.Request(
                    target + self.path, data=self.rfile.read(length) if length else None,
                    method=self.command, headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        self._answer(answer.status, answer.read())
                except urllib.error.HTTPError as exc:
                    self._answer(exc.code, exc.read())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _any

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def changes(self) -> list[tuple[str, str]]:
        return [(method, path) for method, path in self.calls if method != "GET"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def recorder(box):
    made: list[Recorder] = []

    def make(older: bool = False) -> Recorder:
        made.append(Recorder(box.url, older))
        return made[-1]
    yield make
    for one in made:
        one.close()


NOTE = ("--type", "linuxNote", "--name", "memo", "--set", "osImage.name=local")


def test_types_are_listed_and_shown_as_the_api_has_them(box, tmp_path):
    cli = runner(box.url, tmp_path)
    listing = ok(cli("type", "list"))
    assert listing.splitlines()[0].split() == ["NAME", "ABSTRACT", "EXTENDS", "OPERATIONS",
                                               "DESCRIPTION"]
    [row] = [line for line in listing.splitlines() if line.startswith("linuxNote ")]
    assert row.split()[1:3] == ["no", "linuxService"] and "a note written" in row
    assert "linuxNote" in [t["name"] for t in as_json(cli("type", "list", "--json"))["types"]]
    values = ok(cli("type", "list", "-f", "value")).splitlines()
    assert "service\tyes\t\tmonitor\t" in values

    shown = ok(cli("type", "show", "linuxNote"))
    assert shown.startswith("type linuxNote\n") and "extends: linuxService > service" in shown
    assert "operations: monitor (does nothing), run" in shown
    assert "instance: template LinuxInstance, image linux" in shown
    assert any(line.split()[:3] == ["text", "string", "yes"] for line in shown.splitlines())
    assert any(line.startswith("signature ") and "secret" in line
               for line in shown.splitlines())
    document = as_json(cli("type", "show", "linuxNote", "--json"))
    assert {"text", "copies", "signature", "osImage"} <= set(document["schema"]["properties"])

    line = one_line_error(cli("type", "show", "linuxNoot"), 2)
    assert "unknown service type 'linuxNoot'" in line and "linuxNote" in line


def test_service_add_checks_against_the_servers_type(box, tmp_path, recorder):
    assert "linuxNote" not in specs.SERVICE_TYPES       # only the API's data folder has it
    cli = runner(box.url, tmp_path)
    ok(cli("env", "create", "typed"))
    proxy = recorder()
    through = runner(proxy.url, tmp_path)

    done = through("service", "add", "typed", *NOTE, "--set", "text=hi", "--set", "copies=9")
    line = one_line_error(done, 2)
    assert "copies: must be between 1 and 5 (--type/--name/--set)" in line, line
    assert proxy.changes() == [] and any(path.startswith("/types/linuxNote?environment=")
                                         for _, path in proxy.calls)
    done = through("service", "add", "typed", *NOTE, "--set", "text=hi", "--set", "colour=red")
    assert "colour: unknown field for a linuxNote service" in one_line_error(done, 2)
    done = through("service", "add", "typed", "--type", "linuxNoot", "--name", "memo")
    assert "type: unknown service type 'linuxNoot'" in one_line_error(done, 2)
    listed = tmp_path / "two.json"
    listed.write_text(json.dumps([
        {"type": "linuxNote", "name": "a", "text": "x", "osImage": "local", "units": [{}]},
        {"type": "linuxNote", "name": "b", "text": "x", "osImage": "local", "units": [{}] * 4}]))
    line = one_line_error(through("service", "add", "typed", "--file", str(listed)), 2)
    assert "services[1].units: a linuxNote service takes at most 3 units" in line
    assert str(listed) in line
    assert proxy.changes() == []                          # nothing sent but reads
    assert as_json(through("service", "list", "typed", "--json")) == []

    ok(through("service", "add", "typed", *NOTE, "--set", "text=hi", "--set", "signature=s1"))
    assert [m for m, _ in proxy.changes()] == ["POST", "POST"]    # configure, services
    [service] = as_json(through("service", "list", "typed", "--json"))
    assert service["type"] == "linuxNote" and service["signature"] == "***"

    # update: the touched fields, against the server's type, before the PUT
    proxy.calls.clear()
    done = through("service", "update", "typed", "memo", "--set", "copies=0")
    line = one_line_error(done, 2)
    assert "service memo: copies: must be between 1 and 5" in line, line
    assert proxy.changes() == []
    out = ok(through("service", "update", "typed", "memo", "--set", "copies=2",
                     "--set", "colur=1"))
    assert "  copies: - -> 2" in out and [m for m, _ in proxy.changes()] == ["PUT"]
    assert "'colur' is not a field of linuxNote services" in \
        through("service", "update", "typed", "memo", "--set", "colur=2").stderr
    ok(cli("env", "delete", "typed", "--yes"))


def test_an_api_without_types_has_services_checked_against_the_built_in_ones(
        box, tmp_path, recorder):
    cli = runner(box.url, tmp_path)
    ok(cli("env", "create", "older"))
    proxy = recorder(older=True)
    through = runner(proxy.url, tmp_path)
    listed = tmp_path / "sites.json"
    site = {"type": "linuxWebServer", "name": "a", "osImage": "local", "units": [{}]}
    listed.write_text(json.dumps([site, {**site, "name": "b", "port": "x"}]))
    done = through("service", "add", "older", "--file", str(listed))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and "has no /types" in lines[0] and "built-in types" in lines[0]
    assert "services[1].port: must be an integer" in lines[1], lines
    assert proxy.changes() == []

    # a type the built-in catalog lacks is left to the API, which knows it
    ok(through("service", "add", "older", *NOTE, "--set", "text=hi"))
    assert [m for m, _ in proxy.changes()] == ["POST", "POST"]
    line = one_line_error(through("type", "list"), 2)
    assert "no service types route (/types)" in line
    line = one_line_error(through("type", "show", "linuxNote"), 2)
    assert "no service types route (/types)" in line
    ok(cli("env", "delete", "older", "--yes"))


def test_a_service_file_with_an_id_or_name_outside_the_rule_sends_nothing(box, tmp_path,
                                                                          recorder):
    """Ids and names follow fornace.common.names: a unit id of 300 characters or
    a name holding NUL is refused by the command line, naming entry, field
    and file, before any request that changes anything (the API refuses
    them too, tests/api/test_ids_names.py)."""
    cli = runner(box.url, tmp_path)
    ok(cli("env", "create", "ruled"))
    proxy = recorder()
    through = runner(proxy.url, tmp_path)
    listed = tmp_path / "ruled.json"
    site = {"type": "linuxWebServer", "name": "a", "osImage": "local", "units": [{}]}
    listed.write_text(json.dumps([site, {**site, "name": "b", "units": [{"id": "u" * 300}]}]))
    line = one_line_error(through("service", "add", "ruled", "--file", str(listed)), 2)
    assert "services[1].units[0].id: must be an id of 1 to 64 characters" in line, line
    assert str(listed) in line and "u" * 65 not in line
    listed.write_text(json.dumps([{**site, "name": "a\u0000b"}]))
    line = one_line_error(through("service", "add", "ruled", "--file", str(listed)), 2)
    assert "name: must not contain control characters such as U+0000" in line, line
    assert proxy.changes() == []
    ok(cli("env", "delete", "ruled", "--yes"))
