"""The views of jobs: a job, its tasks (also as TSV), and the status of each
service and unit of an environment as a job moves it."""
from __future__ import annotations

import datetime
from typing import Any, Iterable

from sqlalchemy.orm import load_only

from fornace.api.outputs import endpoints
from fornace.api.views import iso
from fornace.common.db.models import Job, JobTask
from fornace.common.modelview import service_type
from fornace.common.secrets import find_secrets, masked

TSV_COLUMNS = ("change_id", "job_id", "action", "status", "reason", "target", "target_name",
               "operation", "started", "finished", "summary")


# what job_view reads of a job's row: not its description, nodes or the like (read on
# first use, should a caller need them after all: the session's identity map hands
# this very object to a later get of the same job)
JOB_VIEW = [load_only(Job.id, Job.environment_id, Job.kind, Job.parameters, Job.packages,
                      Job.state, Job.started, Job.finished, Job.created, Job.updated)]


def job_view(job: Job, counts: dict[str, int] | None = None,
             secret_keys: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A job as shown; ``secret_keys``: its environment's declared secret fields."""
    # stored masked (kept_parameters); masked again on the way out, as service fields
    # are: a row written by an older version or another writer leaks no secret either
    return {"id": job.id, "environment_id": job.environment_id, "action": job.kind,
            "parameters": masked(job.parameters or {}, keys=secret_keys), "state": job.state,
            "started": iso(job.started), "finished": iso(job.finished),
            "created": iso(job.created), "updated": iso(job.updated),
            "packages": job.packages, "task_counts": counts or {}}


def kept_parameters(parameters: dict[str, Any], description: Any,
                    secret_keys: frozenset[str] = frozenset()) -> dict[str, Any]:
    """What a job stores (and shows) of its parameters: every secret field masked
    (``adminPassword``, ``token``, ... at any depth, and ``secret_keys``: those
    the environment's types declare), and the environment's secrets and the
    parameters' own wherever a value quotes them (a command line)."""
    secrets = find_secrets(parameters, find_secrets(description, keys=secret_keys),
                           secret_keys)
    return masked(parameters, secrets, keys=secret_keys)


def task_view(task: JobTask) -> dict[str, Any]:
    return {"change_id": task.change_id, "target": task.target,
            "target_name": task.target_name, "operation": task.operation,
            "reason": task.reason, "status": task.status, "started": iso(task.started),
            "finished": iso(task.finished), "summary": task.summary, "digest": task.digest,
            "log": task.log.split("\n") if task.log else []}


def tsv_field(value: Any) -> str:
    """One TSV cell: None is empty; backslash, tab and line breaks escaped."""
    if value is None:
        return ""
    if isinstance(value, datetime.datetime):
        value = iso(value)
    return (str(value).replace("\\", "\\\\").replace("\t", "\\t")
            .replace("\n", "\\n").replace("\r", "\\r"))


def tsv(rows: Iterable[Iterable[Any]]) -> str:
    lines = ["\t".join(TSV_COLUMNS)]
    lines.extend("\t".join(tsv_field(value) for value in row) for row in rows)
    return "\n".join(lines) + "\n"


def _default_status(deployed: bool) -> dict[str, Any]:
    """What a unit or service without a conductor-kept status shows: not created
    yet before the first deployment; after it, nobody knows."""
    return {"local": "unknown" if deployed else "pending", "state": "initial"}


# what a status shows of the conductor's ``status`` object: how the node is and the
# user's flags; its bookkeeping (lastChange, created, resources, configs: what change
# detection and scale-in read) only with ``details``
SHOWN_STATUS = ("local", "state", "check", "customized", "protected")


def _with_status(item: dict[str, Any], deployed: bool,
                 live: dict[str, dict[str, Any]] | None = None,
                 details: bool = False) -> dict[str, Any]:
    status = item.get("status")
    if not isinstance(status, dict):
        shown = _default_status(deployed)
    elif details:
        shown = masked(status)
    else:
        shown = masked({key: status[key] for key in SHOWN_STATUS if key in status})
    now = (live or {}).get(str(item.get("id")))
    if now:   # what the running job told since it began
        shown.update({k: v for k, v in now.items() if k in ("state", "local") and v})
    return shown


def services_status(description: dict[str, Any], deployed: bool,
                    live: dict[str, dict[str, Any]] | None = None,
                    details: bool = False) -> list[dict[str, Any]]:
    """Per service and unit its status and endpoints; ``live``: the node states
    (and endpoints) a running job sent (by id), shown over those of
    ``description``; ``details``: the whole status object, bookkeeping too."""
    services = []
    for service in description.get("services") or []:
        if not isinstance(service, dict):
            continue
        units = [{"id": u.get("id"), "name": u.get("name"),
                  "status": _with_status(u, deployed, live, details), **endpoints(u, live)}
                 for u in service.get("units") or [] if isinstance(u, dict)]
        services.append({"id": service.get("id"), "name": service.get("name"),
                         "type": service_type(service),
                         "status": _with_status(service, deployed, live, details),
                         **endpoints(service, live), "units": units})
    return services
