"""The servers the Linux deploy scripts leave running, for the lifecycle operations.

Shipped (with ``fornace_unit.py``) by the plans of ``check``, ``stop``,
``start`` and ``restart`` (``check_server.py``, ``stop_server.py``,
``start_server.py``); the argument ``server`` names which server of the unit:

``site``   the static site of ``deploy_static_site.py``: ``python3 -m
           http.server`` serving ``$FORNACE_WORK_DIR/site``, pid file
           ``site-server.pid``, log ``site-server.log``;
``app``    the application of ``deploy_linux_app.py``: its ``startCommand``
           run by ``/bin/sh -c`` in ``$FORNACE_WORK_DIR/app``, pid file
           ``app.pid``, log ``app.log``;
``proxy``  the load balancer of ``deploy_proxy.py``: ``proxy/fornace_proxy.py``
           with its backend list ``proxy/backends.json``, pid file
           ``proxy/proxy.pid``, log ``proxy/proxy.log``.

Other arguments (blank or ``$name``: absent): ``port`` (the site's, the
app's, the load balancer's), ``address`` (the unit's address: checks probe
it, and URLs name it; default the address the deploy scripts probe on),
``path`` (checks: the path probed, default ``/``; for an app its
``healthPath``), ``timeout`` (checks: seconds per probe, default 5); to
start an app again also ``name``, ``startCommand``, ``healthPath``, ``env``,
``hostname`` and ``startTimeout`` as for ``deploy_linux_app.py``.

* :func:`check` -> ``(status, detail)``: ``ok`` (the server answers with a
  2xx/3xx status; for the load balancer: every registered backend accepts
  connections), ``degraded`` (it answers, but: a 4xx status, its recorded
  process is gone while something else serves the port, or some backends of
  the load balancer are down or none is registered) or ``error`` (no answer,
  a 5xx status, or no backend of the load balancer is up);
* :func:`stop` stops the recorded server and its process group (also what is
  left of the group when its first process exited); not running: said so;
* :func:`start` starts it again from what the deployment left (the site
  folder, the app folder, the proxy folder with its backends) and waits until
  it answers; already running: said so.
"""
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fornace_unit as unit  # noqa: E402  (shipped in the same plan)

START_TIMEOUT = 15.0
PROBE_TIMEOUT = 5
PROBE_INTERVAL = 0.2
LOG_TAIL = 400


class Server(object):
    def __init__(self, kind, label, pid_name, log_name):
        self.kind = kind
        self.label = label
        self.work = unit.work_dir()
        self.pid_file = self.work / pid_name
        self.log_path = self.work / log_name

    def record(self):
        return unit.read_record(self.pid_file)


SERVERS = {
    "site": ("the web server", "site-server.pid", "site-server.log"),
    "app": ("the application", "app.pid", "app.log"),
    "proxy": ("the load balancer", "proxy/proxy.pid", "proxy/proxy.log"),
}


def server_of(args):
    kind = unit.argument(args, "server")
    if kind not in SERVERS:
        raise unit.Failure("argument server must be one of {} (got {!r})".format(
            ", ".join(sorted(SERVERS)), kind))
    return Server(kind, *SERVERS[kind])


def probe_host(args):
    address = unit.argument(args, "address")
    if isinstance(address, str) and address.strip():
        return address.strip()
    return unit.addresses()[1]


def url_of(args, host=None, path=None):
    port = unit.integer(args, "port", None, 1, 65535)
    if path is None:
        path = unit.argument(args, "path", "/")
    if not isinstance(path, str) or not path.startswith("/"):
        raise unit.Failure("the path probed must start with '/' (got {!r})".format(path))
    return "http://{}:{}{}".format(unit.url_host(host or probe_host(args)), port, path)


# -- probes -----------------------------------------------------------------------------

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None          # a 3xx answer is an answer: do not follow it


