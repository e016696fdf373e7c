"""Running the commands of one plan, one after the other.

Each command is a child process in its own process group; its stdout and
stderr go to files in the plan's folder (not pipes), so a script that
leaves a daemon running in the background does not keep the agent waiting.
A command still running after ``command_timeout`` seconds gets SIGTERM, then
SIGKILL 5 s later, and is reported as an exception.

While a command runs, its output files are read line by line as they grow
(``on_line``), so the agent can stream the log back before the answer.

The exit code of a FormatVersion 2.0 command can ask the agent for more than
success (Digital Rebar's convention, bit by bit): 16 stop the agent, 32 power
off, 64 reboot, 128 the plan is incomplete (run it again from this command
after a restart), 160 incomplete + power off, 192 incomplete + reboot.  See
:data:`EXIT_SIGNALS`; 0.2 PowerShell plans keep "non-zero is an error".
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from fornace.agent.config import AgentSettings
from fornace.agent.plan import V2, Command, Plan
from fornace.common import contract

LOG = logging.getLogger(__name__)

STDERR_TAIL = 2000     # characters of stderr quoted in an exception message
KILL_GRACE = 5.0       # seconds between SIGTERM and SIGKILL
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INTERPRETERS = {".sh": "shell", ".py": "python", ".ps1": "powershell"}
TAIL_INTERVAL = 0.1    # seconds between two reads of a running command's output
MAX_LOG_LINE = 8192    # longer output lines are streamed cut (the result keeps them)
PLAN_FILE = "plan.json"   # the plan body kept for the re-run of an incomplete plan

LineSink = Callable[[str], None]


@dataclass(frozen=True)
class ExitSignal:
    """What a 2.0 command's exit code asks of the agent besides "this command is done"."""
    action: str | None          # "stop", "poweroff", "reboot" or None
    incomplete: bool = False    # run the plan again from this command


EXIT_SIGNALS = {
    16: ExitSignal("stop"), 32: ExitSignal("poweroff"), 64: ExitSignal("reboot"),
    128: ExitSignal(None, incomplete=True), 160: ExitSignal("poweroff", incomplete=True),
    192: ExitSignal("reboot", incomplete=True),
}


@dataclass
class PlanRun:
    """The commands run so far and what the last one asked for.

    ``result`` is the 0.2 answer of the commands run (for an incomplete plan,
    those finished before ``command``); ``signal`` is None unless a command's
    exit code was one of :data:`EXIT_SIGNALS`, which ends the plan there.
    """
    result: dict[str, Any]
    signal: ExitSignal | None = None
    command: int | None = None       # index of the command that signalled
    name: str = ""                   # its name
    code: int = 0                    # its exit code

# Runs in PowerShell: dot-source the plan's scripts, read the arguments (JSON
# on stdin) into a hashtable and call the function with them splatted, which
# is ``Name -Arg1 value1 -Arg2 value2``.  Every output object is one line.
PS_WRAPPER = r"""
$ErrorActionPreference = 'Stop'
try {
    foreach ($script in $env:FORNACE_SCRIPTS.Split([IO.Path]::PathSeparator)) {
        if ($script) { . $script }
    }
    $json = [Console]::In.ReadToEnd()
    $arguments = @{}
    if ($json.Trim()) {
        (ConvertFrom-Json $json).psobject.Properties | ForEach-Object {
            $arguments[$_.Name] = $_.Value }
    }
    & $env:FORNACE_FUNCTION @arguments | ForEach-Object { $_ | Out-String -Stream } |
        Where-Object { $_ -ne '' }
} catch {
    [Console]::Error.WriteLine($_.Exception.GetType().FullName + ': ' + $_.Exception.Message)
    exit 1
}
"""


class CommandError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


def safe_dir_name(plan_id: str | None) -> str:
    text = plan_id or "no-id"
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', text)[:64]}-{digest}"


