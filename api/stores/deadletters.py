"""Dead letters: the messages from the conductor (reports, results, job
events) that cannot be stored, even alone, set aside in their own table.

The consumer of the API (:class:`fornace.common.consumer.Consumer`) hands
them here -- a body the contract refuses, one the database refuses alone
(:mod:`fornace.api.messagestore`), one that is not JSON, one that failed
too often -- and acks them: they never hold back another message, job or
tenant, and an operator sees them (``GET /dead-letters``, ``fornace
dead-letters list``).  Each row keeps the reason, the queue and kind, the
ids the message named (its job, environment and tenant when the database
knows them) and a bounded copy of the body, the secrets of the message and
of its job masked.  The table keeps the newest :data:`MAX_KEPT` rows.
"""
from __future__ import annotations

import datetime
import json
import logging
from typing import Any, Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session as DbSession, sessionmaker

from fornace.api.ids import could_be_id
from fornace.api.jobsecrets import SecretKeys, job_secrets
from fornace.common.db.outages import transient
from fornace.api.views import iso
from fornace.common import contract
from fornace.common.consumer import Delivery
from fornace.common.db.models import DeadLetter, Environment, Job, new_id, utcnow
from fornace.common.secrets import find_secrets, mask_text, masked

LOG = logging.getLogger(__name__)

MAX_BODY = 4096          # characters of a message's copy kept
MAX_REASON = 1000        # characters of its reason kept
MAX_KEPT = 100_000       # rows: the oldest go when there are more
MAX_LISTED = 1000        # rows one listing shows at most
UNSTORABLE = "(the copy of the body could not be stored)"

Poisoned = tuple[Any, Delivery, BaseException]   # (body, delivery, why)


class DeadLetters:
    """The dead-letter table on ``sessions``."""

    def __init__(self, sessions: sessionmaker, secret_keys: SecretKeys) -> None:
        self._sessions = sessions
        self._secret_keys = secret_keys   # an environment's secret fields (its types')

    def set_aside(self, messages: Sequence[Poisoned]) -> None:
        """Keep ``messages`` (a :data:`fornace.common.consumer.SetAside`): in
        one transaction; raises (and so they are requeued) only when the
        database is out of reach -- whatever else goes wrong, they are kept
        without their bodies' copies."""
        try:
            self._store(messages, copies=True)
        except Exception as exc:
            if transient(exc):
                raise
            LOG.warning("dead letters could not be stored with their bodies (%s); storing "
                        "them without", type(exc).__name__)
            self._store(messages, copies=False)

    def _store(self, messages: Sequence[Poisoned], copies: bool) -> None:
        with self._sessions.begin() as db:
            rows = [_row(db, body, delivery, why, copies, self._secret_keys)
                    for body, delivery, why in messages]
            now = utcnow()
            for number, row in enumerate(rows):   # in arrival order, whatever the clock
                row.created = now + datetime.timedelta(microseconds=number)
            db.add_all(rows)
            db.flush()
            _prune(db)
        for row in rows:
            LOG.warning("message %s on %r (%s of job %s, environment %s, tenant %s) set aside "
                        "as dead letter %s: %s", row.message_id, row.queue, row.kind,
                        row.job_id or "?", row.environment_id or "?", row.tenant_id or "?",
                        row.id, row.reason)

    def list(self, limit: int = 100, tenant_id: str | None = None) -> list[dict[str, Any]]:
        """The newest dead letters first (of one tenant), at most ``limit``."""
        if tenant_id is not None and not could_be_id(tenant_id):
            return []     # no stored tenant id equals it (and PostgreSQL refuses a NUL)
        with self._sessions() as db:
            query = select(DeadLetter).order_by(DeadLetter.created.desc(), DeadLetter.id)
            if tenant_id is not None:
                query = query.where(DeadLetter.tenant_id == tenant_id)
            return [dead_letter_view(row) for row in db.scalars(
                query.limit(max(1, min(limit, MAX_LISTED))))]


def dead_letter_view(row: DeadLetter) -> dict[str, Any]:
    """A dead letter as the API shows it."""
    return {"id": row.id, "queue": row.queue, "kind": row.kind, "message_id": row.message_id,
            "job_id": row.job_id, "environment_id": row.environment_id,
            "tenant_id": row.tenant_id, "reason": row.reason, "body": row.body,
            "created": iso(row.created)}


def _row(db: DbSession, body: Any, delivery: Delivery, why: BaseException,
         copies: bool, secret_keys: SecretKeys) -> DeadLetter:
    kind = _kind(delivery.queue, body)
    job_id, env_id = _claimed_ids(kind, body, delivery.message_id)
    job = db.get(Job, job_id) if job_id else None
    env = db.get(Environment, job.environment_id if job is not None else env_id) \
        if (job is not None or env_id) else None
    secrets = find_secrets(body)
    if job is not None:
        secrets |= job_secrets(db, job, secret_keys)
    elif env is not None:
        find_secrets(env.description, secrets, secret_keys(db, env.id))
    tenant = job.tenant_id if job is not None else env.tenant_id if env is not None else None
    return DeadLetter(
        id=new_id(), queue=_bounded(delivery.queue, 255), kind=kind,
        message_id=_bounded(delivery.message_id, 255) if delivery.message_id else None,
        job_id=job_id, environment_id=env.id if env is not None else env_id,
        tenant_id=tenant, reason=_bounded(mask_text(str(why), secrets), MAX_REASON),
        body=_copy(body, secrets) if copies else UNSTORABLE)


def _kind(queue: str, body: Any) -> str:
    if not isinstance(body, dict):    # not JSON, or not an object
        return "message"
    if queue == contract.REPORTS:
        return "report"
    if queue == contract.JOB_EVENTS or (queue == contract.RESULTS
                                        and contract.is_job_event(body)):
        return "job event"
    return "result" if queue == contract.RESULTS else "message"


def _claimed_ids(kind: str, body: Any, message_id: str | None) -> tuple[str | None, str | None]:
    """The job and environment ids a message names (None: none that any
    stored id could equal)."""
    fields = body if isinstance(body, dict) else {}
    job: Any = fields.get("job_id")
    env: Any = fields.get("environment_id")
    if kind == "report" and message_id and "-report-" in message_id:
        job = message_id.rsplit("-report-", 1)[0]
    elif kind == "result":
        job, env = message_id, fields.get("id")
    return _id(job), _id(env)


def _id(value: Any) -> str | None:
    return value if isinstance(value, str) and value and could_be_id(value) else None


def _copy(body: Any, secrets: set[str]) -> str:
    """The body as JSON text (every character past ASCII escaped, so a NUL
    is ``\\u0000``: PostgreSQL's text holds that), secrets masked, bounded."""
    text = json.dumps(mask_text(body, secrets) if isinstance(body, str) else
                      masked(body, secrets), ensure_ascii=True, default=str)
    if len(text) > MAX_BODY:
        text = f"{text[:MAX_BODY]}... ({len(text) - MAX_BODY} more characters)"
    return text


def _bounded(text: str, limit: int) -> str:
    text = text.replace("\x00", "\\u0000")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _prune(db: DbSession) -> None:
    """Keep the newest :data:`MAX_KEPT` rows."""
    oldest_kept = db.scalar(select(DeadLetter.created).order_by(DeadLetter.created.desc())
                            .offset(MAX_KEPT - 1).limit(1))
    if oldest_kept is not None:
        db.execute(delete(DeadLetter).where(DeadLetter.created < oldest_kept))
