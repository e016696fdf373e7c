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
same port, as on two VMs.  Outputs are evaluated minimally, with those
addresses (:mod:`fornace.conductor.executors.cfnfunctions`); the processes
are started, watched and stopped through /proc
(:mod:`fornace.conductor.executors.processes`).

Each stack has a lease (:mod:`fornace.conductor.executors.leases`), not a
lock held across a step: ``apply``, ``remove`` and ``delete`` take it (waiting
while a live holder renews it), and every action that changes the cloud --
writing the stack's files, starting or stopping an instance's processes,
removing a folder -- is done only while the lease is still the holder's.  A
holder frozen in the middle of a step (SIGSTOP) stops renewing it; after the
lease time (``[conductor] lock_stale_after`` for the conductor, as for its
job lock) another takes it over -- a deletion after an abandon too -- and the
frozen one, when it wakes, is refused at its next action
(:class:`~fornace.conductor.executors.leases.LeaseLost`, naming the stack and
who took it) and changes nothing.

There is no isolation: the "VMs" are processes of the conductor's user.
"""
from __future__ import annotations

import configparser
import copy
import hashlib
import json
import logging
import os
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from fornace.common.broker import is_in_memory
from fornace.conductor.executors import processes
from fornace.conductor.executors.base import StackExecutor, StackFailure, StackRequest
from fornace.conductor.executors.cfn import merge, remove_resources
from fornace.conductor.executors.cfnfunctions import (evaluate_outputs, instance_resources,
                                                      instance_user_data)
from fornace.conductor.executors.leases import Lease, Leases
from fornace.conductor.executors.processes import TOKEN_VARIABLE

LOG = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"     # outputs of an instance without an address (no user data)
TEMPLATE_FILE = "template.json"
RESERVED = frozenset({TEMPLATE_FILE})
ADDRESS_SPACE = 254 * 254 * 254   # 127.1-254.0-253.1-254
LOG_TAIL = 2000
# environment variables a boot script inherits from the conductor (nothing secret)
INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONPATH")
LEASE_TIME = 60.0   # seconds a stack's silent holder keeps it (the default lock_stale_after)
ADDRESSES = ".addresses"   # the lease of the address allocation (not a stack name)

def cloud_dir(conf: Any) -> str:
    """``[conductor] cloud_dir``, else ``<[api] state_dir>/cloud``."""
    if conf.conductor.cloud_dir:
        return os.path.expanduser(conf.conductor.cloud_dir)
    return os.path.join(os.path.expanduser(conf.api.state_dir), "cloud")


class LocalStacks(StackExecutor):
    @classmethod
    def factory(cls, conf: Any) -> Callable[[Any], "LocalStacks"]:
        """One local cloud for every task (:meth:`from_conf`)."""
        stacks = cls.from_conf(conf)
        return lambda task: stacks

    @classmethod
    def from_conf(cls, conf: Any) -> "LocalStacks":
        """The local cloud in ``[conductor] cloud_dir``; a stack's lease lapses after
        ``[conductor] lock_stale_after`` s without renewal, the time after which the
        frozen conductor's job lock is taken over too."""
        return cls(cloud_dir(conf), lease_time=conf.conductor.lock_stale_after)

    def __init__(self, state_dir: str | Path, *, start_grace: float = 1.0,
                 stop_timeout: float = 10.0, allow_memory_broker: bool = False,
                 lease_time: float = LEASE_TIME) -> None:
        self.state_dir = Path(os.path.expanduser(str(state_dir))).resolve()
        self.start_grace = float(start_grace)
        self.stop_timeout = float(stop_timeout)
        self.allow_memory_broker = allow_memory_broker
        self.leases = Leases(self.state_dir / ".locks", lease_time)
        self._handed_out: set[str] = set()
        self._wrapper_written = False

    # -- StackExecutor ------------------------------------------------------------
    def apply(self, request: StackRequest) -> dict[str, Any]:
        name = request.stack_name
        stack_dir = self._stack_dir(name)
        with self.leases.held(name) as lease:
            self._refuse_if_deleted_meanwhile(lease, name)
            try:
                current = self._load_template(stack_dir)
                merged = merge(current, copy.deepcopy(request.template))
                resources = merged.get("Resources")
                if isinstance(resources, dict):
                    merged["Resources"] = {k: v for k, v in resources.items() if v is not None}
                instances = instance_resources(merged)
                for instance in instances:
                    self._check_instance_name(name, instance)
                with lease.fenced():
                    stack_dir.mkdir(parents=True, exist_ok=True)
                    _write_json(stack_dir / TEMPLATE_FILE, merged)
                removed = sorted(self._sandboxes(stack_dir) - set(instances))
                if removed:
                    LOG.info("stack %s: removing instance(s) %s", name, ", ".join(removed))
                    self._destroy(lease, *(stack_dir / old for old in removed))
                addresses = self._allocate_addresses(name, [
                    i for i in instances if not _read_info(stack_dir / i).get("address")])
                started = []
                for instance, resource in instances.items():
                    if self._ensure(lease, name, stack_dir / instance, resource,
                                    addresses.get(instance)):
                        started.append(instance)
            except OSError as exc:
                raise StackFailure(f"stack {name}: {exc}", str(exc)) from None
            if started:
                self._check_started(lease, name, stack_dir, started)
        addresses = {i: _read_info(stack_dir / i).get("address") or LOOPBACK for i in instances}
        return evaluate_outputs(merged, addresses, request.parameters)

    def delete(self, stack_name: str) -> None:
        stack_dir = self._stack_dir(stack_name)
        with self.leases.held(stack_name) as lease:
            self._delete_held(lease, stack_name, stack_dir)

    def remove(self, stack_name: str, resources: list[str]) -> dict[str, Any]:
        """Stop and remove exactly the removed instances; the others keep running.

        Outputs are evaluated as by ``apply``, except that parameters are not
        stored with the stack: a ``Ref`` to one gives its template default.
        """
        stack_dir = self._stack_dir(stack_name)
        with self.leases.held(stack_name) as lease:
            if not (stack_dir / TEMPLATE_FILE).is_file():
                return {}
            removal = remove_resources(self._load_template(stack_dir), resources, stack_name)
            if removal.empty:
                self._delete_held(lease, stack_name, stack_dir)
                return {}
            if removal.changed:
                self._remove_instances(lease, stack_name, stack_dir, removal.template,
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
            out[instance] = {**info, "running": processes.running(info)}
        return out

    def _delete_held(self, lease: Lease, stack_name: str, stack_dir: Path) -> None:
        """Stop every instance and remove the stack's folder (its lease held)."""
        if not stack_dir.exists():
            return
        try:
            self._destroy(lease, *(stack_dir / i for i in sorted(self._sandboxes(stack_dir))))
            _remove_folder(lease, stack_dir, deletion_mark=self._deletion_mark(stack_name))
        except OSError as exc:
            raise StackFailure(f"stack {stack_name}: {exc}", str(exc)) from None
        LOG.info("stack %s deleted", stack_name)

    def _deletion_mark(self, stack_name: str) -> Path:
        """The file saying under which lease token the stack was last deleted."""
        return self.leases.folder / f"{stack_name}.deleted"

    def _refuse_if_deleted_meanwhile(self, lease: Lease, stack_name: str) -> None:
        """An apply that waited for the lease while the stack was deleted was asked
        for before the deletion (a job abandoned or taken over, whose round waited
        on the stack): it must not make the stack again."""
        try:
            deleted = int(json.loads(self._deletion_mark(stack_name).read_text()))
        except (OSError, ValueError, TypeError):
            return
        if deleted >= lease.asked_at:
            raise StackFailure(f"stack {stack_name} was deleted (lease token {deleted}) while "
                               f"this round waited for it: it is not made again",
                               f"stack {stack_name} deleted meanwhile")

    def _remove_instances(self, lease: Lease, stack_name: str, stack_dir: Path,
                          template: dict[str, Any], removed: tuple[str, ...]) -> None:
        """Store the smaller template, then destroy the removed resources' sandboxes.

        The template goes first: should stopping fail half-way, the next
        ``apply`` no longer knows the instances and removes what is left.
        """
        sandboxes = [stack_dir / name for name in removed
                     if _plain_name(name) and (stack_dir / name).is_dir()]
        try:
            with lease.fenced():
                _write_json(stack_dir / TEMPLATE_FILE, template)
            if sandboxes:
                LOG.info("stack %s: removing instance(s) %s", stack_name,
                         ", ".join(s.name for s in sandboxes))
                self._destroy(lease, *sandboxes)
        except OSError as exc:
            raise StackFailure(f"stack {stack_name}: {exc}", str(exc)) from None

    # -- instances ------------------------------------------------------------------
    def _ensure(self, lease: Lease, stack: str, sandbox: Path, resource: dict[str, Any],
                address: str | None = None) -> bool:
        """Make the instance run; True when its boot process was (re)started.
        ``address``: the one allocated for it when it had none."""
        user_data = instance_user_data(resource)
        digest = hashlib.sha256((user_data or "").encode()).hexdigest()
        info = _read_info(sandbox)
        if info:
            if info.get("user_data_sha256") == digest:
                if processes.running(info) or not user_data:
                    return False
                if not info.get("pid"):
                    LOG.warning("stack %s: instance %s was being started by a conductor that "
                                "stopped; what it started is stopped first", stack,
                                sandbox.name)
                LOG.info("stack %s: restarting instance %s", stack, sandbox.name)
                self._destroy(lease, sandbox, keep=True)   # its orphans, if any; files stay
            else:
                LOG.info("stack %s: replacing instance %s (new user data)", stack,
                         sandbox.name)
                self._destroy(lease, sandbox)
        info = {"instance": sandbox.name, "user_data_sha256": digest,
                "address": info.get("address") or address
                or self._allocate_addresses(stack, [sandbox.name])[sandbox.name]}
        if not user_data:   # a VM without user data: nothing runs in it
            with lease.fenced():
                sandbox.mkdir(parents=True, exist_ok=True)
                _write_json(sandbox / "instance.json", info)
            return False
        info["token"] = uuid.uuid4().hex
        env = self._environment(stack, sandbox, info["address"], info["token"])
        script = sandbox / "user-data"
        with lease.fenced():
            # the token is on disk before the boot process starts: if this conductor
            # dies (or freezes and loses the lease) before it writes the pid, the next
            # apply still finds (by token) and stops what was started, instead of
            # starting a second agent
            sandbox.mkdir(parents=True, exist_ok=True)
            _write_json(sandbox / "instance.json", info)
            script.write_text(user_data)
            (sandbox / "etc").mkdir(exist_ok=True)
            (sandbox / "work").mkdir(exist_ok=True)
            with open(sandbox / "console.log", "ab") as log:
                process = processes.start(["/bin/sh", str(script)], sandbox, log, env)
        stat = processes.stat(process.pid)
        info.update(pid=process.pid, start_time=stat[2] if stat else None,
                    started_at=time.time())
        with lease.fenced():
            _write_json(sandbox / "instance.json", info)
        LOG.info("stack %s: instance %s started (pid %d)", stack, sandbox.name, process.pid)
        return True

    def _check_started(self, lease: Lease, stack: str, stack_dir: Path,
                       started: list[str]) -> None:
        """Wait ``start_grace`` s; fail on boot processes that ended or use memory://."""
        deadline = time.monotonic() + self.start_grace
        failed: dict[str, str] = {}
        infos = {instance: _read_info(stack_dir / instance) for instance in started}
        while True:
            for instance in started:
                if instance not in failed:
                    info = infos[instance]
                    if not processes.running(info):
                        code = processes.exit_code(info.get("pid"))
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
                self._destroy(lease, stack_dir / instance, keep=True)
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

    def _destroy(self, lease: Lease, *sandboxes: Path, keep: bool = False) -> None:
        """Stop the instances (all at once) and, unless ``keep``, remove their folders."""
        processes.stop_instances([_read_info(s) for s in sandboxes], self.stop_timeout,
                                 fence=lease.fenced)
        if not keep:
            for sandbox in sandboxes:
                _remove_folder(lease, sandbox)

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
        if self._wrapper_written and wrapper.is_file():   # read once, not per instance
            return bin_dir
        # this interpreter finds its own Fornace: nothing is added to PYTHONPATH
        text = f"#!/bin/sh\nexec '{sys.executable}' -m fornace.cli \"$@\"\n"
        if not wrapper.is_file() or wrapper.read_text() != text:
            bin_dir.mkdir(parents=True, exist_ok=True)
            tmp = bin_dir / f".fornace.{os.getpid()}.{threading.get_ident()}"
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, wrapper)
        self._wrapper_written = True
        return bin_dir

    def _allocate_addresses(self, stack: str, instances: list[str]) -> dict[str, str]:
        """A loopback address for each instance, that no other instance of this cloud
        has; one look at the cloud for all of them (a stack's units start together).

        Derived from the stack and instance names (the same instance gets the
        same address after a replacement), the next one when taken.
        """
        if not instances:
            return {}
        found: dict[str, str] = {}
        with self.leases.held(ADDRESSES) as lease, lease.fenced():
            taken = {_read_info(self.state_dir / s / i).get("address")
                     for s in self._sandboxes(self.state_dir)
                     for i in self._sandboxes(self.state_dir / s)} | self._handed_out
            for instance in instances:
                seed = int.from_bytes(
                    hashlib.sha256(f"{stack}/{instance}".encode()).digest()[:4], "big")
                for step in range(ADDRESS_SPACE):
                    number = (seed + step) % ADDRESS_SPACE
                    address = "127.{}.{}.{}".format(1 + number // (254 * 254),
                                                    number // 254 % 254, 1 + number % 254)
                    if address not in taken:
                        taken.add(address)
                        self._handed_out.add(address)   # before its instance.json is written
                        found[instance] = address
                        break
                else:
                    raise StackFailure(f"stack {stack}: no free loopback address left",
                                       "no address")
        return found

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


def _remove_folder(lease: Lease, folder: Path, deletion_mark: Path | None = None) -> None:
    """Remove a sandbox or a stack's folder: moved aside while the lease is held (a
    holder that lost it cannot remove what its successor made there since), then
    deleted without holding anything.  ``deletion_mark`` gets the lease's token in
    the same fenced step."""
    aside = folder.with_name(f".removed-{folder.name}-{lease.token}-{uuid.uuid4().hex[:8]}")
    with lease.fenced():
        if deletion_mark is not None:
            _write_json(deletion_mark, lease.token)
        try:
            folder.rename(aside)
        except FileNotFoundError:
            return
    shutil.rmtree(aside)


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
