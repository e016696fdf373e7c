"""The secrets a job's reports, task events and trace may quote: found in the
descriptions it was given, masked before anything it sends is stored.

A job's are kept for a while: its reports and task changes come in batch
after batch, and finding them means reading and walking the environment's
and the session's descriptions (megabytes for a thousand units).  While the
job runs neither changes what it was sent.  Nor once it ended: most of a
large deployment's reports come after its result (the reports and results
queues keep no common order), and they quote no secret the job was not
given; a later job's new secrets are found when its own reports come, under
its own id.  The API that starts a deployment has both descriptions in hand
and keeps the job's secrets then (:func:`remember`), so that its first
reports read neither.  The time bound keeps a job's set from outliving a
change of the types' secret fields for more than :data:`_SECRETS_KEPT` seconds.
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
_JOBS_KEPT = 4096       # jobs whose secrets are kept (the least recently used go)
# characters of secrets kept in all: a tenant's descriptions full of long secrets
# cannot make the API keep more; a job's set larger than this is not kept
_CHARACTERS_KEPT = 4_000_000
_secrets_lock = threading.Lock()
# job id -> (time, secrets, their characters)
_secrets_kept: collections.OrderedDict[str, tuple[float, frozenset[str], int]] = \
    collections.OrderedDict()
_characters_kept = 0

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
    :data:`_SECRETS_KEPT` seconds (at most :data:`_JOBS_KEPT` jobs and
    :data:`_CHARACTERS_KEPT` characters, the least recently used forgotten first)."""
    now = time.monotonic()
    with _secrets_lock:
        kept = _secrets_kept.get(deployment.id)
        if kept is not None and now - kept[0] < _SECRETS_KEPT:
            _secrets_kept.move_to_end(deployment.id)
            return set(kept[1])
    keys = secret_keys(db, deployment.environment_id)
    secrets = descriptions_secrets(
        [owner.description for owner in (db.get(Environment, deployment.environment_id),
                                         db.get(ConfigSession, deployment.session_id or ""))
         if owner is not None], keys)
    remember(deployment.id, secrets, now)
    return secrets


def descriptions_secrets(descriptions: list[Any], keys: frozenset[str]) -> set[str]:
    """The secrets in a job's descriptions (its environment's and its session's)."""
    secrets: set[str] = set()
    for description in descriptions:
        find_secrets(description, secrets, keys)
    return secrets


def remember(job_id: str, secrets: set[str], now: float | None = None) -> None:
    """Keep the secrets of job ``job_id``: the API starting a job has its
    descriptions in hand, and its reports and events then need no read of them."""
    global _characters_kept
    size = sum(len(secret) for secret in secrets) + 1
    if size > _CHARACTERS_KEPT:
        return
    entry = (time.monotonic() if now is None else now, frozenset(secrets), size)
    with _secrets_lock:
        old = _secrets_kept.pop(job_id, None)
        if old is not None:
            _characters_kept -= old[2]
        _secrets_kept[job_id] = entry
        _characters_kept += size
        while len(_secrets_kept) > _JOBS_KEPT or _characters_kept > _CHARACTERS_KEPT:
            _characters_kept -= _secrets_kept.popitem(last=False)[1][2]


def forget_all() -> None:
    """Forget every job's secrets (as a restart of the API does)."""
    global _characters_kept
    with _secrets_lock:
        _secrets_kept.clear()
        _characters_kept = 0
