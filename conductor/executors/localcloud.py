"""The local cloud: a Heat alternative for machines without OpenStack.

Stacks live in a state directory (``[conductor] cloud_dir``, default
``<[api] state_dir>/cloud``)::

    STATE/<stack>/template.json        the merged template (0.2 round semantics)
    STATE/<stack>/<instance>/          one sandbox per instance resource
        user-data                      the instance's user data, run with /bin/sh
        console.log                    its output (and the agent's log)
        instance.json                  pid, start time, user data digest
        etc/                           FORNACE_ETC: agent.conf written by init.sh
        work/                          FORNACE_AGENT_WORK_DIR: the agent's work dir

Each ``AWS::EC2::Instance`` / ``OS::Nova::Server`` of the merged template is
a local "VM": its sandbox plus the process its user data starts (``init.sh``
writes ``agent.conf`` and execs ``fornace agent``), in its own process group.
A round merges the template into the stored one (a resource merged to
``null`` is removed), stops and removes the sandboxes of instances no longer
there (every process of an instance carries its ``FORNACE_INSTANCE_TOKEN``,
so servers its scripts left running stop with it), leaves running ones alone (an instance whose user data changed is
replaced, one whose process died is started again) and starts the new ones.
``remove`` takes named resources out of the stored template and stops and
removes exactly those instances; the others keep their processes.
A boot process that exits within ``start_grace`` seconds is a
:class:`StackFailure` naming the instance with the tail of its log, and so is
an agent configured with the in-process ``memory://`` broker (the agents are
other processes: they need a shared broker, ``filesystem:///folder`` or
RabbitMQ's ``amqp://...``).

Every instance gets its own loopback address (127.x.y.z, stable for the
instance's life, stored in ``instance.json``), given to its processes as
``FORNACE_INSTANCE_ADDRESS``: two units of a service can then listen on the
same port, as on two VMs.  Outputs are evaluated minimally:
``Fn::GetAtt [instance, PrivateIp|PublicIp]`` (and HOT ``get_attr``
``first_address``) give that address, ``Ref`` /
``get_resource`` of an instance its resource name, ``Ref`` / ``get_param`` of
a parameter its value, literals themselves, anything else None.

There is no isolation: the "VMs" are processes of the conductor's user.
"""
from __future__ import annotations

import configparser
import contextlib
import copy
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from fornace.common.broker import is_in_memory
from fornace.conductor.config import cloud_dir
from fornace.conductor.executors.base import StackExecutor, StackFailure, StackRequest
from fornace.conductor.templates import merge, remove_resources

LOG = logging.getLogger(__name__)

INSTANCE_TYPES = frozenset({"AWS::EC2::Instance", "OS::Nova::Server"})
ADDRESS_ATTRIBUTES = frozenset({"PrivateIp", "PublicIp", "first_address", "accessIPv4"})
LOOPBACK = "127.0.0.1"     # outputs of an instance without an address (no user data)
TEMPLATE_FILE = "template.json"
RESERVED = frozenset({TEMPLATE_FILE})
ADDRESS_SPACE = 254 * 254 * 254   # 127.1-254.0-253.1-254
LOG_TAIL = 2000
TOKEN_VARIABLE = "FORNACE_INSTANCE_TOKEN"   # marks every process of an instance
# environment variables a boot script inherits from the conductor (nothing secret)
INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONPATH")

_children: dict[int, subprocess.Popen] = {}   # pid -> Popen, to reap our own children
_children_lock = threading.Lock()


