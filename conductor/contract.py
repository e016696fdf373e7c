"""The message contract between the API, the conductor and the agents (0.2).

This module is the one place that knows the queue names and the shape of
every message body; the API, the conductor and the agent all import it.  It
is pure (no broker library), so it can be used and tested anywhere.

Queues (all durable, JSON bodies):

* ``tasks`` (exchange ``tasks``, direct, routing key ``tasks``): one message
  per deployment -- the whole environment object model plus ``token`` and
  ``tenant_id``; a deletion has ``services: {}`` and ``deleted: true``.
* ``task-results``: the final object model (``token`` and every ``temp``
  removed), message id = the id of the task message.
* ``task-reports``: ``{id, entity, text, details, level, environment_id}``.
* ``e<env>-<service>-<unit>`` (lower-cased): execution plans for one agent.
* ``-execution-results-e<env>`` (lower-cased): the agents' answers
  (``{IsException, Result}``), message id = the id of the plan answered.

Incoming bodies are checked by the ``parse_*`` functions, which raise
:class:`ContractError` naming the message kind and the field; error texts
never quote field values other than enumerations, so they are safe to log.
"""
from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from typing import Any

TASKS = "tasks"            # exchange, queue and routing key
RESULTS = "task-results"
REPORTS = "task-reports"

ENTITIES = ("unit", "service", "environment")  # or None
LEVELS = ("info", "warning", "error")


class ContractError(ValueError):
    """A message body that does not follow the contract.

    ``kind`` is the message kind (``task``, ``result``, ``report``,
    ``plan result``), ``field`` the offending field (None for the body as a
    whole).  A consumer drops such a message instead of retrying it.
    """

    def __init__(self, message: str, kind: str | None = None, field: str | None = None) -> None:
        self.kind = kind
        self.field = field
        super().__init__(message)


def _error(kind: str, message: str, field: str | None = None) -> ContractError:
    where = f"field {field!r} " if field else ""
    return ContractError(f"{kind} message: {where}{message}", kind, field)


# -- names --------------------------------------------------------------------

def agent_queue(environment_id: str, service_id: str, unit_id: str) -> str:
    """The per-unit input queue of the agent (0.2 naming, lower-cased)."""
    return f"e{environment_id}-{service_id}-{unit_id}".lower()


def results_queue(environment_id: str) -> str:
    """The queue agents of one environment answer on (leading dash, as in 0.2)."""
    return f"-execution-results-e{environment_id}".lower()


# -- building bodies ----------------------------------------------------------

def clean_model(model: dict[str, Any]) -> dict[str, Any]:
    """Remove ``token`` and the ``temp`` of the environment, services and units.

    Works in place and returns ``model``; services may be a list or (as in a
    deletion) an object.
    """
    model.pop("token", None)
    model.pop("temp", None)
    services = model.get("services")
    for service in _items(services):
        if isinstance(service, dict):
            service.pop("temp", None)
            for unit in _items(service.get("units")):
                if isinstance(unit, dict):
                    unit.pop("temp", None)
    return model


def _items(value: Any) -> list:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return value
    return []


def task_body(model: dict[str, Any], token: str | None, tenant_id: str) -> dict[str, Any]:
    """A ``tasks`` message: the object model plus ``token`` and ``tenant_id``."""
    if not isinstance(model, dict):
        raise _error("task", f"the object model must be an object, got {_kind(model)}")
    body = copy.deepcopy(model)
    body["token"] = token
    body["tenant_id"] = tenant_id
    _check_task(body)
    return body


def deletion_task_body(environment_id: str, name: str, token: str | None,
                       tenant_id: str) -> dict[str, Any]:
    """The ``tasks`` message that deletes an environment."""
    return task_body({"id": environment_id, "name": name, "services": {}, "deleted": True},
                     token, tenant_id)


def result_body(model: dict[str, Any]) -> dict[str, Any]:
    """A ``task-results`` message: a cleaned copy of the final object model."""
    if not isinstance(model, dict):
        raise _error("result", f"the object model must be an object, got {_kind(model)}")
    body = clean_model(copy.deepcopy(model))
    _check_result(body)
    return body


def report_body(id: Any, entity: str | None, text: str, level: str,
                environment_id: str, details: Any = None) -> dict[str, Any]:
    """A ``task-reports`` message (numbers given as ``id`` become strings)."""
    if isinstance(id, (int, float)) and not isinstance(id, bool):
        id = str(id)
    body = {"id": id, "entity": entity, "text": text, "details": details,
            "level": level, "environment_id": environment_id}
    _check_report(body)
    return body


