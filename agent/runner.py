"""Running the commands of one plan, one after the other.

Each command is a child process in its own process group; its stdout and
stderr go to files in the plan's folder (not pipes), so a script that
leaves a daemon running in the background does not keep the agent waiting.
A command still running after ``command_timeout`` seconds gets SIGTERM, then
SIGKILL 5 s later, and is reported as an exception.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from .config import AgentSettings
from .plan import V2, Command, Plan

LOG = logging.getLogger(__name__)

STDERR_TAIL = 2000     # characters of stderr quoted in an exception message
KILL_GRACE = 5.0       # seconds between SIGTERM and SIGKILL
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INTERPRETERS = {".sh": "shell", ".py": "python", ".ps1": "powershell"}

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

    def run_plan(self, plan: Plan, key: str) -> dict[str, Any]:
        """Run every command; stop at the first failing one; the 0.2 result."""
        folder = self.settings.work_dir / "plans" / safe_dir_name(key)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, content in plan.scripts:
            path = folder / name
            path.write_bytes(content)
            path.chmod(0o700)
            paths.append(path)
        entries: list[dict[str, Any]] = []
        for index, command in enumerate(plan.commands):
            try:
                if plan.version == V2:
                    lines = self._run_v2(plan, folder, index, command)
                else:
                    lines = self._run_powershell(plan, folder, index, command, paths)
            except CommandError as exc:
                LOG.warning("plan %s: command %d (%s) failed: %s: %s", plan.id, index,
                            command.name, exc.kind, exc)
                entries.append({"IsException": True, "Result": [exc.kind, str(exc)]})
                break
            entries.append({"IsException": False, "Result": lines})
        self.prune(keep=folder)
        return {"IsException": False, "Result": entries}

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
    def _run_v2(self, plan: Plan, folder: Path, index: int, command: Command) -> list[str]:
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
        return self._execute(plan, folder, index, command, argv, env)

    def _run_powershell(self, plan: Plan, folder: Path, index: int, command: Command,
                        scripts: list[Path]) -> list[str]:
        pwsh = self._powershell()
        argv = [pwsh, "-NoProfile", "-NonInteractive", "-Command", PS_WRAPPER]
        env = {"FORNACE_SCRIPTS": os.pathsep.join(str(p) for p in scripts),
               "FORNACE_FUNCTION": command.name}
        return self._execute(plan, folder, index, command, argv, env)

    def _powershell(self) -> str:
        found = self.find_powershell()
        if found is None:
            raise CommandError("PowerShellNotInstalled",
                               "PowerShell is not installed on this unit")
        return found

    def _execute(self, plan: Plan, folder: Path, index: int, command: Command,
                 argv: list[str], extra_env: dict[str, str]) -> list[str]:
        env = dict(os.environ)
        env.update(extra_env)
        env.update({"FORNACE_WORK_DIR": str(self.settings.work_dir),
                    "FORNACE_PLAN_DIR": str(folder),
                    "FORNACE_PLAN_ID": plan.id or "",
                    "FORNACE_COMMAND_INDEX": str(index)})
        stdout_path = folder / f"{index:03d}.stdout"
        stderr_path = folder / f"{index:03d}.stderr"
        stdin_path = folder / f"{index:03d}.stdin.json"
        stdin_path.write_text(json.dumps(command.arguments), encoding="utf-8")
        timeout = self.settings.command_timeout
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
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill(process)
                raise CommandError("TimeoutError",
                                   f"{command.name} did not finish within {timeout:g} seconds "
                                   f"and was killed{_tail(stderr_path)}") from None
        output = stdout_path.read_text(encoding="utf-8", errors="replace")
        if code != 0:
            raise CommandError("CommandFailed",
                               f"{command.name} exited with code {code}{_tail(stderr_path)}")
        return output.splitlines()


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
