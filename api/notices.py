"""The notifications of a job's end, as the API's stores build them
(:mod:`fornace.common.notifications` has the events and payloads).

A job ends once, whichever conductor ran it and however often: when the API
stores its result (:mod:`fornace.api.stores.results`), its refusal
(:mod:`fornace.api.stores.jobevents`) or its abandon
(:mod:`fornace.api.stores.jobs`), in a transaction that a redelivered
message finds done already.  Each builds its :class:`Notice` in that
transaction and sends it once it committed.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session as DbSession

from fornace.common import notifications
from fornace.common.db.models import ConfigSession
from fornace.common.notifications import EnvironmentLike, JobFields


@dataclass(frozen=True)
class Notice:
    """One notification to send after the commit."""

    event_type: str
    payload: dict[str, Any]
    error: bool = False


def session_user(db: DbSession, session_id: str | None) -> str | None:
    """The user of a deploy job's configuration session: who deployed it."""
    if not session_id:
        return None
    return db.scalar(select(ConfigSession.user_id).where(ConfigSession.id == session_id))


def job_ended(db: DbSession, env: EnvironmentLike, job: Any, state: str,
              finished: datetime.datetime, user_id: str | None = None) -> Notice:
    """The notice of ``job`` (a row, read before it ended) ending in ``state``
    at ``finished``: ``environment.<deploy|delete|action>.end``, or ``.error``
    unless it succeeded; ``user_id`` defaults to its session's user.  A
    deletion that succeeded says when the environment went (``deleted_at``)."""
    fields = JobFields(job.id, job.kind, state, job.started, finished)
    if user_id is None:
        user_id = session_user(db, job.session_id)
    more: dict[str, Any] = {}
    if job.kind == "delete" and state == notifications.SUCCESS:
        more = {"deleted_at": notifications.utc(finished), "abandoned": False}
    return Notice(notifications.ended_event(job.kind, state),
                  notifications.job_payload(env, fields, user_id, **more),
                  state != notifications.SUCCESS)