# -- parsing bodies -----------------------------------------------------------

@dataclass
class Task:
    model: dict[str, Any]   # the whole body, as the workflows see it (token included)
    token: str | None
    tenant_id: str
    environment_id: str
    deleted: bool


@dataclass
class Report:
    id: str | None
    entity: str | None
    text: str
    details: Any
    level: str
    environment_id: str

    def body(self) -> dict[str, Any]:
        return asdict(self)


def decode(body: Any, kind: str) -> Any:
    """JSON ``bytes``/``str`` -> Python value; anything else is returned as is."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        try:
            body = bytes(body).decode("utf-8-sig")  # .NET agents may send a BOM
        except UnicodeDecodeError as exc:
            raise _error(kind, f"body is not UTF-8 (byte {exc.start})") from None
    if isinstance(body, str):
        try:
            return json.loads(body)
        except json.JSONDecodeError as exc:
            raise _error(
                kind, f"invalid JSON at line {exc.lineno}:{exc.colno} ({exc.msg})") from None
    return body


def _object(body: Any, kind: str) -> dict[str, Any]:
    body = decode(body, kind)
    if not isinstance(body, dict):
        raise _error(kind, f"body must be a JSON object, got {_kind(body)}")
    return body


def parse_task(body: Any) -> Task:
    """A ``tasks`` message -> :class:`Task` (``model`` is the whole body)."""
    body = _object(body, "task")
    _check_task(body)
    return Task(model=body, token=body.get("token"), tenant_id=body["tenant_id"],
                environment_id=body["id"], deleted=bool(body.get("deleted", False)))


def parse_result(body: Any) -> dict[str, Any]:
    """A ``task-results`` message -> the final object model."""
    body = _object(body, "result")
    _check_result(body)
    return body


def parse_report(body: Any) -> Report:
    """A ``task-reports`` message -> :class:`Report` (``details`` may be left out)."""
    body = _object(body, "report")
    _check_report(body)
    return Report(id=body["id"], entity=body["entity"], text=body["text"],
                  details=body.get("details"), level=body["level"],
                  environment_id=body["environment_id"])


def parse_plan_result(body: Any) -> dict[str, Any]:
    """An agent's answer ``{IsException: bool, Result: list}`` (extra keys kept)."""
    kind = "plan result"
    body = _object(body, kind)
    _require(body, "IsException", kind, bool, "a boolean")
    _require(body, "Result", kind, list, "a list")
    return body


# -- checks -------------------------------------------------------------------

def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _require(body: dict, name: str, kind: str, types: Any, expected: str,
             optional: bool = False) -> None:
    if name not in body:
        if optional:
            return
        raise _error(kind, "is missing", name)
    if not isinstance(body[name], types):
        raise _error(kind, f"must be {expected}, got {_kind(body[name])}", name)


def _check_id(body: dict, kind: str) -> None:
    _require(body, "id", kind, str, "a string")
    if not body["id"]:
        raise _error(kind, "must not be empty", "id")


def _check_task(body: dict) -> None:
    kind = "task"
    _check_id(body, kind)
    _require(body, "token", kind, (str, type(None)), "a string or null", optional=True)
    _require(body, "tenant_id", kind, str, "a string")
    _require(body, "name", kind, str, "a string", optional=True)
    _require(body, "services", kind, (list, dict), "a list or an object", optional=True)
    _require(body, "deleted", kind, bool, "a boolean", optional=True)


def _check_result(body: dict) -> None:
    _check_id(body, "result")
    _require(body, "services", "result", (list, dict), "a list or an object", optional=True)


def _check_report(body: dict) -> None:
    kind = "report"
    _require(body, "id", kind, (str, type(None)), "a string or null")
    _require(body, "entity", kind, (str, type(None)), "a string or null")
    if body["entity"] is not None and body["entity"] not in ENTITIES:
        raise _error(kind, f"must be one of {', '.join(ENTITIES)} or null, "
                                  f"got {body['entity'][:40]!r}", "entity")
    _require(body, "text", kind, str, "a string")
    _require(body, "level", kind, str, "a string")
    if body["level"] not in LEVELS:
        raise _error(kind, f"must be one of {', '.join(LEVELS)}, "
                                  f"got {body['level'][:40]!r}", "level")
    _require(body, "environment_id", kind, str, "a string")
