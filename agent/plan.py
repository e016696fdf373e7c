"""Reading execution plans (0.2 and the Linux extension ``FormatVersion 2.0``).

A plan that cannot be read raises :class:`PlanError`; the agent answers it
with the top-level exception ``{"IsException": true, "Result": [type, message]}``.
See ``agent/README.md`` for the formats.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any

from fornace.common import jsonlimits

V02 = "0.2"       # plans without FormatVersion: PowerShell functions
V2 = "2.0"        # Linux extension: named scripts run by their extension
FORMAT_VERSIONS = (V2,)

#: script file names allowed in ScriptNames (no folders, no hidden files)
SCRIPT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")


class PlanError(Exception):
    """A plan that cannot run at all; ``kind`` is the exception type reported."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


@dataclass
class Command:
    name: str
    arguments: dict[str, Any]


@dataclass
class Plan:
    id: str | None
    version: str
    scripts: list[tuple[str, bytes]]        # (file name, content), in plan order
    commands: list[Command]
    reboot: int = 0                          # RebootOnCompletion 0/1/2
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


def plan_id(body: Any) -> str | None:
    """The ``ID`` of a plan body, whatever else is wrong with it."""
    if isinstance(body, dict) and isinstance(body.get("ID"), str) and body["ID"]:
        return body["ID"]
    return None


def decode_body(body: Any) -> Any:
    """bytes / str JSON -> value (PlanError MalformedPlan when it is not JSON)."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        try:
            body = bytes(body).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise PlanError("MalformedPlan", f"the plan is not UTF-8 (byte {exc.start})") \
                from None
    if isinstance(body, str):
        try:
            return jsonlimits.loads(body)
        except json.JSONDecodeError as exc:
            raise PlanError("MalformedPlan", f"the plan is not valid JSON (line {exc.lineno}"
                                             f":{exc.colno}: {exc.msg})") from None
        except jsonlimits.JsonLimitError as exc:
            raise PlanError("MalformedPlan", f"the plan cannot be read: {exc.message}") \
                from None
    return body


def parse_plan(body: Any) -> Plan:
    body = decode_body(body)
    if not isinstance(body, dict):
        raise PlanError("MalformedPlan", f"the plan must be a JSON object, got {_kind(body)}")
    version = body.get("FormatVersion")
    if version is None:
        version = V02
    elif not isinstance(version, str) or version not in FORMAT_VERSIONS:
        raise PlanError("UnsupportedFormatVersion",
                        f"FormatVersion {str(version)[:20]!r} is not supported by this agent "
                        f"(supported: none for 0.2 plans, {', '.join(FORMAT_VERSIONS)})")

    scripts = body.get("Scripts", [])
    if not isinstance(scripts, list) or not all(isinstance(s, str) for s in scripts):
        raise PlanError("MalformedPlan", "Scripts must be a list of base64 strings")
    contents = []
    for index, text in enumerate(scripts):
        try:
            contents.append(base64.b64decode(text.encode("ascii"), validate=True))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise PlanError("MalformedPlan", f"Scripts[{index}] is not valid base64") from None

    if version == V2:
        names = body.get("ScriptNames")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise PlanError("MalformedPlan", "a FormatVersion 2.0 plan needs ScriptNames, "
                                             "a list of file names")
        if len(names) != len(contents):
            raise PlanError("MalformedPlan", f"ScriptNames has {len(names)} names for "
                                             f"{len(contents)} Scripts")
        for name in names:
            if not SCRIPT_NAME.match(name) or ".." in name:
                raise PlanError("MalformedPlan", f"script name {name[:60]!r} is not a plain "
                                                 "file name")
        if len(set(names)) != len(names):
            raise PlanError("MalformedPlan", "ScriptNames has duplicate names")
    else:
        names = [f"script{index:03d}.ps1" for index in range(len(contents))]

    raw_commands = body.get("Commands", [])
    if not isinstance(raw_commands, list):
        raise PlanError("MalformedPlan", "Commands must be a list")
    commands = []
    for index, entry in enumerate(raw_commands):
        if not isinstance(entry, dict) or not isinstance(entry.get("Name"), str) \
                or not entry["Name"]:
            raise PlanError("MalformedPlan", f"Commands[{index}] must be an object with a "
                                             "Name string")
        arguments = entry.get("Arguments") or {}
        if not isinstance(arguments, dict):
            raise PlanError("MalformedPlan", f"Commands[{index}].Arguments must be an object")
        if version == V2 and entry["Name"] not in names:
            raise PlanError("MalformedPlan", f"Commands[{index}] runs "
                                             f"{entry['Name'][:60]!r}, which is not in "
                                             "ScriptNames")
        if version == V02 and not re.match(r"^[A-Za-z_][A-Za-z0-9_-]*$", entry["Name"]):
            raise PlanError("MalformedPlan", f"Commands[{index}].Name is not a PowerShell "
                                             "function name")
        commands.append(Command(entry["Name"], arguments))

    reboot = body.get("RebootOnCompletion", 0)
    if isinstance(reboot, bool) or reboot not in (0, 1, 2):
        raise PlanError("MalformedPlan", "RebootOnCompletion must be 0, 1 or 2")
    return Plan(id=plan_id(body), version=version, scripts=list(zip(names, contents)),
                commands=commands, reboot=int(reboot), raw=body)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)
