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
  (``{IsException, Result}``), message id = the id of the plan answered;
  while a plan runs, its log lines come on the same queue as
  ``{PlanId, Log: [lines]}`` (a Fornace extension; 0.2 agents never send it).
* job events: what a job does, task by task (``{environment_id, job_id,
  kind: "task"|"tasks"|"job"|"trace", ...}``, see :func:`task_event_body`,
  :func:`task_events_body` and :func:`trace_event_body`); the API keeps
  them as the job's tasks, and a "trace" as the job's trace.  They travel
  on ``task-results`` (told apart by :func:`is_job_event`), so a job's last
  events are stored before its result ends it; the API also reads the
  ``job-events`` queue.

A task may carry ``job: {id, action, parameters}`` (a Fornace extension):
the job it belongs to and the lifecycle action to run (``deploy`` when
absent, or ``delete`` for a deletion, as in 0.2).

Incoming bodies are checked by the ``parse_*`` functions, which raise
:class:`ContractError` naming the message kind and the field; error texts
never quote field values other than enumerations, so they are safe to log.

Contract history (:data:`CONTRACT_VERSION`; every version reads the bodies of
the earlier ones, and a Murano 0.2 agent or API speaks 1.0)::

    1.0 - Murano 0.2: tasks, task-results, task-reports, execution plans
          on e<env>-<service>-<unit>, answers on -execution-results-e<env>
    1.1 - A task's job section {id, action, parameters} (lifecycle actions);
          plan log lines {PlanId, Log} on the agents' results queue;
          job events {environment_id, job_id, kind} on job-events
    1.2 - Job events also travel on task-results (told apart by
          is_job_event), so a job's last task events come before its result
    1.3 - "fence" on job events, reports and results of a job that holds the
          environment's lock: its token; the API drops what carries an older
          one than the environment's lock has now (fenced)
    1.4 - Job events of kind "tasks": the changes of many tasks in one
          message ({tasks: [task, ...]}, each shaped as a "task" event's task,
          at most MAX_TASKS_PER_EVENT), sent by conductors in batches
    1.5 - "nodes" on a "tasks" job event: the node state and status of the
          units and services that changed since the last event
          ({id: {state, local}}, at most MAX_NODES_PER_EVENT), so the API
          shows them while the job runs; "stopped" is a node state
    1.6 - "trust_id" on a task: the Keystone trust the environment's user gave
          the Fornace service user; the conductor acts on the cloud with
          trust-scoped tokens (they outlive the user's token) and deletes
          the trust once a deletion succeeded.  Not part of the model the
          workflows see (like "job")
    1.7 - Job events of kind "trace" on task-results, sent before the
          result: which rule fired on which object during the job, round by
          round ({trace: {encoding: "zlib+base64", size, data}}, the JSON
          document compressed, at most MAX_TRACE_BYTES once expanded; see
          fornace.conductor.jobs.tracing).  An API that does not know the
          kind drops the message (a ContractError); the result still ends
          the job
    1.8 - "packages" on a task: the workflow packages the environment is
          pinned to ([{id, name, version, digest}], at most MAX_PACKAGES),
          which the conductor reads from the database by id and checks by
          their sha256; their workflows, templates and types join its own
          data folder for that task only.  Not part of the model the
          workflows see
    1.9 - Ids follow fornace.common.names' rule (1 to 64 ASCII letters,
          digits, '.', '_', '-'): a "tasks" event's node ids and a task's
          "target" (when not null); the API refuses other ids at the door
    1.10 - Job state "queued" (a job event of kind "job"): the job waits
           for its environment's lock, held by another job; its summary
           says which, on which conductor, since when.  "running" (fenced)
           once it holds the lock.  An older API sets "queued" aside as a
           ContractError (the job stays shown running)
    1.11 - "error_reports" on a result: how many error reports the job sent.
           Reports travel on task-reports, results on task-results, with no
           order between the two queues: the API ends the job
           completed_w_errors from this count, not only from the error
           reports it has stored by then.  Absent (0.2, or before 1.11): the
           stored error reports decide, as before
    1.12 - Reports in packs: a task-reports message may hold consecutive
           reports of one job ({environment_id, reports: [report, ...],
           fence}, at most MAX_REPORTS_PER_MESSAGE, each shaped as a 1.0
           report), its message id that of its first report
           (<task>-report-<n>), the others' n following; the API stores
           each as the report it stands for (see pack_reports and
           unpack_reports).  Thousands of reports cost a few messages, not
           a message (a publish, a confirm, an ack) each
    1.13 - "request_id" on a task: the id (req-<uuid>) of the API request
           that started it, and "global_request_id" when that request
           carried one (its X-Openstack-Request-Id); the conductor's log
           lines of the job show them as the API's lines of the request do.
           Both optional (absent before 1.13, or from a task no request
           started); a value that is not req-<uuid> is a ContractError.
           Not part of the model the workflows see
    1.14 - "region" at the top of a task's model: the region the environment
           was created in (Murano's environment region), set by the API
           whatever the stored model says; the conductor makes the
           environment's stack on the Heat of that region.  Optional (absent
           before 1.14 and for environments created without one)
    1.15 - "hostname", "address" and "url" on a "tasks" event's node: what
           the unit's (or service's) state says of them when the event goes,
           so the API shows them while the job runs (an instance's address
           as soon as its stack is up).  Each optional, a string of at most
           MAX_ENDPOINT_CHARS characters; an older API ignores them