class LocalStacks(StackExecutor):
    @classmethod
    def factory(cls, conf: Any) -> Callable[[Any], "LocalStacks"]:
        """One local cloud for every task, in ``[conductor] cloud_dir``."""
        stacks = cls(cloud_dir(conf))
        return lambda task: stacks

    def __init__(self, state_dir: str | Path, *, start_grace: float = 1.0,
                 stop_timeout: float = 10.0, allow_memory_broker: bool = False) -> None:
        self.state_dir = Path(os.path.expanduser(str(state_dir))).resolve()
        self.start_grace = float(start_grace)
        self.stop_timeout = float(stop_timeout)
        self.allow_memory_broker = allow_memory_broker
        self._handed_out: set[str] = set()

    # -- StackExecutor ------------------------------------------------------------
    def apply(self, request: StackRequest) -> dict[str, Any]:
        name = request.stack_name
        stack_dir = self._stack_dir(name)
        with self._locked(name):
            try:
                stack_dir.mkdir(parents=True, exist_ok=True)
                current = self._load_template(stack_dir)
                merged = merge(current, copy.deepcopy(request.template))
                resources = merged.get("Resources")
                if isinstance(resources, dict):
                    merged["Resources"] = {k: v for k, v in resources.items() if v is not None}
                instances = instance_resources(merged)
                for instance in instances:
                    self._check_instance_name(name, instance)
                _write_json(stack_dir / TEMPLATE_FILE, merged)
                removed = sorted(self._sandboxes(stack_dir) - set(instances))
                if removed:
                    LOG.info("stack %s: removing instance(s) %s", name, ", ".join(removed))
                    self._destroy(*(stack_dir / old for old in removed))
                started = []
                for instance, resource in instances.items():
                    if self._ensure(name, stack_dir / instance, resource):
                        started.append(instance)
            except OSError as exc:
                raise StackFailure(f"stack {name}: {exc}", str(exc)) from None
            if started:
                self._check_started(name, stack_dir, started)
        addresses = {i: _read_info(stack_dir / i).get("address") or LOOPBACK for i in instances}
        return evaluate_outputs(merged, addresses, request.parameters)

    def delete(self, stack_name: str) -> None:
        stack_dir = self._stack_dir(stack_name)
        with self._locked(stack_name):
            self._delete_locked(stack_name, stack_dir)

    def remove(self, stack_name: str, resources: list[str]) -> dict[str, Any]:
        """Stop and remove exactly the removed instances; the others keep running.

        Outputs are evaluated as by ``apply``, except that parameters are not
        stored with the stack: a ``Ref`` to one gives its template default.
        """
        stack_dir = self._stack_dir(stack_name)
        with self._locked(stack_name):
            if not (stack_dir / TEMPLATE_FILE).is_file():
                return {}
            removal = remove_resources(self._load_template(stack_dir), resources, stack_name)
            if removal.empty:
                self._delete_locked(stack_name, stack_dir)
                return {}
            if removal.changed:
                self._remove_instances(stack_name, stack_dir, removal.template,
                                       removal.resources)
            instances = instance_resources(removal.template)
        addresses = {i: _read_info(stack_dir / i).get("address") or LOOPBACK for i in instances}
        return evaluate_outputs(removal.template, addresses, {})

    # -- reading the state ----------------------------------------------------------
    def template(self, stack_name: str) -> dict[str, Any] | None:
        """The stored merged template of a stack (None: no such stack)."""
        path = self._stack_dir(stack_name) / TEMPLATE_FILE
        return json.loads(path.read_text()) if path.is_file() else None

    def stack_names(self) -> list[str]:
        """The stacks of this cloud."""
        return sorted(name for name in self._sandboxes(self.state_dir)
                      if (self.state_dir / name / TEMPLATE_FILE).is_file())

    def describe(self, stack_name: str) -> str:
        instances = self.instances(stack_name)
        running = sum(1 for info in instances.values() if info.get("running"))
        return f"{len(instances)} instance(s), {running} running"

    def instances(self, stack_name: str) -> dict[str, dict[str, Any]]:
        """Instance name -> its ``instance.json`` plus ``running`` (bool)."""
        stack_dir = self._stack_dir(stack_name)
        out = {}
        for instance in sorted(self._sandboxes(stack_dir)):
            info = _read_info(stack_dir / instance)
            out[instance] = {**info, "running": _running(info)}
        return out

    def _delete_locked(self, stack_name: str, stack_dir: Path) -> None:
        """Stop every instance and remove the stack's folder (lock held)."""
        if not stack_dir.exists():
            return
        try:
            self._destroy(*(stack_dir / i for i in sorted(self._sandboxes(stack_dir))))
            shutil.rmtree(stack_dir)
        except OSError as exc:
            raise StackFailure(f"stack {stack_name}: {exc}", str(exc)) from None
        LOG.info("stack %s deleted", stack_name)

    def _remove_instances(self, stack_name: str, stack_dir: Path, template: dict[str, Any],
                          removed: tuple[str, ...]) -> None:
        """Store the smaller template, then destroy the removed resources' sandboxes.

        The template goes first: should stopping fail half-way, the next
        ``apply`` no longer knows the instances and removes what is left.
        """
        sandboxes = [stack_dir / name for name in removed
                     if _plain_name(name) and (stack_dir / name).is_dir()]
        try:
            _write_json(stack_dir / TEMPLATE_FILE, template)
            if sandboxes:
                LOG.info("stack %s: removing instance(s) %s", stack_name,
                         ", ".join(s.name for s in sandboxes))
                self._destroy(*sandboxes)
        except OSError as exc:
            raise StackFailure(f"stack {stack_name}: {exc}", str(exc)) from None

    # -- instances ------------------------------------------------------------------
    def _ensure(self, stack: str, sandbox: Path, resource: dict[str, Any]) -> bool:
        """Make the instance run; True when its boot process was (re)started."""
        user_data = instance_user_data(resource)
        digest = hashlib.sha256((user_data or "").encode()).hexdigest()
        info = _read_info(sandbox)
        if info:
            if info.get("user_data_sha256") == digest:
                if _running(info) or not user_data:
                    return False
                if not info.get("pid"):
                    LOG.warning("stack %s: instance %s was being started by a conductor that "
                                "stopped; what it started is stopped first", stack,
                                sandbox.name)
                LOG.info("stack %s: restarting instance %s", stack, sandbox.name)
                self._destroy(sandbox, keep=True)   # its orphans, if any; files stay
            else:
                LOG.info("stack %s: replacing instance %s (new user data)", stack,
                         sandbox.name)
                self._destroy(sandbox)
        sandbox.mkdir(parents=True, exist_ok=True)
        info = {"instance": sandbox.name, "user_data_sha256": digest,
                "address": info.get("address") or self._allocate_address(stack, sandbox.name)}
        if not user_data:   # a VM without user data: nothing runs in it
            _write_json(sandbox / "instance.json", info)
            return False
        info["token"] = uuid.uuid4().hex
        # the token is on disk before the boot process starts: if this conductor
        # dies before it writes the pid, the next apply still finds (by token)
        # and stops what was started, instead of starting a second agent
        _write_json(sandbox / "instance.json", info)
        script = sandbox / "user-data"
        script.write_text(user_data)
        (sandbox / "etc").mkdir(exist_ok=True)
        (sandbox / "work").mkdir(exist_ok=True)
        with open(sandbox / "console.log", "ab") as log:
            process = subprocess.Popen(
                ["/bin/sh", str(script)], cwd=sandbox, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=self._environment(stack, sandbox, info["address"],
                                                     info["token"]),
                start_new_session=True, close_fds=True)
        with _children_lock:
            _children[process.pid] = process
        stat = _stat(process.pid)
        info.update(pid=process.pid, start_time=stat[2] if stat else None,
                    started_at=time.time())
        _write_json(sandbox / "instance.json", info)
        LOG.info("stack %s: instance %s started (pid %d)", stack, sandbox.name, process.pid)
        return True

    def _check_started(self, stack: str, stack_dir: Path, started: list[str]) -> None:
        """Wait ``start_grace`` s; fail on boot processes that ended or use memory://."""
        deadline = time.monotonic() + self.start_grace
        failed: dict[str, str] = {}
        while True:
            for instance in started:
                if instance not in failed:
                    info = _read_info(stack_dir / instance)
                    if not _running(info):
                        code = _exit_code(info.get("pid"))
                        failed[instance] = ("its boot process exited" +
                                            (f" with code {code}" if code is not None else ""))
            if len(failed) == len(started) or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        for instance in started:
            if instance in failed:
                continue
            url = _broker_url(stack_dir / instance / "etc" / "agent.conf")
            if url is not None and is_in_memory(url) \
                    and not self.allow_memory_broker:
                self._destroy(stack_dir / instance, keep=True)
                failed[instance] = ("its agent is configured with the in-process memory:// "
                                    "broker; local cloud agents are other processes and need "
                                    "a shared broker ([broker] url = filesystem:///folder "
                                    "or amqp://...)")
        if failed:
            parts = []
            for instance, why in failed.items():
                tail = _tail(stack_dir / instance / "console.log")
                parts.append(f"instance {instance}: {why}" + (f"; log:\n{tail}" if tail else ""))
            reason = "; ".join(f"instance {i}: {w}" for i, w in failed.items())
            raise StackFailure(f"stack {stack} failed: " + "\n".join(parts), reason)

    def _destroy(self, *sandboxes: Path, keep: bool = False) -> None:
        """Stop the instances (all at once) and, unless ``keep``, remove their folders."""
        _stop_instances([_read_info(s) for s in sandboxes], self.stop_timeout)
        if not keep:
            for sandbox in sandboxes:
                shutil.rmtree(sandbox, ignore_errors=False)

    def _environment(self, stack: str, sandbox: Path, address: str,
                     token: str) -> dict[str, str]:
        env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
        bin_dir = self._bin_dir()
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
        env.update(HOME=str(sandbox), FORNACE_ETC=str(sandbox / "etc"),
                   FORNACE_AGENT_WORK_DIR=str(sandbox / "work"), FORNACE_SET_HOSTNAME="0",
                   FORNACE_STACK=stack, FORNACE_INSTANCE=sandbox.name,
                   FORNACE_INSTANCE_ADDRESS=address, PYTHONUNBUFFERED="1")
        env[TOKEN_VARIABLE] = token
        return env

    def _bin_dir(self) -> Path:
        """A ``fornace`` command running this interpreter and this Fornace."""
        bin_dir = self.state_dir / ".bin"
        wrapper = bin_dir / "fornace"
        # this interpreter finds its own Fornace: nothing is added to PYTHONPATH
        text = f"#!/bin/sh\nexec '{sys.executable}' -m fornace.cli \"$@\"\n"
        if not wrapper.is_file() or wrapper.read_text() != text:
            bin_dir.mkdir(parents=True, exist_ok=True)
            tmp = bin_dir / f".fornace.{os.getpid()}.{threading.get_ident()}"
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, wrapper)
        return bin_dir

    def _allocate_address(self, stack: str, instance: str) -> str:
        """A loopback address no other instance of this cloud has.

        Derived from the stack and instance names (the same instance gets the
        same address after a replacement), the next one when taken.
        """
        with self._locked(".addresses"):
            taken = {_read_info(self.state_dir / s / i).get("address")
                     for s in self._sandboxes(self.state_dir)
                     for i in self._sandboxes(self.state_dir / s)} | self._handed_out
            seed = int.from_bytes(hashlib.sha256(f"{stack}/{instance}".encode()).digest()[:4],
                                  "big")
            for step in range(ADDRESS_SPACE):
                number = (seed + step) % ADDRESS_SPACE
                address = "127.{}.{}.{}".format(1 + number // (254 * 254),
                                                number // 254 % 254, 1 + number % 254)
                if address not in taken:
                    self._handed_out.add(address)   # before its instance.json is written
                    return address
        raise StackFailure(f"stack {stack}: no free loopback address left", "no address")

    # -- helpers --------------------------------------------------------------------
    def _stack_dir(self, name: str) -> Path:
        if not _plain_name(name):
            raise StackFailure(f"stack name {name!r} cannot be a folder name",
                               "invalid stack name")
        return self.state_dir / name

    @staticmethod
    def _check_instance_name(stack: str, name: str) -> None:
        if not _plain_name(name) or name in RESERVED:
            raise StackFailure(f"stack {stack}: instance name {name!r} cannot be a folder name",
                               "invalid instance name")

    @staticmethod
    def _load_template(stack_dir: Path) -> dict[str, Any]:
        path = stack_dir / TEMPLATE_FILE
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise StackFailure(f"{path}: {exc}", "corrupt stack template") from None
        return data if isinstance(data, dict) else {}

    @staticmethod
    def _sandboxes(stack_dir: Path) -> set[str]:
        if not stack_dir.is_dir():
            return set()
        return {p.name for p in stack_dir.iterdir()
                if p.is_dir() and not p.name.startswith(".")}

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        lock_dir = self.state_dir / ".locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        with open(lock_dir / f"{name}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


# -- templates ----------------------------------------------------------------------
def instance_resources(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    resources = template.get("Resources") or template.get("resources") or {}
    if not isinstance(resources, dict):
        return {}
    return {name: res for name, res in resources.items()
            if isinstance(res, dict) and res.get("Type", res.get("type")) in INSTANCE_TYPES}


def instance_user_data(resource: dict[str, Any]) -> str | None:
    props = resource.get("Properties") or resource.get("properties") or {}
    if not isinstance(props, dict):
        return None
    value = props.get("UserData", props.get("user_data"))
    return _plain_text(value)


def _plain_text(value: Any) -> str | None:
    """A string, ``Fn::Base64`` of one, or ``Fn::Join`` of strings; else None."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Fn::Base64":
            return _plain_text(arg)
        if key == "Fn::Join" and isinstance(arg, list) and len(arg) == 2 \
                and isinstance(arg[0], str) and isinstance(arg[1], list):
            parts = [_plain_text(p) for p in arg[1]]
            if all(p is not None for p in parts):
                return arg[0].join(parts)  # type: ignore[arg-type]
    return None


def evaluate_outputs(template: dict[str, Any], instances: Mapping[str, str],
                     parameters: dict[str, Any]) -> dict[str, Any]:
    """The template's outputs; ``instances`` maps instance names to addresses."""
    outputs = template.get("Outputs") or template.get("outputs") or {}
    if not isinstance(outputs, dict):
        return {}
    params = {}
    declared = template.get("Parameters") or template.get("parameters") or {}
    if isinstance(declared, dict):
        for key, spec in declared.items():
            if isinstance(spec, dict):
                default = spec.get("Default", spec.get("default"))
                if default is not None:
                    params[key] = default
    params.update(parameters or {})
    result = {}
    for key, spec in outputs.items():
        value = spec.get("Value", spec.get("value")) if isinstance(spec, dict) else None
        result[key] = _evaluate(value, instances, params)
    return result


def _evaluate(value: Any, instances: Mapping[str, str], params: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key in ("Fn::GetAtt", "get_attr"):
                if isinstance(arg, list) and len(arg) >= 2 and arg[0] in instances \
                        and arg[1] in ADDRESS_ATTRIBUTES:
                    return instances[arg[0]]
                return None
            if key in ("Ref", "get_resource", "get_param"):
                if isinstance(arg, str) and key != "get_param" and arg in instances:
                    return arg
                if isinstance(arg, str) and key != "get_resource":
                    return params.get(arg)
                return None
            if key.startswith("Fn::") or key in ("get_file", "str_replace", "list_join"):
                return None
        return {k: _evaluate(v, instances, params) for k, v in value.items()}
    if isinstance(value, list):
        return [_evaluate(v, instances, params) for v in value]
    return value


# -- processes ------------------------------------------------------------------------
def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start time) of a process, from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _poll(pid: int) -> int | None:
    """Reap our own child if it ended; its exit code (None: running or not ours)."""
    with _children_lock:
        process = _children.get(pid)
    return None if process is None else process.poll()


def _exit_code(pid: Any) -> int | None:
    if not pid:
        return None
    return _poll(int(pid))   # it may have ended without being reaped yet


def _running(info: dict[str, Any]) -> bool:
    pid = info.get("pid")
    if not pid:
        return False
    _poll(int(pid))
    stat = _stat(int(pid))
    if stat is None or stat[0] in ("Z", "X"):
        return False
    return info.get("start_time") is None or stat[2] == info["start_time"]


def _members(infos: list[dict[str, Any]]) -> list[int]:
    """Live processes of instances: each one's boot process group, and every process
    carrying its ``FORNACE_INSTANCE_TOKEN`` (commands run by the agent start
    their own sessions, and servers they leave behind belong to the instance
    too), started no earlier than its boot process.  One pass over /proc."""
    groups = {int(i["pid"]): i.get("start_time") for i in infos if i.get("pid")}
    tokens = {f"{TOKEN_VARIABLE}={i['token']}".encode(): i.get("start_time")
              for i in infos if i.get("token")}
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is None or stat[0] in ("Z", "X"):
            continue
        if stat[1] in groups:
            start_time = groups[stat[1]]
        else:
            found = [tokens[m] for m in _environ(int(entry)) if m in tokens] if tokens else []
            if not found:
                continue
            start_time = found[0]
        if start_time is None or stat[2] >= start_time:
            members.append(int(entry))
    return members


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _signal_all(infos: list[dict[str, Any]], signum: int) -> None:
    for member in _members(infos):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, signum)


def _stop_instances(infos: list[dict[str, Any]], timeout: float) -> None:
    """SIGTERM to every process of the instances at once, SIGKILL after ``timeout`` s."""
    infos = [i for i in infos if i.get("pid") or i.get("token")]
    if not infos:
        return

    def gone() -> bool:
        for info in infos:
            if info.get("pid"):
                _poll(int(info["pid"]))
        return not _members(infos)

    if not gone():
        _signal_all(infos, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while not gone() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not gone():
            LOG.warning("instance(s) %s did not stop on SIGTERM; killing them",
                        ", ".join(str(i.get("instance", i.get("pid"))) for i in infos))
            _signal_all(infos, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while not gone() and time.monotonic() < deadline:
                time.sleep(0.05)
    for info in infos:
        if info.get("pid"):
            _forget(int(info["pid"]))


def _forget(pid: int) -> None:
    with _children_lock:
        process = _children.pop(pid, None)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=1)


# -- files --------------------------------------------------------------------------
def _plain_name(name: Any) -> bool:
    return (isinstance(name, str) and bool(name) and name not in (".", "..")
            and not name.startswith(".") and "/" not in name and "\\" not in name
            and "\0" not in name and len(name) <= 200)


def _read_info(sandbox: Path) -> dict[str, Any]:
    try:
        data = json.loads((sandbox / "instance.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


def _broker_url(conf_path: Path) -> str | None:
    if not conf_path.is_file():
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(conf_path.read_text())
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    return parser.defaults().get("broker_url", "memory://")


def _tail(path: Path, size: int = LOG_TAIL) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(handle.tell() - size, 0))
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
