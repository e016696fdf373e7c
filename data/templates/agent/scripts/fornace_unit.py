"""Helpers shared by the Linux plan scripts of Fornace's catalog.

A plan that needs them lists this file in its ``Scripts`` next to the script
it runs; the agent writes both into the plan folder, and Python finds this
module there (the folder of the running script is on ``sys.path``).  Only the
standard library of Python 3.6+ is used, so the scripts run on any Linux with
Python 3.

* :func:`arguments` / :func:`argument` -- the command's arguments: the JSON
  object the agent gives on stdin (typed values), else the environment
  variables it sets; a value still reading ``$name`` (a mapping the workflow
  left out) counts as absent;
* :func:`addresses` -- where servers listen: ``FORNACE_INSTANCE_ADDRESS`` (the
  local cloud gives every unit its own loopback address) or every address of
  a real VM (``0.0.0.0``, probed on ``127.0.0.1``);
* :func:`start_detached` / :func:`stop_recorded` -- a long-running server in
  its own session, remembered in a pid file (pid, process group and start
  time, so a recycled pid is never signalled), stopped with its whole process
  group; :func:`leftover_group` / :func:`stop_group` -- what is left of a
  server whose first process exited;
* :func:`environment_variables` -- an app's extra environment variables
  (the ``env`` argument);
* :func:`backends_file` -- the load balancer's backend list, read and saved
  under its lock;
* :func:`fail` -- a clear message on stderr (the agent quotes it in the
  command's error, which the workflow reports) and exit code 1.
"""
import contextlib
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STOP_TIMEOUT = 10.0
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Failure(Exception):
    """A step failed; the message is for the operator."""


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


# -- arguments -----------------------------------------------------------------------

def run(step):
    """A script's main: ``step(arguments)``'s text printed, a Failure as exit code 1."""
    try:
        print(step(arguments()))
    except Failure as exc:
        fail(str(exc))
    return 0


def arguments():
    """The arguments object from stdin (empty when there is none)."""
    try:
        text = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    except (OSError, ValueError):
        text = ""
    if text.strip():
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            return data
    return {}


def argument(args, name, default=None):
    """One argument: from ``args``, else the environment; blank or ``$name`` -> default."""
    value = args[name] if name in args else os.environ.get(name)
    if value is None or (isinstance(value, str) and value.strip() in ("", "$" + name)):
        return default
    return value


def integer(args, name, default=None, low=None, high=None):
    value = argument(args, name, default)
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        raise Failure("argument {} must be an integer (got {!r})".format(name, value))
    if (low is not None and number < low) or (high is not None and number > high):
        raise Failure("argument {} must be between {} and {} (got {})".format(
            name, low, high, number))
    return number


def environment_variables(extra):
    """An app's extra environment variables from the ``env`` argument's value.

    An object (or its JSON text) of names and values: values become strings
    (booleans ``true``/``false``), ``null`` values are left out; absent -> {}.
    """
    if isinstance(extra, str):          # given as an environment variable
        try:
            extra = json.loads(extra) if extra.strip() not in ("", "$env") else {}
        except ValueError:
            raise Failure("env must be a JSON object of variables")
    if extra is None:
        return {}
    if not isinstance(extra, dict):
        raise Failure("env must be an object of environment variables")
    result = {}
    for key, value in extra.items():
        if not ENV_NAME.match(str(key)):
            raise Failure("env: {!r} is not an environment variable name".format(key))
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        result[str(key)] = value if isinstance(value, str) else str(value)
    return result


def work_dir():
    work = Path(os.environ.get("FORNACE_WORK_DIR") or os.getcwd())
    work.mkdir(parents=True, exist_ok=True)
    return work


def addresses():
    """(address to listen on, address to probe it on)."""
    address = (os.environ.get("FORNACE_INSTANCE_ADDRESS") or "").strip()
    if not address or address == "0.0.0.0":
        return "0.0.0.0", "127.0.0.1"
    return address, address


def url_host(host):
    return "[{}]".format(host) if ":" in host else host


# -- processes -----------------------------------------------------------------------

def _stat(pid):
    """(state, process group, start time) from /proc, None when gone or unknown."""
    try:
        text = Path("/proc/{}/stat".format(pid)).read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _proc_available():
    return Path("/proc/self/stat").exists()


