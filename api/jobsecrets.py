"""The secrets a job's reports, task events and trace may quote: found in the
descriptions it was given, masked before anything it sends is stored.

A job's are kept for a while: its reports and task changes come in batch
after batch, and finding them means reading and walking the environment's
and the session's descriptions (megabytes for a thousand units).  While the
job runs neither changes what it was sent.  Nor once it ended: most of a
large deployment's reports come after its result (the reports and results
queues keep no common order), and they quote no secret the job was not
given; a later job's new secrets are found when its own reports come, under
its own id.  The time bound keeps a job's set from outliving a change of the
types' secret fields for more than :data:`_SECRETS_KEPT` seconds.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Protocol

from sqlalchemy.orm import Session as DbSession

from fornace.common.db.models import ConfigSession, Environment
from fornace.common.secrets import find_secrets

_SECRETS_KEPT = 30.0    # seconds a job's secrets are kept
_JOBS_KEPT = 64         # jobs whose secrets are kept (the least recently used go)
_secrets_lock = threading.Lock()
_secrets_kept: collections.OrderedDict = collections.OrderedDict()   # job id -> (time, set)

class JobLike(Protocol):
    """What of a job its secrets are found from: a :class:`~fornace.common.db.models.Job`
    row or its :class:`~fornace.api.jobfacts.JobFacts`."""

    id: str
    environment_id: str
    session_id: str | None


SecretKeys = Callable[[Any, str], frozenset[str]]
"""(db, environment id) -> the field names secret there besides those named like
passwords: :meth:`fornace.api.stores.store.Store.secret_keys`."""


def job_secrets(db: DbSession, deployment: JobLike, secret_keys: SecretKeys) -> set[str]:
    """The secrets a job's reports and logs may quote (masked before storing):
    the values of its environment's secret fields, those named like passwords
    and those ``secret_keys`` names (the types' ``writeOnly`` fields); kept
    :data:`_SECRETS_KEPT` seconds (at most :data:`_JOBS_KEPT` jobs, the least
    recently used forgotten first)."""
    now = time.monotonic()
    with _secrets_lock:
        kept = _secrets_kept.get(deployment.id)
        if kept is not None and now - kept[0] < _SECRETS_KEPT:
            _secrets_kept.move_to_end(deployment.id)
            return set(kept[1])
    secrets: set[str] = set()
    keys = secret_keys(db, deployment.environment_id)
    for owner in (db.get(Environment, deployment.environment_id),
                  db.get(ConfigSession, deployment.session_id or "")):
        if owner is not None:
            find_secrets(owner.description, secrets, keys)
    with _secrets_lock:
        _secrets_kept[deployment.id] = (now, frozenset(secrets))
        _secrets_kept.move_to_end(deployment.id)
        while len(_secrets_kept) > _JOBS_KEPT:
            _secrets_kept.popitem(last=False)
    return secrets
