"""Environments: list, create, show, rename and delete (Murano 0.2).

Names are unique within a tenant (a name taken is a 409 naming the
environment that has it: :mod:`fornace.api.namelocks`); a busy environment
cannot be renamed nor deleted but by abandoning its job
(:mod:`fornace.api.jobstate`).  Deleting a deployed environment is a job of
action ``delete``.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, delete, exists, select, update
from sqlalchemy.orm import Session as DbSession

from fornace.api import networks
from fornace.api.context import Context, allowed, session_allowed
from fornace.api.errors import Forbidden
from fornace.api.ids import could_be_id, lookup_id
from fornace.api.jobstate import BUSY, busy_error, first_deployment_model, refuse_if_busy
from fornace.api.namelocks import lock_names, refuse_taken_name
from fornace.api.packages.usage import pinned_digests, pins_of
from fornace.api.trusts import Delegation
from fornace.api.views import env_row_view, env_view
from fornace.common import contract, notifications
from fornace.common.db import locks
from fornace.common.db.models import (ConfigSession, Job, Environment, JobLock, new_id,
                                      utcnow)
from fornace.common.packages.layers import job_packages
from fornace.common.secrets import masked

if TYPE_CHECKING:
    from fornace.api.stores.store import Store

LOG = logging.getLogger(__name__)

# The view of an environment and whether it has a session of its current
# version still open (then its status is "pending" unless it is busy).
_ENV_VIEW_COLUMNS = (Environment.id, Environment.name, Environment.created, Environment.updated,
                     Environment.tenant_id, Environment.version, Environment.state,
                     Environment.region)
_PENDING = exists().where(ConfigSession.environment_id == Environment.id,
                          ConfigSession.state == "open",
                          ConfigSession.version == Environment.version).label("pending")
_PINS = pins_of(Environment.id).label("pins")

# The hot reads' statements, built once: building a select and its WHERE per
# request cost more CPU than running it (half of a list's time in the API).
_LIST_ALL = select(*_ENV_VIEW_COLUMNS, _PENDING).order_by(Environment.created)
_LIST = _LIST_ALL.where(Environment.tenant_id == bindparam("tenant"))
_SHOW = select(*Environment.__table__.c, _PENDING, _PINS).where(
    Environment.id == bindparam("env_id"))
_SESSION = select(*ConfigSession.__table__.c).where(ConfigSession.id == bindparam("session_id"))


def shown_status(state: str, pending: bool) -> str:
    """The status users see: busy states first, then an open session ("pending")."""
    return state if state in BUSY else "pending" if pending else state


class Environments:
    """The environments of ``store``'s database."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._sessions = store.sessions

    def list(self, ctx: Context, tenant_id: str | None = None,
             every_tenant: bool = False) -> list[dict[str, Any]]:
        """The environments of the caller's project, of ``tenant_id``, or of every
        project; another project's are the cloud admin's to list (``ctx.is_admin``)."""
        tenant = ctx.tenant_id if tenant_id is None else tenant_id
        if (every_tenant or tenant != ctx.tenant_id) and not ctx.is_admin:
            raise Forbidden("listing other projects' environments is for the cloud admin")
        if not every_tenant and not could_be_id(tenant):  # a ?tenant= no row can have
            return []
        # One query, only the columns of the view (not the descriptions), no ORM
        # objects: a tenant may have hundreds of environments.
        with self.store.read() as db:
            rows = db.execute(_LIST_ALL) if every_tenant else db.execute(
                _LIST, {"tenant": tenant})
            return [env_row_view(env_id, name, created, updated, tenant_id, version,
                                 shown_status(state, pending), region)
                    for env_id, name, created, updated, tenant_id, version, state, region,
                    pending in rows]

    def create(self, ctx: Context, name: str, region: str | None = None,
               default_networks: dict[str, Any] | None = None) -> dict[str, Any]:
        """A new empty environment; 409 when the tenant has one of that name.

        ``region`` (the OpenStack region its stack goes to) is kept in a column
        and in the object model, whose top-level ``region`` the conductor takes
        as the region of the stack of every unit of the environment.
        ``default_networks`` (Murano's ``defaultNetworks``, checked by
        :func:`fornace.api.networks.networks_problem`) is kept in the object
        model only, its networks given ids."""
        with self._sessions.begin() as db:
            lock_names(db, ctx.tenant_id)
            refuse_taken_name(db, ctx.tenant_id, name)
            env_id = new_id()
            description: dict[str, Any] = {"id": env_id, "name": name, "services": []}
            if region is not None:
                description["region"] = region
            if default_networks is not None:
                description[networks.FIELD] = networks.prepared_networks(default_networks)
            env = Environment(id=env_id, name=name, tenant_id=ctx.tenant_id, version=0,
                              state="ready", region=region, description=description)
            db.add(env)
            db.flush()
            view = env_view(env, "ready")
        if self.store.notifications.enabled:
            self.store.notify(ctx, notifications.ENVIRONMENT_CREATE_END,
                              notifications.environment_payload(env, ctx.user_id))
        return view

    def get(self, ctx: Context, env_id: str, session_id: str | None = None) -> dict[str, Any]:
        """The environment and its services (a session's, with ``session_id``; while
        its first deployment runs, those it deploys), masked."""
        with self.store.read() as db:
            # the environment, whether it is pending and the versions it is pinned
            # to (its catalog's key) in one query, no ORM object
            env = db.execute(_SHOW, {"env_id": lookup_id(env_id, "environment")}).first()
            allowed(ctx, env_id, env)
            description = (first_deployment_model(db, env.id, env.version, env.state)
                           or env.description)
            if session_id:
                session = session_allowed(ctx, env, session_id, db.execute(
                    _SESSION, {"session_id": lookup_id(session_id, "session")}).first(),
                    editable=False)
                description = session.description
            view = env_view(env, shown_status(env.state, env.pending))
            view["services"] = masked(description.get("services") or [],
                                      keys=self.store.secret_keys_for(
                                          db, pinned_digests(env.pins)))
            return view

    def update(self, ctx: Context, env_id: str, name: str) -> dict[str, Any]:
        """Rename; 409 while a job runs (its result would bring the old name
        back into the description) or when another environment has the name."""
        with self._sessions.begin() as db:
            env = self.store.environment(db, ctx, env_id, lock=True)
            refuse_if_busy(db, env)
            if name != env.name:
                lock_names(db, env.tenant_id)
                refuse_taken_name(db, env.tenant_id, name, but=env.id)
            env.name = name
            env.description = {**env.description, "name": name}
            env.updated = utcnow()
            db.flush()
            return env_view(env, _status(db, env))

    def delete(self, ctx: Context, env_id: str, abandon: bool = False) -> bool:
        """Tear down (send a deletion task) or, never deployed, just forget;
        whether the environment is gone already (no deletion job runs).

        With ``abandon`` the environment is forgotten at once, whatever runs:
        its running job's lock is revoked (its conductor stops it at its next
        step) and a clean-up deletion task still goes out, so a conductor
        removes what was made for it (its stack: instances, local-cloud
        processes); what that task reports back is ignored.  Without it, a
        busy environment is a 409 naming its running job.
        """
        with self.store.delegated(ctx, env_id, deleting=True) as delegation:
            env, deployment = self._delete(ctx, env_id, abandon, delegation)
        if not self.store.notifications.enabled:
            return deployment is None
        if deployment is not None:   # a deletion job: it ends when its result is stored
            self.store.notify(ctx, notifications.ENVIRONMENT_DELETE_START,
                              notifications.job_payload(env, deployment, ctx.user_id))
        else:
            self.store.notify(ctx, notifications.ENVIRONMENT_DELETE_END,
                              notifications.deleted_payload(env, ctx.user_id, utcnow(),
                                                            abandoned=abandon))
        return deployment is None

    def _delete(self, ctx: Context, env_id: str, abandon: bool,
                delegation: Delegation) -> tuple[Environment, Job | None]:
        """The environment, and its deletion job (None: it is gone already)."""
        with self._sessions.begin() as db:
            env = self.store.environment(db, ctx, env_id, lock=True)
            if env.version == 0 and env.state == "ready":
                db.execute(delete(JobLock).where(JobLock.environment_id == env.id))
                db.delete(env)
                return env, None
            if abandon:
                locks.revoke(db, env.id)   # the row (and its token) stays: fencing
                cleanup = contract.deletion_task_body(env.id, env.name, ctx.token,
                                                      env.tenant_id, job_id=new_id(),
                                                      trust_id=delegation.trust_of(env),
                                                      region=env.region)
                db.delete(env)
            else:
                refuse_if_busy(db, env)
                previous = env.state
                claimed = db.execute(update(Environment).where(
                    Environment.id == env.id, Environment.state.not_in(BUSY)).values(
                    state="deleting", updated=utcnow())).rowcount
                if claimed != 1:    # a job started since it was read
                    raise busy_error(db, env)
                deployment = Job(id=new_id(), environment_id=env.id,
                                        tenant_id=env.tenant_id, kind="delete", parameters={},
                                        packages=job_packages(None),   # its task names none
                                        description=masked(
                                            env.description,
                                            keys=self.store.secret_keys(db, env.id)))
                db.add(deployment)
                self.store.keep_trust(env, delegation)
                body = contract.deletion_task_body(env.id, env.name, ctx.token, env.tenant_id,
                                                   job_id=deployment.id,
                                                   trust_id=delegation.trust_of(env),
                                                   region=env.region)
        if abandon:
            try:
                self.store.publish(cleanup, cleanup["job"]["id"])
            except Exception as exc:  # the environment is gone either way: say what is left
                LOG.error("environment %s abandoned, but its clean-up task could not be sent "
                          "(%s): its stack stays until it is removed by hand", env_id, exc)
            return env, None
        self.store.send_task(body, deployment.id, env_id, previous)
        return env, deployment


def _status(db: DbSession, env: Environment) -> str:
    """The status shown of an environment read as an ORM object."""
    if env.state in BUSY:
        return env.state
    return shown_status(env.state, db.scalar(select(_PENDING).where(
        Environment.id == env.id)))