def probe(url, timeout=PROBE_TIMEOUT):
    """``(HTTP status, None)``, or ``(None, why there was no answer)``."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=timeout) as answer:
            return answer.status, None
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, str(reason) or type(reason).__name__


def accepts(url, timeout=PROBE_TIMEOUT):
    """Does ``http://host:port`` accept TCP connections (what the proxy needs)?"""
    parts = urllib.parse.urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout).close()
        return True
    except (OSError, ValueError):
        return False


def process_text(server):
    """(is the recorded process running, a clause about it)."""
    record = server.record()
    if record is None:
        return False, "{} is not running (no {})".format(server.label, server.pid_file.name)
    if unit.is_running(record):
        return True, "{} runs as pid {}".format(server.label, record["pid"])
    if unit.leftover_group(record):
        return False, "the process {} of {} exited, other processes of its group " \
                      "remain".format(record["pid"], server.label)
    return False, "{} (pid {}) is not running".format(server.label, record["pid"])


def tail(server):
    """The end of the server's log, when its recorded process died (else nothing)."""
    if server.record() is None:
        return ""
    text = unit.log_tail(server.log_path, 0, LOG_TAIL)
    return "; end of {}: {}".format(server.log_path.name, " | ".join(text.splitlines())) \
        if text else ""


# -- check ------------------------------------------------------------------------------

def check(args):
    """``(status, detail)`` of the server ``args`` names (see the module docstring)."""
    server = server_of(args)
    timeout = unit.integer(args, "timeout", PROBE_TIMEOUT, 1, 300)
    if server.kind == "proxy":
        return _check_proxy(server, args, timeout)
    url = url_of(args)
    running, about = process_text(server)
    code, problem = probe(url, timeout)
    if code is None:
        return "error", "no answer on {} ({}); {}{}".format(
            url, problem, about, "" if running else tail(server))
    if not running:
        return "degraded", "{} answers HTTP {}, but {}".format(url, code, about)
    if code >= 500:
        return "error", "{} answers HTTP {}; {}".format(url, code, about)
    if code >= 400:
        return "degraded", "{} answers HTTP {}; {}".format(url, code, about)
    return "ok", "{} answers HTTP {}; {}".format(url, code, about)


def backends(server):
    """The load balancer's backends as ``(name, url)``, as ``register_backend.py`` left them."""
    path = server.work / "proxy" / "backends.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    found = []
    for entry in (data.get("backends") if isinstance(data, dict) else None) or []:
        if isinstance(entry, dict) and isinstance(entry.get("url"), str):
            found.append((str(entry.get("name") or entry["url"]), entry["url"]))
    return found


def _check_proxy(server, args, timeout):
    url = url_of(args, path="/")
    running, about = process_text(server)
    code, problem = probe(url, timeout)
    if code is None:
        return "error", "no answer on {} ({}); {}{}".format(
            url, problem, about, "" if running else tail(server))
    listed = backends(server)
    down = [name for name, address in listed if not accepts(address, timeout)]
    summary = "{} answers on {}; {}; {} of {} backend(s) accept connections".format(
        server.label, url, about, len(listed) - len(down), len(listed))
    if down:
        summary += ", down: " + ", ".join(down)
    if not running:
        return "degraded", summary
    if not listed:
        return "degraded", summary + " (none is registered)"
    if len(down) == len(listed):
        return "error", summary
    if down:
        return "degraded", summary
    return "ok", summary


# -- stop / start -----------------------------------------------------------------------

def stop(args):
    server = server_of(args)
    record = server.record()
    if record is not None and unit.is_running(record):
        unit.stop_recorded(server.pid_file)
        return "{} (pid {}) stopped".format(server.label, record["pid"])
    if record is not None and unit.leftover_group(record):
        unit.stop_group(record.get("pgid") or record["pid"])
        unit.stop_recorded(server.pid_file)          # removes the pid file
        return "what was left of {} (its process {} exited) stopped".format(
            server.label, record["pid"])
    unit.stop_recorded(server.pid_file)              # a stale pid file goes
    return "{} was not running".format(server.label)