"""
from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from fornace.common import jsonlimits, names

CONTRACT_VERSION = "1.15"   # see the history above; bump it with every change of a body
MAX_PACKAGES = 32          # workflow packages on one task (1.8)
REQUEST_KEYS = ("request_id", "global_request_id")   # on a task (1.13)
#: a request id: ``req-`` and a UUID in lower case, as oslo.context makes them
#: and oslo.middleware's request id check has them
REQUEST_ID = re.compile(r"req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

TASKS = "tasks"            # exchange, queue and routing key
RESULTS = "task-results"
REPORTS = "task-reports"
JOB_EVENTS = "job-events"

ACTIONS = ("deploy", "delete", "install", "uninstall", "execute_operation", "heal", "scale",
           "check", "plan")
TASK_STATUSES = ("pending", "running", "ok", "error", "skipped", "blocked", "cancelled",
                 "planned")
JOB_STATES = ("queued", "running", "success", "completed_w_errors", "refused")
UNENDED_JOB_STATES = ("queued", "running")   # a job that has not ended is one of these
CHANGE_DETECTION = ("evaluate", "always", "skip")

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
    """Remove ``token``, ``trust_id`` and the ``temp`` of the environment, services
    and units.

    Works in place and returns ``model``; services may be a list or (as in a
    deletion) an object.
    """
    model.pop("token", None)
    model.pop("trust_id", None)
    model.pop("temp", None)
    services = model.get("services")
    for service in _items(services):
        if isinstance(service, dict):
            service.pop("temp", None)
            for unit in _items(service.get("units")):
                if isinstance(unit, dict):
                    unit.pop("temp", None)
    return model


def _node_copy(value: Any, depth: int) -> Any:
    """A copy of the model's environment (``depth`` 3), service (2) or unit (1)
    level -- its dict, and its services' or units' container -- for
    :func:`clean_model` to change; anything below is shared."""
    if not isinstance(value, dict):
        return value
    copied = dict(value)
    if depth > 1:
        key = "services" if depth == 3 else "units"
        inner = copied.get(key)
        if isinstance(inner, dict):
            copied[key] = {k: _node_copy(v, depth - 1) for k, v in inner.items()}
        elif isinstance(inner, list):
            copied[key] = [_node_copy(v, depth - 1) for v in inner]
    return copied


def _items(value: Any) -> list:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return value
    return []


def task_body(model: dict[str, Any], token: str | None, tenant_id: str,
              job: dict[str, Any] | None = None,
              trust_id: str | None = None,
              packages: list[dict[str, str]] | None = None,
              region: str | None = None) -> dict[str, Any]:
    """A ``tasks`` message: the object model plus ``token`` and ``tenant_id``
    (and ``job``, from :func:`job_section`, for a Fornace job; ``trust_id``
    when the environment has a Keystone trust; ``packages`` when it is
    pinned to workflow packages; ``region``, the model's top-level ``region``,
    when the environment was created with one: the region of its stack,
    whatever the model says).  The model's values are shared, not copied."""
    if not isinstance(model, dict):
        raise _error("task", f"the object model must be an object, got {_kind(model)}")
    body = dict(model)
    if region is not None:
        body["region"] = region
    body["token"] = token
    body["tenant_id"] = tenant_id
    if job is not None:
        body["job"] = job
    if trust_id:
        body["trust_id"] = trust_id
    if packages:
        body["packages"] = [dict(ref) for ref in packages]
    _check_task(body)
    return body