class Runner:
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def find_powershell(self) -> str | None:
        if self.settings.powershell:
            return shutil.which(self.settings.powershell)
        return shutil.which("pwsh") or shutil.which("powershell")

    def plan_folder(self, key: str) -> Path:
        return self.settings.work_dir / "plans" / safe_dir_name(key)

    def run_plan(self, plan: Plan, key: str, *, start: int = 0,
                 done: Sequence[dict[str, Any]] = (),
                 on_line: LineSink | None = None) -> PlanRun:
        """Run the commands from ``start``; stop at the first failing or signalling one.

        ``done`` are the result entries of the commands before ``start`` (the
        re-run of an incomplete plan keeps them); ``on_line`` gets every
        output line while a command runs.  It returns as soon as the last
        command ended, so that the caller journals how the plan ended before
        anything else (then :meth:`prune`).
        """
        folder = self.plan_folder(key)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, content in plan.scripts:
            path = folder / name
            path.write_bytes(content)
            path.chmod(0o700)
            paths.append(path)
        entries: list[dict[str, Any]] = list(done)
        run = PlanRun({"IsException": False, "Result": entries})
        for index in range(start, len(plan.commands)):
            command = plan.commands[index]
            try:
                lines, code = self._run_command(plan, folder, index, paths, on_line)
            except CommandError as exc:
                LOG.warning("plan %s: command %d (%s) failed: %s: %s", plan.id, index,
                            command.name, exc.kind, exc)
                entries.append(contract.exception_result(exc.kind, str(exc)))
                break
            asked = EXIT_SIGNALS.get(code)
            if asked is None:
                entries.append({"IsException": False, "Result": lines})
                continue
            LOG.info("plan %s: command %d (%s) exited %d: %s%s", plan.id, index,
                     command.name, code, "incomplete" if asked.incomplete else "done",
                     f", {asked.action}" if asked.action else "")
            run.signal, run.command, run.name, run.code = asked, index, command.name, code
            if not asked.incomplete:     # an incomplete command's output is no result
                entries.append({"IsException": False, "Result": lines})
            break
        return run

    def _run_command(self, plan: Plan, folder: Path, index: int, scripts: list[Path],
                     on_line: LineSink | None) -> tuple[list[str], int]:
        command = plan.commands[index]
        if plan.version == V2:
            return self._run_v2(plan, folder, index, command, on_line)
        return self._run_powershell(plan, folder, index, command, scripts, on_line)

    def save_plan(self, plan: Plan, key: str) -> None:
        """Keep the plan body in its folder (owner only: arguments may be secret)."""
        path = self.plan_folder(key) / PLAN_FILE
        partial = path.with_name(PLAN_FILE + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(plan.raw, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)

    def load_plan(self, key: str) -> dict[str, Any]:
        """The body kept by :meth:`save_plan` (OSError / ValueError when it is gone)."""
        return json.loads((self.plan_folder(key) / PLAN_FILE).read_text(encoding="utf-8"))

    def forget_inputs(self, key: str) -> int:
        """Delete the plan's inputs from its folder (the arguments on each
        command's stdin, the kept plan body): they may hold passwords and are
        not needed once the plan is answered.  How many files went."""
        folder = self.plan_folder(key)
        removed = 0
        for path in [folder / PLAN_FILE, *folder.glob("*.stdin.json")]:
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    def prune(self, keep: Path | None = None) -> None:
        """Remove plan folders beyond the newest ``keep_plans`` (never ``keep``)."""
        root = self.settings.work_dir / "plans"
        try:
            folders = sorted((p for p in root.iterdir() if p.is_dir() and p != keep),
                             key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            return
        for old in folders[max(self.settings.keep_plans - 1, 0):]:
            shutil.rmtree(old, ignore_errors=True)

    # -- one command ------------------------------------------------------------
    def _run_v2(self, plan: Plan, folder: Path, index: int, command: Command,
                on_line: LineSink | None) -> tuple[list[str], int]:
        extension = os.path.splitext(command.name)[1].lower()
        which = INTERPRETERS.get(extension)
        if which is None:
            raise CommandError("UnsupportedScriptType",
                               f"no interpreter for {command.name!r} (supported: "
                               f"{', '.join(sorted(INTERPRETERS))})")
        script = str(folder / command.name)
        if which == "powershell":
            pwsh = self._powershell()
            argv = [pwsh, "-NoProfile", "-NonInteractive", "-File", script]
        else:
            interpreter = getattr(self.settings, which)
            found = shutil.which(interpreter)
            if found is None:
                raise CommandError("InterpreterNotFound",
                                   f"{interpreter!r} (for {command.name}) is not installed "
                                   "on this unit")
            argv = [found, script]
        env = {}
        for name, value in command.arguments.items():
            if ENV_NAME.match(name):
                env[name] = _env_value(value)
            else:
                LOG.info("plan %s: argument %r of %s is no environment variable name; "
                         "it is only on stdin", plan.id, name[:40], command.name)
        return self._execute(plan, folder, index, command, argv, env, on_line,
                             signals=True)

    def _run_powershell(self, plan: Plan, folder: Path, index: int, command: Command,
                        scripts: list[Path], on_line: LineSink | None) -> tuple[list[str], int]:
        pwsh = self._powershell()
        argv = [pwsh, "-NoProfile", "-NonInteractive", "-Command", PS_WRAPPER]
        env = {"FORNACE_SCRIPTS": os.pathsep.join(str(p) for p in scripts),
               "FORNACE_FUNCTION": command.name}
        return self._execute(plan, folder, index, command, argv, env, on_line)

    def _powershell(self) -> str:
        found = self.find_powershell()
        if found is None:
            raise CommandError("PowerShellNotInstalled",
                               "PowerShell is not installed on this unit")
        return found

    def _execute(self, plan: Plan, folder: Path, index: int, command: Command,
                 argv: list[str], extra_env: dict[str, str], on_line: LineSink | None,
                 signals: bool = False) -> tuple[list[str], int]:
        """Run one command: (its stdout lines, its exit code).

        A non-zero exit code is a :class:`CommandError`, except (``signals``)
        those of :data:`EXIT_SIGNALS`.
        """
        env = dict(os.environ)
        env.update(extra_env)
        env.update({"FORNACE_WORK_DIR": str(self.settings.work_dir),
                    "FORNACE_PLAN_DIR": str(folder),
                    "FORNACE_PLAN_ID": plan.id or "",
                    "FORNACE_COMMAND_INDEX": str(index)})
        stdout_path = folder / f"{index:03d}.stdout"
        stderr_path = folder / f"{index:03d}.stderr"
        stdin_path = folder / f"{index:03d}.stdin.json"
        # the arguments may hold passwords: readable by the agent's user only
        descriptor = os.open(stdin_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(command.arguments))
        timeout = self.settings.command_timeout or None   # None or 0: no limit
        LOG.info("plan %s: running command %d: %s", plan.id, index, command.name)
        with open(stdin_path, "rb") as stdin, open(stdout_path, "wb") as stdout, \
                open(stderr_path, "wb") as stderr:
            try:
                process = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr,
                                           cwd=self.settings.work_dir, env=env,
                                           start_new_session=True)
            except OSError as exc:
                raise CommandError("CommandNotStarted",
                                   f"{command.name}: cannot start {argv[0]!r}: "
                                   f"{exc.strerror or exc}") from None
            try:
                code = _wait(process, timeout, stdout_path, stderr_path, on_line)
            except subprocess.TimeoutExpired:
                _kill(process)
                raise CommandError("TimeoutError",
                                   f"{command.name} did not finish within {timeout:g} seconds "
                                   f"and was killed{_tail(stderr_path)}") from None
        output = stdout_path.read_text(encoding="utf-8", errors="replace")
        if code != 0 and not (signals and code in EXIT_SIGNALS):
            raise CommandError("CommandFailed",
                               f"{command.name} exited with code {code}{_tail(stderr_path)}")
        return output.splitlines(), code


def _wait(process: subprocess.Popen, timeout: float | None, stdout_path: Path,
          stderr_path: Path, on_line: LineSink | None) -> int:
    """Wait for the command, giving ``on_line`` its output lines as they are written.

    The output goes to files, not pipes (see the module docstring), so the
    files are read as they grow; a background daemon writing to them after
    the command ended is not waited for.  The end of the command is noticed
    at once (:class:`_Exit`), not at the next look of a polling loop.
    """
    deadline = None if not timeout else time.monotonic() + timeout
    tails = [_Tail(stdout_path), _Tail(stderr_path)] if on_line is not None else []
    with _Exit(process) as ended:
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(process.args, timeout or 0)
            step = left if on_line is None else min(TAIL_INTERVAL, left or TAIL_INTERVAL)
            code = ended.wait(step)
            if code is not None:
                break
            if on_line is not None:
                _emit(tails, on_line)
    if on_line is not None:
        _emit(tails, on_line, final=True)
    return code


class _Exit:
    """Waits for a child's end without polling: on its pidfd (Linux 5.3+), else
    with :meth:`subprocess.Popen.wait`, which polls with sleeps of up to 50 ms
    when given a timeout -- a few-millisecond script then cost up to 50 ms more."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.fd: int | None = None
        try:
            self.fd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):   # older kernel or Python: Popen.wait polls
            pass

    def __enter__(self) -> "_Exit":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def wait(self, timeout: float | None) -> int | None:
        """The exit code, or None when the child still runs after ``timeout`` s."""
        if self.fd is None:
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
        select.select([self.fd], [], [], timeout)
        return self.process.poll()


def _emit(tails: list["_Tail"], on_line: LineSink, final: bool = False) -> None:
    for tail in tails:
        for line in tail.read(final):
            on_line(line)


class _Tail:
    """The complete lines added to a file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self, final: bool = False) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return []
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        if len(self.partial) >= MAX_LOG_LINE or (final and self.partial):
            lines.append(self.partial)
            self.partial = b""
        return [line.rstrip(b"\r")[:MAX_LOG_LINE].decode("utf-8", "replace")
                for line in lines]


def _env_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value)


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    if not text:
        return ""
    if len(text) > STDERR_TAIL:
        text = "..." + text[-STDERR_TAIL:]
    return f"; stderr: {text}"


def _kill(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