def start(args):
    server = server_of(args)
    record = server.record()
    if record is not None and unit.is_running(record):
        return "{} is already running (pid {}): {}".format(
            server.label, record["pid"], url_of(args, path=_path(server, args)))
    stop(args)                                       # leftovers, stale pid file
    bind = unit.addresses()[0]
    env = unit.child_environment(args)
    port = unit.integer(args, "port", None, 1, 65535)
    if server.kind == "site":
        site = server.work / "site"
        if not (site / "index.html").is_file():
            raise unit.Failure("no site was deployed on this unit ({} is missing)".format(
                site / "index.html"))
        argv = [sys.executable, "-m", "http.server", str(port), "--bind", bind,
                "--directory", str(site)]
        return _start(server, args, argv, server.work, env, START_TIMEOUT,
                      "static site on {}:{} started again".format(bind, port))
    if server.kind == "proxy":
        folder = server.work / "proxy"
        program = folder / "fornace_proxy.py"
        if not program.is_file():
            raise unit.Failure("no load balancer was deployed on this unit ({} is missing)"
                               .format(program))
        argv = [sys.executable, str(program), "--listen", bind, "--port", str(port),
                "--backends", str(folder / "backends.json")]
        return _start(server, args, argv, folder, env, START_TIMEOUT,
                      "load balancer on {}:{} started again".format(bind, port))
    app = server.work / "app"
    if not app.is_dir():
        raise unit.Failure("no application was deployed on this unit ({} is missing)"
                           .format(app))
    command = unit.argument(args, "startCommand")
    if not isinstance(command, str) or not command.strip():
        raise unit.Failure("no startCommand given")
    name = unit.argument(args, "name", "the application")
    hostname = unit.argument(args, "hostname")
    env.update(unit.environment_variables(args.get("env", os.environ.get("env"))))
    env.update(PORT=str(port), HOST=bind, FORNACE_APP_NAME=str(name))
    if hostname:
        env["FORNACE_UNIT_HOSTNAME"] = str(hostname)
    timeout = unit.integer(args, "startTimeout", 60, 1, 3600)
    return _start(server, args, ["/bin/sh", "-c", command], app, env, timeout,
                  "started again: " + command)


def _path(server, args):
    if server.kind == "app":
        return unit.argument(args, "healthPath", "/")
    return "/"


def _start(server, args, argv, cwd, env, timeout, banner):
    port = unit.integer(args, "port", None, 1, 65535)
    if accepts("http://{}:{}".format(unit.url_host(unit.addresses()[1]), port), 2):
        raise unit.Failure("{} did not start: another process holds port {} (it accepts "
                           "connections while {} is not running)".format(
                               server.label, port, server.label))
    process, offset = unit.start_detached(argv, cwd, server.log_path, env, server.pid_file,
                                          banner=banner)
    local = url_of(args, host=unit.addresses()[1], path=_path(server, args))
    problem = wait_answer(local, process, timeout, server.kind == "app")
    if problem is not None:
        unit.stop_recorded(server.pid_file)
        raise unit.Failure(unit.with_tail("{} did not start: {}".format(server.label, problem),
                                          server.log_path, offset))
    return "{} started (pid {}): {}".format(server.label, process.pid,
                                            url_of(args, path=_path(server, args)))


def wait_answer(url, process, timeout, healthy):
    """None once ``url`` answers (with a 2xx/3xx status when ``healthy``); else why not."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        code = process.poll()
        if code is not None:
            return "it exited with code {} before {} answered".format(code, url)
        status, problem = probe(url, 2)
        if status is not None and (not healthy or 200 <= status < 400):
            return None
        last = "HTTP {}".format(status) if status is not None else problem
        if time.monotonic() >= deadline:
            return "{} did not answer{} within {} s (last: {})".format(
                url, " with a 2xx or 3xx status" if healthy else "", timeout, last)
        time.sleep(PROBE_INTERVAL)
