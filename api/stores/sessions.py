"""Configuration sessions (Murano 0.2): open one on an environment, show it,
delete it, and deploy it -- a job of action ``deploy``.

A session is a copy of the environment's description that its user edits
(:mod:`.services`); it is valid while the environment keeps the version it
was opened on.  Deploying claims the environment and the session with
conditional UPDATEs, so two concurrent deploys cannot both win.
"""
from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session as DbSession

from fornace.api.context import Context
from fornace.api.errors import BadRequest, Conflict, Forbidden
from fornace.api.jobsecrets import descriptions_secrets, remember
from fornace.api.jobstate import BUSY, busy_error, refuse_if_busy
from fornace.api.packages.usage import task_packages_and_pins
from fornace.api.trusts import Delegation
from fornace.api.views import session_view
from fornace.common import contract, notifications
from fornace.common.actionparams import ActionError, check_parameters
from fornace.common.db.models import ConfigSession, Job, Environment, new_id, utcnow
from fornace.common.db.prepared import update_row
from fornace.common.packages.layers import job_packages
from fornace.common.secrets import masked

if TYPE_CHECKING:
    from fornace.api.stores.store import Store


class ConfigSessions:
    """The configuration sessions of ``store``'s environments."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._sessions = store.sessions

    def open(self, ctx: Context, env_id: str) -> dict[str, Any]:
        """A new session on the environment's description (409 while it is busy)."""
        with self._sessions.begin() as db:
            env = self.store.environment(db, ctx, env_id, lock=True)
            refuse_if_busy(db, env)
            session = ConfigSession(id=new_id(), environment_id=env.id, user_id=ctx.user_id,
                                    version=env.version, state="open",
                                    description=copy.deepcopy(env.description))
            db.add(session)
            db.flush()
            return session_view(session)

    def get(self, ctx: Context, env_id: str, session_id: str) -> dict[str, Any]:
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            session = self.store.config_session(db, ctx, env, session_id, editable=False)
            if session.state == "open" and session.version != env.version:
                raise Forbidden(f"session {session_id} is invalid: environment {env_id} "
                                f"changed since it was opened")
            return session_view(session)

    def delete(self, ctx: Context, env_id: str, session_id: str) -> None:
        with self._sessions.begin() as db:
            env = self.store.environment(db, ctx, env_id)
            session = self.store.config_session(db, ctx, env, session_id, editable=False)
            if session.state == "deploying":    # its deployment is the job that runs
                raise busy_error(db, env)
            db.delete(session)

    def deploy(self, ctx: Context, env_id: str, session_id: str,
               change_detection: str | None = None) -> None:
        """Deploy a session: a job of action ``deploy`` (``change_detection``
        defaults to ``evaluate``; a bad value is a 400)."""
        given = {} if change_detection is None else {"change_detection": change_detection}
        try:
            parameters = check_parameters("deploy", given, {}, self.store.catalog)
        except ActionError as exc:
            raise BadRequest(str(exc)) from None
        with self.store.delegated(ctx, env_id) as delegation:
            body, job_id, previous, started = self._claim_deploy(ctx, env_id, session_id,
                                                                 parameters, delegation)
            self.store.send_task(body, job_id, env_id, previous, session_id)
        self.store.notify(ctx, notifications.ENVIRONMENT_DEPLOY_START, started)

    def _claim_deploy(self, ctx: Context, env_id: str, session_id: str,
                      parameters: dict[str, Any],
                      delegation: Delegation) -> tuple[dict, str, str, dict | None]:
        """Mark the environment and its session deploying and record the job: the
        task's body, the job's id, the environment's state before and the
        payload of ``environment.deploy.start`` (None: notifications are off)."""
        with self._sessions.begin() as db:
            # the environment, then the session (so no edit of it is half-seen): the
            # order every transaction that locks both takes
            env = self.store.environment(db, ctx, env_id, lock=True)
            session = self.store.config_session(db, ctx, env, session_id, editable=False,
                                                lock=True)
            refuse_if_busy(db, env)
            if session.state != "open":
                raise Forbidden(f"session {session_id} is already {session.state}")
            if session.version != env.version:
                raise Forbidden(f"session {session_id} is invalid: another session was "
                                f"deployed since it was opened")
            if session.description == env.description:
                refuse_if_another_holds_changes(db, env, session)
            previous = env.state
            # plain UPDATEs of the tables: the ORM's would evaluate them against
            # the session's objects, which nothing reads again
            now = utcnow()
            claimed = db.execute(_claim_statement(), {
                "env_id": env.id, "b_version": session.version, "now": now}).rowcount
            if claimed != 1:    # a job started since it was read
                raise busy_error(db, env)
            update_row(db, ConfigSession, session.id, state="deploying", updated=utcnow())
            packages, pins = task_packages_and_pins(db, env.id)
            keys = self.store.secret_keys_for(db, pins)
            job_id = new_id()
            db.execute(insert(Job.__table__), {   # a plain INSERT: nothing to flush
                "id": job_id, "environment_id": env.id, "tenant_id": env.tenant_id,
                "session_id": session.id, "kind": "deploy", "parameters": parameters,
                "description": masked(session.description, keys=keys), "started": now,
                "packages": job_packages(packages)})
            secrets = descriptions_secrets([env.description, session.description], keys)
            self.store.keep_trust(env, delegation)
            body = contract.task_body(session.description, ctx.token, env.tenant_id,
                                      job=contract.job_section(job_id, "deploy", parameters),
                                      trust_id=delegation.trust_of(env),
                                      packages=packages,
                                      region=env.region)
        remember(job_id, secrets)   # what its reports and events are masked by
        started = notifications.job_payload(
            env, notifications.JobFields(job_id, "deploy", "running", now),
            ctx.user_id) if self.store.notifications.enabled else None
        return body, job_id, previous, started


def refuse_if_another_holds_changes(db: DbSession, env: Environment,
                                    session: ConfigSession) -> None:
    """A session without changes is not deployed over another open session of
    the environment that holds some (409): deployed first, it would make that
    one invalid and leave the environment as it was -- two users deploying at
    once, the one with nothing to deploy winning.  Alone, it redeploys."""
    rivals = db.scalars(select(ConfigSession).where(
        ConfigSession.environment_id == env.id, ConfigSession.id != session.id,
        ConfigSession.state == "open", ConfigSession.version == env.version)
        .order_by(ConfigSession.updated.desc()))
    for rival in rivals:
        if rival.description != env.description:
            raise Conflict(f"session {session.id} has no changes to deploy, and session "
                           f"{rival.id} of this environment (user {rival.user_id}) holds "
                           f"changes: deploy that session, or delete it first")


@functools.cache
def _claim_statement() -> Any:
    """The UPDATE that marks an environment deploying if it is still at the
    session's version and idle, built once (:mod:`fornace.common.db.prepared`)."""
    envs = Environment.__table__
    return update(envs).where(
        envs.c.id == bindparam("env_id"), envs.c.version == bindparam("b_version"),
        envs.c.state.not_in(BUSY)).values(
        state="deploying", updated=bindparam("now", type_=envs.c.updated.type))