def with_request(body: dict[str, Any], request_id: str | None,
                 global_request_id: str | None = None) -> dict[str, Any]:
    """A task body that names the API request that started it (1.13): a copy
    of ``body`` with ``request_id`` and ``global_request_id`` (when given)."""
    stamped = dict(body)
    for key, value in zip(REQUEST_KEYS, (request_id, global_request_id)):
        if value is not None:
            stamped[key] = value
    _check_task(stamped)
    return stamped


def deletion_task_body(environment_id: str, name: str, token: str | None,
                       tenant_id: str, job_id: str | None = None,
                       trust_id: str | None = None,
                       region: str | None = None) -> dict[str, Any]:
    """The ``tasks`` message that deletes an environment (``region``: the one
    its stack is in, when it was created with one)."""
    body = task_body({"id": environment_id, "name": name, "services": {}, "deleted": True},
                     token, tenant_id, trust_id=trust_id, region=region)
    if job_id is not None:
        body["job"] = job_section(job_id, "delete", {})
        _check_task(body)
    return body


def job_section(job_id: str, action: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The ``job`` member of a task: which job, which lifecycle action, its parameters."""
    body = {"id": job_id, "action": action, "parameters": parameters}
    _check_job(body)
    return body


def task_event_body(environment_id: str, job_id: str, task: dict[str, Any]) -> dict[str, Any]:
    """A ``job-events`` message about one task of a job.

    ``task`` has ``change_id`` (sortable, unique per environment) and any of
    ``target``, ``target_name``, ``operation``, ``reason``, ``status`` (one of
    :data:`TASK_STATUSES`), ``started``, ``finished`` (ISO 8601), ``summary``,
    ``digest`` and ``log`` (new log lines, appended to those already kept).
    """
    body = {"environment_id": environment_id, "job_id": job_id, "kind": "task", "task": task}
    _check_event(body)
    return body


MAX_TASKS_PER_EVENT = 500


MAX_NODES_PER_EVENT = 5000
NODE_STATES = ("initial", "creating", "created", "configuring", "configured", "starting",
               "started", "stopping", "stopped", "deleting", "deleted", "error")
NODE_STATUSES = ("ok", "degraded", "error", "absent", "pending", "unknown")
NODE_ENDPOINTS = ("hostname", "address", "url")   # a node's optional strings (1.15)
MAX_ENDPOINT_CHARS = 1024


def task_events_body(environment_id: str, job_id: str, tasks: list[dict[str, Any]],
                     nodes: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A ``job-events`` message about several tasks of a job (contract 1.4):
    each of ``tasks`` as the ``task`` of :func:`task_event_body`, applied in
    their order; at most :data:`MAX_TASKS_PER_EVENT`.  ``nodes`` (1.5): the
    units' and services' node states that changed, ``{id: {"state", "local"}}``."""
    body = {"environment_id": environment_id, "job_id": job_id, "kind": "tasks",
            "tasks": tasks}
    if nodes:
        body["nodes"] = nodes
    _check_event(body)
    return body


def job_event_body(environment_id: str, job_id: str, state: str,
                   summary: str = "") -> dict[str, Any]:
    """A ``job-events`` message about the job itself: ``queued`` behind the
    environment's lock (the summary says why), ``running`` once it holds it,
    ``refused`` when it would not run."""
    body = {"environment_id": environment_id, "job_id": job_id, "kind": "job",
            "state": state, "summary": summary}
    _check_event(body)
    return body


MAX_TRACE_BYTES = 8 * 1024 * 1024   # a trace's JSON, expanded (conductors cap theirs at 4)
MAX_TRACE_DATA = 12 * 1024 * 1024   # its compressed form in base64, in characters
TRACE_ENCODING = "zlib+base64"


def trace_event_body(environment_id: str, job_id: str,
                     trace: dict[str, Any]) -> dict[str, Any]:
    """A job event carrying the job's trace (contract 1.7): ``trace`` is
    ``{encoding: "zlib+base64", size: bytes of the JSON, data: text}``."""
    body = {"environment_id": environment_id, "job_id": job_id, "kind": "trace",
            "trace": trace}
    _check_event(body)
    return body


def trace_data(trace: dict[str, Any]) -> bytes:
    """The compressed bytes of a checked ``trace`` (ContractError if not base64)."""
    try:
        return base64.b64decode(trace["data"], validate=True)
    except (binascii.Error, ValueError):
        raise _error("job event", "is not base64", "trace.data") from None


def is_job_event(body: Any) -> bool:
    """Whether a ``task-results`` body is a job event (a final model has an ``id``)."""
    return (isinstance(body, dict) and "job_id" in body and "id" not in body
            and body.get("kind") in ("task", "tasks", "job", "trace"))


def plan_log_body(plan_id: str, lines: list[str]) -> dict[str, Any]:
    """Log lines of a running plan, sent by the agent on the results queue."""
    return {"PlanId": plan_id, "Log": [str(line) for line in lines]}


def exception_result(kind: str, message: str) -> dict[str, Any]:
    """A 0.2 answer (or command entry) saying ``kind: message`` went wrong."""
    return {"IsException": True, "Result": [kind, message]}


def is_plan_log(body: Any) -> bool:
    """Whether a results-queue body is log lines (not an answer)."""
    return isinstance(body, dict) and "Log" in body and "IsException" not in body


ERROR_REPORTS = "error_reports"   # on a result (1.11)


def result_body(model: dict[str, Any], error_reports: int = 0) -> dict[str, Any]:
    """A ``task-results`` message: a cleaned copy of the final object model,
    with the number of error reports the job sent (1.11) when there were any.

    Only what :func:`clean_model` changes is copied -- the model, its
    services and units and their containers; the values below them are
    shared with ``model`` (a deep copy of a thousand units' model was a
    sixth of a conductor's time in a deployment), so neither is to be
    changed while the body is in use."""
    if not isinstance(model, dict):
        raise _error("result", f"the object model must be an object, got {_kind(model)}")
    body = clean_model(_node_copy(model, depth=3))
    _check_result(body)
    if error_reports:
        body[ERROR_REPORTS] = error_reports
    return body


FENCE = "fence"


def fenced(body: dict[str, Any], token: int | None) -> dict[str, Any]:
    """``body`` with the sender's lock token (unchanged without one)."""
    return {**body, FENCE: token} if token else body


def fence_of(body: Any, kind: str) -> int | None:
    """The lock token a job event, report or result carries (None: none)."""
    return _whole_number(body, FENCE, kind, least=1)


_AT_LEAST = {0: "a non-negative integer", 1: "a positive integer"}


def _whole_number(body: Any, key: str, kind: str, least: int) -> int | None:
    """The integer ``body[key]``, ``least`` (0 or 1) or more (None: absent or
    null); anything else is a ContractError naming the field."""
    if not isinstance(body, dict) or body.get(key) is None:
        return None
    value = body[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise _error(kind, f"must be {_AT_LEAST[least]}, got {_kind(value)}", key)
    return value


def _without(body: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``body`` without ``keys`` (itself when it has none of them)."""
    if not any(key in body for key in keys):
        return body
    return {key: value for key, value in body.items() if key not in keys}


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
    job_id: str | None = None
    action: str = "deploy"
    parameters: dict[str, Any] | None = None
    trust_id: str | None = None    # contract 1.6
    packages: list[dict[str, str]] = field(default_factory=list)   # contract 1.8
    request_id: str | None = None          # contract 1.13
    global_request_id: str | None = None   # contract 1.13


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
        try:   # never deeper than any reader accepts: no RecursionError from a peer
            return jsonlimits.loads(body, max_depth=jsonlimits.HARD_MAX_DEPTH)
        except json.JSONDecodeError as exc:
            raise _error(
                kind, f"invalid JSON at line {exc.lineno}:{exc.colno} ({exc.msg})") from None
        except jsonlimits.JsonLimitError as exc:
            raise _error(kind, exc.message) from None
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
    deleted = bool(body.get("deleted", False))
    job = body.pop("job", None)   # not part of the model the workflows see
    trust_id = body.pop("trust_id", None)   # nor is this
    packages = body.pop("packages", None) or []   # nor this
    request = {key: body.pop(key, None) for key in REQUEST_KEYS}   # nor these
    if job is None:
        return Task(model=body, token=body.get("token"), tenant_id=body["tenant_id"],
                    environment_id=body["id"], deleted=deleted,
                    action="delete" if deleted else "deploy", parameters={},
                    trust_id=trust_id, packages=packages, **request)
    return Task(model=body, token=body.get("token"), tenant_id=body["tenant_id"],
                environment_id=body["id"], deleted=deleted, job_id=job["id"],
                action=job["action"], parameters=job["parameters"], trust_id=trust_id,
                packages=packages, **request)


@dataclass
class JobEvent:
    environment_id: str
    job_id: str
    kind: str                      # "task", "tasks", "job" or "trace"
    task: dict[str, Any] | None = None
    tasks: list[dict[str, Any]] | None = None   # of a "tasks" event (contract 1.4)
    nodes: dict[str, dict[str, Any]] | None = None   # of a "tasks" event (contract 1.5)
    state: str | None = None
    summary: str = ""
    fence: int | None = None       # the sender's lock token (contract 1.3)
    trace: dict[str, Any] | None = None   # of a "trace" event (contract 1.7)


def parse_job_event(body: Any) -> JobEvent:
    """A ``job-events`` message -> :class:`JobEvent`."""
    body = _object(body, "job event")
    _check_event(body)
    return JobEvent(environment_id=body["environment_id"], job_id=body["job_id"],
                    kind=body["kind"], task=body.get("task"), tasks=body.get("tasks"),
                    nodes=body.get("nodes"),
                    state=body.get("state"),
                    summary=body.get("summary") or "", fence=fence_of(body, "job event"),
                    trace=body.get("trace"))


def parse_result(body: Any) -> dict[str, Any]:
    """A ``task-results`` message -> the final object model (without its fence
    and its count of error reports, see :func:`error_reports_of`)."""
    body = _object(body, "result")
    _check_result(body)
    fence_of(body, "result")
    error_reports_of(body)
    return _without(body, FENCE, ERROR_REPORTS)


def error_reports_of(body: Any) -> int:
    """How many error reports the job of a result says it sent (0: none, or not told)."""
    return _whole_number(body, ERROR_REPORTS, "result", least=0) or 0


MAX_REPORTS_PER_MESSAGE = 200   # reports in one pack (1.12)
REPORTS_PACK = "reports"
_REPORT_ID = re.compile(r"(.{1,200})-report-([1-9][0-9]{0,9})")


def pack_reports(messages: Sequence[tuple[dict[str, Any], str]],
                 most: int = MAX_REPORTS_PER_MESSAGE) -> list[tuple[dict[str, Any], str]]:
    """``task-reports`` messages ``[(body, message id)]`` in fewer (1.12): each
    run of consecutive reports of one job -- ids ``<task>-report-<n>`` with n
    following, one environment, one fence -- as a pack of at most ``most``;
    a report alone stays a 1.0 report.  In order; :func:`unpack_reports`
    gives them back."""
    packed: list[tuple[dict[str, Any], str]] = []
    run: list[tuple[dict[str, Any], str]] = []
    follows: tuple[Any, ...] = ()   # (task, environment, fence, n) the run's next one has

    def close() -> None:
        if len(run) == 1:
            packed.append(run[0])
        elif run:
            first = run[0][0]
            pack = {"environment_id": first.get("environment_id"),
                    REPORTS_PACK: [_without(body, FENCE) for body, _ in run]}
            packed.append((fenced(pack, first.get(FENCE)), run[0][1]))
        run.clear()

    for body, message_id in messages:
        match = _REPORT_ID.fullmatch(message_id or "")
        if match is None or not isinstance(body, dict) or REPORTS_PACK in body:
            close()
            packed.append((body, message_id))
            continue
        this = (match[1], body.get("environment_id"), body.get(FENCE), int(match[2]))
        if this != follows or len(run) >= most:
            close()
        run.append((body, message_id))
        follows = (*this[:3], this[3] + 1)
    close()
    return packed


def unpack_reports(body: Any, message_id: str | None) -> list[tuple[Any, str | None]]:
    """A ``task-reports`` message as the reports it holds, ``[(body, message
    id)]``: a 1.0 report as itself; a pack (1.12) as its reports, each with
    the pack's fence and the id it stands for.  A pack that is not one (no
    list, too many, an id without a number) is a ContractError; a bad report
    in it is left to :func:`parse_report` to refuse, alone."""
    if not isinstance(body, dict) or REPORTS_PACK not in body:
        return [(body, message_id)]
    kind = "report pack"
    reports = body[REPORTS_PACK]
    if not isinstance(reports, list) or not reports:
        raise _error(kind, f"must be a non-empty list, got {_kind(reports)}", REPORTS_PACK)
    if len(reports) > MAX_REPORTS_PER_MESSAGE:
        raise _error(kind, f"has more than {MAX_REPORTS_PER_MESSAGE} reports", REPORTS_PACK)
    match = _REPORT_ID.fullmatch(message_id or "")
    if match is None:
        raise _error(kind, "its message id must be <task id>-report-<n>, that of its "
                           "first report")
    fence = fence_of(body, kind)
    first = int(match[2])
    return [(fenced(report, fence) if isinstance(report, dict) else report,
             f"{match[1]}-report-{first + index}")
            for index, report in enumerate(reports)]


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
    _require(body, "trust_id", kind, (str, type(None)), "a string or null", optional=True)
    _require(body, "tenant_id", kind, str, "a string")
    _require(body, "name", kind, str, "a string", optional=True)
    _require(body, "services", kind, (list, dict), "a list or an object", optional=True)
    _require(body, "deleted", kind, bool, "a boolean", optional=True)
    _require(body, "job", kind, dict, "an object", optional=True)
    if "job" in body:
        _check_job(body["job"])
    if "packages" in body:
        _check_packages(body["packages"])
    for key in REQUEST_KEYS:
        if body.get(key) is not None and not is_request_id(body[key]):
            raise _error(kind, "must be req- followed by a UUID, or null", key)


def is_request_id(text: Any) -> bool:
    """Whether ``text`` is a request id (:data:`REQUEST_ID`)."""
    return isinstance(text, str) and REQUEST_ID.fullmatch(text) is not None


def _check_packages(refs: Any) -> None:
    """A task's ``packages``: at most MAX_PACKAGES ``{id, name, version, digest}``,
    each a non-empty string, names not repeated."""
    kind = "task"
    if not isinstance(refs, list):
        raise _error(kind, f"must be a list, got {_kind(refs)}", "packages")
    if len(refs) > MAX_PACKAGES:
        raise _error(kind, f"at most {MAX_PACKAGES} packages, got {len(refs)}", "packages")
    names: set[str] = set()
    for number, ref in enumerate(refs):
        where = f"packages[{number}]"
        if not isinstance(ref, dict):
            raise _error(kind, f"must be an object, got {_kind(ref)}", where)
        for key in ("id", "name", "version", "digest"):
            value = ref.get(key)
            if not isinstance(value, str) or not value:
                raise _error(kind, "must be a non-empty string", f"{where}.{key}")
        if ref["name"] in names:
            raise _error(kind, f"package {ref['name']!r} is named twice", where)
        names.add(ref["name"])


def _check_job(job: dict) -> None:
    kind = "task"
    _require(job, "id", kind, str, "a string")
    if not job["id"]:
        raise _error(kind, "must not be empty", "job.id")
    _require(job, "action", kind, str, "a string")
    if job["action"] not in ACTIONS:
        raise _error(kind, f"must be one of {', '.join(ACTIONS)}, got {job['action'][:40]!r}",
                     "job.action")
    _require(job, "parameters", kind, dict, "an object")


_TASK_FIELDS = {"change_id": str, "target": (str, type(None)), "target_name": (str, type(None)),
                "operation": (str, type(None)), "reason": (str, type(None)),
                "status": str, "started": (str, type(None)), "finished": (str, type(None)),
                "summary": (str, type(None)), "digest": (str, type(None)), "log": list}


def _check_event(body: dict) -> None:
    kind = "job event"
    for name in ("environment_id", "job_id", "kind"):
        _require(body, name, kind, str, "a string")
    if body["kind"] == "job":
        _require(body, "state", kind, str, "a string")
        if body["state"] not in JOB_STATES:
            raise _error(kind, f"must be one of {', '.join(JOB_STATES)}, "
                               f"got {body['state'][:40]!r}", "state")
        _require(body, "summary", kind, str, "a string", optional=True)
        return
    if body["kind"] == "tasks":
        _require(body, "tasks", kind, list, "a list")
        if len(body["tasks"]) > MAX_TASKS_PER_EVENT:
            raise _error(kind, f"has more than {MAX_TASKS_PER_EVENT} tasks", "tasks")
        for number, task in enumerate(body["tasks"]):
            _check_task_event(task, f"tasks[{number}]")
        if "nodes" in body:
            _check_nodes(body["nodes"])
        return
    if body["kind"] == "trace":
        _check_trace(body)
        return
    if body["kind"] != "task":
        raise _error(kind, f"must be task, tasks, job or trace, got {body['kind'][:40]!r}",
                     "kind")
    _require(body, "task", kind, dict, "an object")
    _check_task_event(body["task"], "task")


def _check_trace(body: dict) -> None:
    """The "trace" of a trace event (contract 1.7); its data is decoded by the reader."""
    kind = "job event"
    _require(body, "trace", kind, dict, "an object")
    trace = body["trace"]
    for name, types, expected in (("encoding", str, "a string"), ("size", int, "a number"),
                                  ("data", str, "a string")):
        if name not in trace:
            raise _error(kind, "is missing", f"trace.{name}")
        if not isinstance(trace[name], types) or isinstance(trace[name], bool):
            raise _error(kind, f"must be {expected}, got {_kind(trace[name])}", f"trace.{name}")
    if trace["encoding"] != TRACE_ENCODING:
        raise _error(kind, f"must be {TRACE_ENCODING}, got {trace['encoding'][:40]!r}",
                     "trace.encoding")
    if not 0 <= trace["size"] <= MAX_TRACE_BYTES:
        raise _error(kind, f"must be between 0 and {MAX_TRACE_BYTES}", "trace.size")
    if len(trace["data"]) > MAX_TRACE_DATA:
        raise _error(kind, f"is longer than {MAX_TRACE_DATA} characters", "trace.data")


def _check_nodes(nodes: Any) -> None:
    """The "nodes" of a "tasks" event: ``{id: {"state": ..., "local": ...}}``."""
    kind = "job event"
    if not isinstance(nodes, dict):
        raise _error(kind, f"must be an object, got {_kind(nodes)}", "nodes")
    if len(nodes) > MAX_NODES_PER_EVENT:
        raise _error(kind, f"has more than {MAX_NODES_PER_EVENT} nodes", "nodes")
    for number, (node_id, node) in enumerate(nodes.items()):
        where = f"nodes (entry {number})"
        problem = names.id_problem(node_id)
        if problem is not None:
            raise _error(kind, problem, where)
        if not isinstance(node, dict):
            raise _error(kind, f"must be an object, got {_kind(node)}", where)
        for name, allowed in (("state", NODE_STATES), ("local", NODE_STATUSES)):
            value = node.get(name)
            if value is not None and value not in allowed:
                raise _error(kind, f"must be one of {', '.join(allowed)}",
                             f"{where}.{name}")
        for name in NODE_ENDPOINTS:
            value = node.get(name)
            if value is not None and not (isinstance(value, str)
                                          and len(value) <= MAX_ENDPOINT_CHARS):
                got = f"{len(value)} characters" if isinstance(value, str) else _kind(value)
                raise _error(kind, f"must be a string of at most {MAX_ENDPOINT_CHARS} "
                                   f"characters, got {got}", f"{where}.{name}")


def _check_task_event(task: Any, where: str) -> None:
    """One task's changes in a job event; ``where``: its place, for the errors."""
    kind = "job event"
    if not isinstance(task, dict):
        raise _error(kind, f"must be an object, got {_kind(task)}", where)
    if "change_id" not in task:
        raise _error(kind, "is missing", f"{where}.change_id")
    if not isinstance(task["change_id"], str):
        raise _error(kind, f"must be a string, got {_kind(task['change_id'])}",
                     f"{where}.change_id")
    if not task["change_id"]:
        raise _error(kind, "must not be empty", f"{where}.change_id")
    for name, value in task.items():   # the fields a change carries (a few, often)
        types = _TASK_FIELDS.get(name)
        if types is not None and not isinstance(value, types):
            raise _error(kind, f"has the wrong type ({_kind(value)})", f"{where}.{name}")
    if task.get("target") is not None and not names.is_id(task["target"]):
        raise _error(kind, names.id_problem(task["target"]) or "", f"{where}.target")
    if "status" in task and task["status"] not in TASK_STATUSES:
        raise _error(kind, f"must be one of {', '.join(TASK_STATUSES)}, "
                           f"got {task['status'][:40]!r}", f"{where}.status")
    if "log" in task and not all(isinstance(line, str) for line in task["log"]):
        raise _error(kind, "must be a list of strings", f"{where}.log")


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