def read_record(pid_file):
    try:
        record = json.loads(Path(pid_file).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
        return None
    return record


def is_running(record):
    """Does the process of a pid-file record still run (the same process)?"""
    pid = record["pid"]
    if _proc_available():
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            return False
        return record.get("start_time") is None or stat[2] == record["start_time"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_alive(pgid):
    if _proc_available():
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = _stat(int(entry))
                if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
                    return True
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid, signum):
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def stop_recorded(pid_file, timeout=STOP_TIMEOUT):
    """Stop the server a pid file names (and its process group); True if one ran."""
    record = read_record(pid_file)
    stopped = False
    if record is not None and is_running(record):
        stop_group(record.get("pgid") or record["pid"], timeout)
        stopped = True
    try:
        Path(pid_file).unlink()
    except OSError:
        pass
    return stopped


def stop_group(pgid, timeout=STOP_TIMEOUT):
    """SIGTERM a process group, SIGKILL what is left of it after ``timeout``."""
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _group_alive(pgid):
        _signal_group(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)


def leftover_group(record):
    """Do processes of a recorded server's group outlive its (exited) first process?

    They are the server's children (e.g. the program ``/bin/sh -c`` started):
    Linux does not give a pid to a new process while a live process group
    bears it.  Without /proc this cannot be told safely: False.
    """
    if not _proc_available() or is_running(record):
        return False
    pgid = record.get("pgid") or record["pid"]
    stat = _stat(pgid)
    if stat is not None and stat[0] not in ("Z", "X") and \
            record.get("start_time") is not None and stat[2] != record["start_time"]:
        return False                # the pid names another process now: the group is gone
    return _group_alive(pgid)


def start_detached(argv, cwd, log_path, env, pid_file, banner=None):
    """Start a server in its own session, output appended to ``log_path``.

    Returns ``(process, log offset)``: the offset is where this run's output
    starts in the log (for :func:`log_tail`).
    """
    log_path = Path(log_path)
    with open(str(log_path), "ab") as log:
        if banner:
            log.write("==== {} {}\n".format(time.strftime("%Y-%m-%d %H:%M:%S"),
                                            banner).encode("utf-8", "replace"))
            log.flush()
        offset = log.tell()
        process = subprocess.Popen(argv, cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, env=env, close_fds=True,
                                   start_new_session=True)
    stat = _stat(process.pid)
    record = {"pid": process.pid, "pgid": process.pid,
              "start_time": stat[2] if stat else None, "argv": list(argv)}
    tmp = Path(str(pid_file) + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(str(tmp), str(pid_file))
    return process, offset


def listening(host, port, process, timeout=15.0):
    """Wait until a started server accepts connections (False: it exited or timed out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def log_tail(log_path, offset=0, size=1500):
    """The end of what a server wrote to its log since ``offset``."""
    try:
        with open(str(log_path), "rb") as log:
            log.seek(0, os.SEEK_END)
            end = log.tell()
            log.seek(max(offset, end - size))
            text = log.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return text


def with_tail(message, log_path, offset):
    tail = log_tail(log_path, offset)
    if tail:
        return "{}; last lines of {}:\n{}".format(message, log_path, tail)
    return "{} ({} is empty)".format(message, log_path)


@contextlib.contextmanager
def backends_file(folder):
    """The load balancer's backends in ``folder/backends.json``, under ``.backends.lock``.

    Yields ``(backends, save)``: the list of backend objects (empty when the
    file is missing or unreadable) and ``save(backends)``, which replaces the
    file atomically.  The lock is held until the block ends.
    """
    folder = Path(folder)
    path = folder / "backends.json"
    with open(str(folder / ".backends.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(path.read_text()) if path.is_file() else {}
        except ValueError:
            data = {}
        backends = data.get("backends") if isinstance(data, dict) else None
        backends = [b for b in backends or [] if isinstance(b, dict)]

        def save(entries):
            tmp = folder / ".backends.json.tmp"
            tmp.write_text(json.dumps({"backends": entries}, indent=2))
            os.replace(str(tmp), str(path))

        yield backends, save


def child_environment(args):
    """This process's environment for a server: without the plan's own variables."""
    env = dict(os.environ)
    for name in ("FORNACE_PLAN_DIR", "FORNACE_PLAN_ID", "FORNACE_COMMAND_INDEX"):
        env.pop(name, None)
    for name in args:            # the agent also sets each argument as a variable
        env.pop(name, None)
    return env
