"""What the API does with the database: environments, sessions, services,
deployments and the results and reports that come back from the conductor.

Every call takes the caller's :class:`Context`; an environment of another
tenant is never read or changed (403) but by the cloud admin (``is_admin``,
as :mod:`fornace.api.policy` decides; the routes check each call's rule), a
missing one is 404.  Changes that
must not be half-stored happen in one transaction; deploying is claimed
with conditional UPDATEs so two concurrent deploys cannot both win.

One conflict rule: a call that would change a busy environment (one whose
job runs: open a session, edit its services, deploy, rename, delete without
abandon, run an action) is a 409 naming the running job (:func:`busy_error`).
Names are unique: an environment's within its tenant, a service's within
its environment (in the session's view); a name taken is a 409 naming what
has it.

A deployment is a *job* (see :mod:`fornace.api.jobstore` for the other lifecycle
actions): the session deploy is a job of action ``deploy``, an environment
delete one of action ``delete``; every task carries its job section.
"""
from __future__ import annotations

import collections
import contextlib
import copy
import datetime
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from sqlalchemy import delete, exists, func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session as DbSession, defer, sessionmaker

from fornace.api import specs, tree
from fornace.api.limits import UnitLimits, unit_counts
from fornace.common import contract, topology
from fornace.common.actionparams import ActionError, check_parameters
from fornace.common.catalog import Catalog, catalog_with, load_catalog
from fornace.common.db import locks
from fornace.common.resources import BUILTIN_DATA
from fornace.common.secrets import find_secrets, mask_text, masked
from fornace.common.db.models import (ConfigSession, Deployment, Environment, JobLock, JobTask,
                                     Status, new_id, utcnow)
from fornace.api.errors import BadRequest, Conflict, Forbidden, NotFound, Unavailable
from fornace.api.packages.usage import package_types, task_packages
from fornace.api.trusts import Delegation, Trusts

LOG = logging.getLogger(__name__)

BUSY = ("deploying", "deleting")
Publisher = Callable[[dict, str], None]  # (task body, message id)
#: what storing one message of a batch came to: None (stored, or dropped as
#: its own code decided), a ContractError (a bad message) or the failure that
#: stopped it (the consumer requeues it); see :func:`store_all`
Outcome = Exception | None
Item = TypeVar("Item")


@dataclass(frozen=True)
class Context:
    """Who calls: their project (tenant) and user, their token (keystone mode) and
    what the policy needs to know of them (:mod:`fornace.api.policy`)."""

    tenant_id: str
    user_id: str
    token: str | None = None
    is_admin: bool = False          # may act on every tenant (the policy's cloud_admin)
    roles: frozenset[str] = frozenset()
    user_name: str = ""
    project_name: str = ""
    project_domain_id: str = ""
    expires_at: float | None = None  # the token's end (time.time()); None: no token


def iso(value: datetime.datetime | None) -> str | None:
    # == value.replace(microsecond=0).isoformat(), in one call
    return value.isoformat(timespec="seconds") if value is not None else None


def shown_status(state: str, pending: bool) -> str:
    """The status users see: busy states first, then an open session ("pending")."""
    return state if state in BUSY else "pending" if pending else state


def env_view(env: Environment, status: str) -> dict[str, Any]:
    return _env_view(env.id, env.name, env.created, env.updated, env.tenant_id, env.version,
                     status)


def _env_view(env_id: str, name: str, created: datetime.datetime | None,
              updated: datetime.datetime | None, tenant_id: str, version: int,
              status: str) -> dict[str, Any]:
    return {"id": env_id, "name": name, "created": iso(created), "updated": iso(updated),
            "tenant_id": tenant_id, "version": version, "status": status}


def session_view(session: ConfigSession) -> dict[str, Any]:
    return {"id": session.id, "environment_id": session.environment_id,
            "created": iso(session.created), "updated": iso(session.updated),
            "user_id": session.user_id, "version": session.version, "state": session.state}


def deployment_view(deployment: Deployment) -> dict[str, Any]:
    return {"id": deployment.id, "environment_id": deployment.environment_id,
            "state": deployment.state, "started": iso(deployment.started),
            "finished": iso(deployment.finished), "created": iso(deployment.created),
            "updated": iso(deployment.updated), "description": deployment.description}


def status_view(status: Status) -> dict[str, Any]:
    return {"id": status.id, "deployment_id": status.deployment_id, "entity": status.entity,
            "entity_id": status.entity_id, "text": status.text, "details": status.details,
            "level": status.level, "created": iso(status.created),
            "updated": iso(status.updated)}


# The view of an environment and whether it has a session of its current
# version still open (then its status is "pending" unless it is busy).
_ENV_VIEW_COLUMNS = (Environment.id, Environment.name, Environment.created, Environment.updated,
                     Environment.tenant_id, Environment.version, Environment.state)
_PENDING = exists().where(ConfigSession.environment_id == Environment.id,
                          ConfigSession.state == "open",
                          ConfigSession.version == Environment.version).label("pending")


class Store:
    def __init__(self, sessions: sessionmaker, publish: Publisher,
                 catalog: Catalog | None = None, limits: UnitLimits | None = None,
                 trusts: Trusts | None = None) -> None:
        self._sessions = sessions
        self._publish = publish
        # keystone mode: the trusts jobs act with (None: tasks carry no trust)
        self.trusts = trusts
        # caps on the units of a service and of an environment (sessions, scale jobs)
        self.limits = limits if limits is not None else UnitLimits()
        # the type catalog the conductor uses: job parameters are checked against it
        self.catalog = catalog if catalog is not None else load_catalog(
            BUILTIN_DATA / "types.json")
        self._catalogs: dict[tuple[str, ...], Catalog] = {}   # see catalog_of
        # The hot reads (list and show an environment) use a plain connection
        # without a transaction: no ORM session, no BEGIN/ROLLBACK round trips.
        # Nothing changes for them: they write nothing, and under READ COMMITTED
        # (PostgreSQL's default) each statement sees the latest committed data
        # whether or not it is in a transaction; SQLite does not begin one
        # before a SELECT anyway.
        engine = sessions.kw.get("bind")
        self._reader = (engine.execution_options(isolation_level="AUTOCOMMIT")
                        if engine is not None else None)

    def catalog_of(self, db: Any, env_id: str) -> Catalog:
        """The catalog of an environment: the API's, with the types of the workflow
        packages it is pinned to (remembered per set of package versions)."""
        layers = package_types(db, env_id)
        if not layers:
            return self.catalog
        key = tuple(package_id for package_id, _types in layers)
        catalog = self._catalogs.get(key)
        if catalog is None:
            catalog = self.catalog
            for _package_id, types in layers:
                catalog = catalog_with(catalog, types)
            if len(self._catalogs) >= 64:
                self._catalogs.clear()
            self._catalogs[key] = catalog
        return catalog

    def environment_catalog(self, env_id: str) -> Catalog:
        """:meth:`catalog_of` an environment, on a connection of its own (the
        caller checked the access already)."""
        with self._read() as db:
            return self.catalog_of(db, lookup_id(env_id, "environment"))

    @property
    def sessions(self) -> sessionmaker:
        return self._sessions

    def _read(self) -> Any:
        """A connection for reads (or an ORM session if the factory has no engine)."""
        return self._reader.connect() if self._reader is not None else self._sessions()

    # -- helpers ---------------------------------------------------------
    def environment(self, db: DbSession, ctx: Context, env_id: str,
                    lock: bool = False) -> Environment:
        query = select(Environment).where(Environment.id == lookup_id(env_id, "environment"))
        if lock:
            query = query.with_for_update()
        return allowed(ctx, env_id, db.scalars(query).first())

    def tenant_of(self, env_id: str) -> str | None:
        """The project ``env_id`` belongs to (None: no such environment): the
        target a cloud admin's call on another project's environment is checked
        against (:mod:`fornace.api.policy`)."""
        if not could_be_id(env_id):
            return None
        with self._read() as db:
            return db.execute(select(Environment.tenant_id).where(
                Environment.id == env_id)).scalar()

    @staticmethod
    def _status(db: DbSession, env: Environment) -> str:
        if env.state in BUSY:
            return env.state
        return shown_status(env.state, db.scalar(select(_PENDING).where(
            Environment.id == env.id)))

    def config_session(self, db: DbSession, ctx: Context, env: Environment,
                       session_id: str | None, editable: bool,
                       lock: bool = False) -> ConfigSession:
        """The configuration session named by the header, checked; with ``lock``
        (PostgreSQL) the other transactions that lock it wait until this one ends."""
        if not session_id:
            raise BadRequest("the X-Configuration-Session header is required")
        return _session_allowed(ctx, env, session_id,
                                db.get(ConfigSession, lookup_id(session_id, "session"),
                                       with_for_update=lock or None),
                                editable)

    @staticmethod
    def busy_error(db: DbSession, env: Environment) -> Conflict:
        """The 409 of a change refused because ``env`` is busy (:func:`busy_error`)."""
        return busy_error(db, env)

    # -- environments ----------------------------------------------------
    def list_environments(self, ctx: Context, tenant_id: str | None = None,
                          every_tenant: bool = False) -> list[dict[str, Any]]:
        """The environments of the caller's project, of ``tenant_id``, or of every
        project; another project's are the cloud admin's to list (``ctx.is_admin``)."""
        tenant = ctx.tenant_id if tenant_id is None else tenant_id
        if (every_tenant or tenant != ctx.tenant_id) and not ctx.is_admin:
            raise Forbidden("listing other projects' environments is for the cloud admin")
        if not every_tenant and not could_be_id(tenant):  # a ?tenant= no row can have
            return []
        query = select(*_ENV_VIEW_COLUMNS, _PENDING)
        if not every_tenant:
            query = query.where(Environment.tenant_id == tenant)
        # One query, only the columns of the view (not the descriptions), no ORM
        # objects: a tenant may have hundreds of environments.
        with self._read() as db:
            rows = db.execute(query.order_by(Environment.created))
            return [_env_view(env_id, name, created, updated, tenant_id, version,
                              shown_status(state, pending))
                    for env_id, name, created, updated, tenant_id, version, state, pending
                    in rows]

    def create_environment(self, ctx: Context, name: str) -> dict[str, Any]:
        """A new empty environment; 409 when the tenant has one of that name."""
        with self._sessions.begin() as db:
            lock_names(db, ctx.tenant_id)
            refuse_taken_name(db, ctx.tenant_id, name)
            env_id = new_id()
            env = Environment(id=env_id, name=name, tenant_id=ctx.tenant_id, version=0,
                              state="ready",
                              description={"id": env_id, "name": name, "services": []})
            db.add(env)
            db.flush()
            return env_view(env, "ready")

    def get_environment(self, ctx: Context, env_id: str,
                        session_id: str | None = None) -> dict[str, Any]:
        with self._read() as db:
            # the environment and whether it is pending in one query, no ORM object
            env = db.execute(select(*Environment.__table__.c, _PENDING).where(
                Environment.id == lookup_id(env_id, "environment"))).first()
            allowed(ctx, env_id, env)
            description = env.description
            if session_id:
                session = _session_allowed(ctx, env, session_id, db.execute(
                    select(*ConfigSession.__table__.c).where(
                        ConfigSession.id == lookup_id(session_id, "session"))).first(),
                    editable=False)
                description = session.description
            view = env_view(env, shown_status(env.state, env.pending))
            view["services"] = specs.masked_view(description.get("services") or [],
                                                 self.catalog_of(db, env.id))
            return view

    def update_environment(self, ctx: Context, env_id: str, name: str) -> dict[str, Any]:
        """Rename; 409 while a job runs (its result would bring the old name
        back into the description) or when another environment has the name."""
        with self._sessions.begin() as db:
            env = self.environment(db, ctx, env_id, lock=True)
            refuse_if_busy(db, env)
            if name != env.name:
                lock_names(db, env.tenant_id)
                refuse_taken_name(db, env.tenant_id, name, but=env.id)
            env.name = name
            env.description = {**env.description, "name": name}
            env.updated = utcnow()
            db.flush()
            return env_view(env, self._status(db, env))

    def delete_environment(self, ctx: Context, env_id: str, abandon: bool = False) -> None:
        """Tear down (send a deletion task) or, never deployed, just forget.

        With ``abandon`` the environment is forgotten at once, whatever runs:
        its running job's lock is revoked (its conductor stops it at its next
        step) and a clean-up deletion task still goes out, so a conductor
        removes what was made for it (its stack: instances, local-cloud
        processes); what that task reports back is ignored.  Without it, a
        busy environment is a 409 naming its running job.
        """
        with self.delegated(ctx, env_id, deleting=True) as delegation:
            self._delete_environment(ctx, env_id, abandon, delegation)

    def _delete_environment(self, ctx: Context, env_id: str, abandon: bool,
                            delegation: Delegation) -> None:
        with self._sessions.begin() as db:
            env = self.environment(db, ctx, env_id, lock=True)
            if env.version == 0 and env.state == "ready":
                db.execute(delete(JobLock).where(JobLock.environment_id == env.id))
                db.delete(env)
                return
            if abandon:
                locks.revoke(db, env.id)   # the row (and its token) stays: fencing
                cleanup = contract.deletion_task_body(env.id, env.name, ctx.token,
                                                      env.tenant_id, job_id=new_id(),
                                                      trust_id=delegation.trust_id)
                db.delete(env)
            else:
                refuse_if_busy(db, env)
                previous = env.state
                claimed = db.execute(update(Environment).where(
                    Environment.id == env.id, Environment.state.not_in(BUSY)).values(
                    state="deleting", updated=utcnow())).rowcount
                if claimed != 1:    # a job started since it was read
                    raise busy_error(db, env)
                deployment = Deployment(id=new_id(), environment_id=env.id,
                                        tenant_id=env.tenant_id, kind="delete", parameters={},
                                        description=masked(env.description))
                db.add(deployment)
                keep_trust(env, delegation)
                body = contract.deletion_task_body(env.id, env.name, ctx.token, env.tenant_id,
                                                   job_id=deployment.id,
                                                   trust_id=delegation.trust_id)
        if abandon:
            try:
                self._publish(cleanup, cleanup["job"]["id"])
            except Exception as exc:  # the environment is gone either way: say what is left
                LOG.error("environment %s abandoned, but its clean-up task could not be sent "
                          "(%s): its stack stays until it is removed by hand", env_id, exc)
            return
        self.send_task(body, deployment.id, env_id, previous)

    @contextlib.contextmanager
    def delegated(self, ctx: Context, env_id: str, deleting: bool = False,
                  create: bool = True) -> Iterator[Delegation]:
        """The trust the job ``ctx`` starts in the block acts with (keystone mode:
        :mod:`fornace.api.trusts`); one made for it is undone when the block fails
        (and the environment's previous one restored), the one it replaced is
        deleted when it succeeds.  The block stores it with :func:`keep_trust`.
        Without ``create`` (or for the deletion of a never deployed environment)
        only the environment's current trust is passed on."""
        with self._sessions() as db:
            env = self.environment(db, ctx, env_id)
            trust_id, trustor_id = env.trust_id, env.trustor_id
            forgotten = deleting and env.version == 0   # nothing on the cloud to act on
        if self.trusts is None or forgotten or not create:
            yield Delegation(trust_id, trustor_id)
            return
        delegation = self.trusts.for_job(ctx, trust_id, trustor_id)
        try:
            yield delegation
        except BaseException:
            if delegation.created:
                with self._sessions.begin() as db:
                    db.execute(update(Environment).where(
                        Environment.id == env_id,
                        Environment.trust_id == delegation.trust_id).values(
                        trust_id=delegation.replaced,
                        trustor_id=delegation.replaced_trustor))
                self.trusts.discard(delegation.trust_id)
            raise
        if delegation.replaced:
            self.trusts.discard(delegation.replaced)

    def send_task(self, body: dict, message_id: str, env_id: str, previous: str,
                  session_id: str | None = None) -> None:
        """Publish a task; if the broker refuses, undo the claim (nothing half-done)."""
        try:
            self._publish(body, message_id)
        except Exception as exc:
            LOG.error("environment %s: cannot publish task %s: %s", env_id, message_id, exc)
            with self._sessions.begin() as db:
                db.execute(update(Environment).where(Environment.id == env_id).values(
                    state=previous))
                if session_id:
                    db.execute(update(ConfigSession).where(
                        ConfigSession.id == session_id).values(state="open"))
                deployment = db.get(Deployment, message_id)
                if deployment is not None:
                    db.delete(deployment)
            raise Unavailable("the task queue is unavailable; nothing was started, "
                              "try again later") from None

    def last_status(self, ctx: Context, env_id: str,
                    session_id: str | None = None) -> dict[str, Any]:
        with self._sessions() as db:
            env = self.environment(db, ctx, env_id)
            if session_id:
                self.config_session(db, ctx, env, session_id, editable=False)
            deployment = db.scalars(select(Deployment).where(
                Deployment.environment_id == env.id).order_by(
                Deployment.started.desc())).first()
            latest: dict[str, Any] = {}
            if deployment is not None:
                for status in db.scalars(select(Status).where(
                        Status.deployment_id == deployment.id).order_by(Status.created)):
                    if status.entity_id:
                        latest[status.entity_id] = status_view(status)
            return latest

    # -- sessions ----------------------------------------------------------
    def configure(self, ctx: Context, env_id: str) -> dict[str, Any]:
        with self._sessions.begin() as db:
            env = self.environment(db, ctx, env_id, lock=True)
            refuse_if_busy(db, env)
            session = ConfigSession(id=new_id(), environment_id=env.id, user_id=ctx.user_id,
                                    version=env.version, state="open",
                                    description=copy.deepcopy(env.description))
            db.add(session)
            db.flush()
            return session_view(session)

    def get_session(self, ctx: Context, env_id: str, session_id: str) -> dict[str, Any]:
        with self._sessions() as db:
            env = self.environment(db, ctx, env_id)
            session = self.config_session(db, ctx, env, session_id, editable=False)
            if session.state == "open" and session.version != env.version:
                raise Forbidden(f"session {session_id} is invalid: environment {env_id} "
                                f"changed since it was opened")
            return session_view(session)

    def delete_session(self, ctx: Context, env_id: str, session_id: str) -> None:
        with self._sessions.begin() as db:
            env = self.environment(db, ctx, env_id)
            session = self.config_session(db, ctx, env, session_id, editable=False)
            if session.state == "deploying":    # its deployment is the job that runs
                raise busy_error(db, env)
            db.delete(session)

    def deploy(self, ctx: Context, env_id: str, session_id: str,
               change_detection: str | None = None) -> None:
        """Deploy a session: a job of action ``deploy`` (``change_detection``
        defaults to ``evaluate``; a bad value is a 400)."""
        given = {} if change_detection is None else {"change_detection": change_detection}
        try:
            parameters = check_parameters("deploy", given, {}, self.catalog)
        except ActionError as exc:
            raise BadRequest(str(exc)) from None
        with self.delegated(ctx, env_id) as delegation:
            body, job_id, previous = self._claim_deploy(ctx, env_id, session_id, parameters,
                                                        delegation)
            self.send_task(body, job_id, env_id, previous, session_id)

    def _claim_deploy(self, ctx: Context, env_id: str, session_id: str,
                      parameters: dict[str, Any],
                      delegation: Delegation) -> tuple[dict, str, str]:
        """Mark the environment and its session deploying and record the job: the
        task's body, the job's id and the environment's state before."""
        with self._sessions.begin() as db:
            # the environment, then the session (so no edit of it is half-seen): the
            # order every transaction that locks both takes
            env = self.environment(db, ctx, env_id, lock=True)
            session = self.config_session(db, ctx, env, session_id, editable=False,
                                          lock=True)
            refuse_if_busy(db, env)
            if session.state != "open":
                raise Forbidden(f"session {session_id} is already {session.state}")
            if session.version != env.version:
                raise Forbidden(f"session {session_id} is invalid: another session was "
                                f"deployed since it was opened")
            previous = env.state
            claimed = db.execute(update(Environment).where(
                Environment.id == env.id, Environment.version == session.version,
                Environment.state.not_in(BUSY)).values(
                state="deploying", updated=utcnow())).rowcount
            if claimed != 1:    # a job started since it was read
                raise busy_error(db, env)
            db.execute(update(ConfigSession).where(ConfigSession.id == session.id).values(
                state="deploying", updated=utcnow()))
            deployment = Deployment(id=new_id(), environment_id=env.id,
                                    tenant_id=env.tenant_id, session_id=session.id,
                                    kind="deploy", parameters=parameters,
                                    description=masked(session.description))
            db.add(deployment)
            keep_trust(env, delegation)
            body = contract.task_body(session.description, ctx.token, env.tenant_id,
                                      job=contract.job_section(deployment.id, "deploy",
                                                               parameters),
                                      trust_id=delegation.trust_id,
                                      packages=task_packages(db, env.id))
        return body, deployment.id, previous

    # -- services ------------------------------------------------------------
    def get_services(self, ctx: Context, env_id: str, path: str,
                     session_id: str | None) -> Any:
        with self._sessions() as db:
            env = self.environment(db, ctx, env_id)
            description = env.description
            if session_id:
                description = self.config_session(db, ctx, env, session_id,
                                                  editable=False).description
            return _masked_at(description.get("services") or [], tree.split(path),
                              self.catalog_of(db, env.id))

    def _edit(self, ctx: Context, env_id: str, session_id: str | None,
              change: Callable[[list, Catalog], Any]) -> Any:
        """Apply ``change`` to a copy of the session's services; store it if valid.

        All or nothing: any error leaves the session as it was.  Edits of one
        session take turns (its row is locked), so none is lost and two cannot
        give two services one name.
        """
        with self._sessions.begin() as db:
            _sqlite_write_lock(db)
            env = self.environment(db, ctx, env_id)
            session = self.config_session(db, ctx, env, session_id, editable=False,
                                          lock=True)
            if env.state in BUSY or session.state == "deploying":
                raise busy_error(db, env)
            _session_allowed(ctx, env, session_id, session, editable=True)
            description = copy.deepcopy(session.description)
            services = description.setdefault("services", [])
            if not isinstance(services, list):
                raise BadRequest("the environment's services are not a list")
            before = unit_counts(services)
            names = service_names(services)
            dangling = dangling_dependencies(services)
            catalog = self.catalog_of(db, env.id)
            result = change(services, catalog)
            refuse_taken_service_names(names, services)
            refuse_new_dangling_dependencies(dangling, services)
            self.limits.check_services(env.id, before, services)
            if tree.depth(services) > tree.MAX_DEPTH:  # e.g. sub-path PUTs, deeper each time
                raise BadRequest(f"the services would nest more than {tree.MAX_DEPTH} levels "
                                 f"deep")
            session.description = description
            session.updated = utcnow()
            return specs.masked_view(result, catalog)

    def post_service(self, ctx: Context, env_id: str, path: str, data: Any,
                     session_id: str | None) -> Any:
        segments = tree.split(path)

        def change(services: list, catalog: Catalog) -> Any:
            now = iso(utcnow())
            if not segments and isinstance(data, list):
                return add_services(services, data, now, catalog)
            if not segments:
                _spec(specs.validate_create, data, catalog)
                service = _spec(specs.prepare_new, data, now, services)
                services.append(service)
                return service
            target = tree.get(services, segments)
            if not isinstance(target, list):
                raise BadRequest(f"{path} is not a list: POST adds items to lists")
            items = data if isinstance(data, list) else [data]
            target.extend(copy.deepcopy(items))
            _revalidate(services, segments, now, catalog)
            return data
        return self._edit(ctx, env_id, session_id, change)

    def put_service(self, ctx: Context, env_id: str, path: str, data: Any,
                    session_id: str | None) -> Any:
        segments = tree.split(path)

        def change(services: list, catalog: Catalog) -> Any:
            now = iso(utcnow())
            if not segments:
                if not isinstance(data, list):
                    raise BadRequest("PUT on /services takes the whole list of services")
                new = specs.keep_secrets(copy.deepcopy(data), services, catalog)
                for item in new:
                    _spec(specs.validate_update, item, catalog)
                new = [_spec(specs.prepare_units, item) for item in new]
                services[:] = new
                return new
            try:
                old = tree.get(services, segments)
            except NotFound:
                old = None
            # with its key, so that PUT .../adminPassword "***" keeps the password
            key = segments[-1]
            value = specs.keep_secrets({key: copy.deepcopy(data)}, {key: old},
                                       catalog)[key]
            tree.put(services, segments, value)
            _revalidate(services, segments, now, catalog)
            return _masked_at(services, segments, catalog)
        return self._edit(ctx, env_id, session_id, change)

    def delete_service(self, ctx: Context, env_id: str, path: str,
                       session_id: str | None) -> None:
        segments = tree.split(path)

        def change(services: list, catalog: Catalog) -> None:
            if not segments:
                services.clear()
                return None
            removed = tree.get(services, segments) if len(segments) == 1 else None
            tree.delete(services, segments)
            if len(segments) > 1:
                _revalidate(services, segments, iso(utcnow()), catalog)
            if isinstance(removed, dict) and removed.get("id") is not None:
                forget_dependency(services, str(removed["id"]))
            return None
        self._edit(ctx, env_id, session_id, change)

    # -- deployments ----------------------------------------------------------
    def list_deployments(self, ctx: Context, env_id: str | None = None) -> list[dict[str, Any]]:
        with self._sessions() as db:
            query = select(Deployment).where(Deployment.tenant_id == ctx.tenant_id)
            if env_id is not None:
                self.environment(db, ctx, env_id)
                query = query.where(Deployment.environment_id == env_id)
            return [deployment_view(d) for d in db.scalars(
                query.order_by(Deployment.started.desc()))]

    def reports(self, ctx: Context, env_id: str, deployment_id: str,
                service_ids: list[str]) -> list[dict[str, Any]]:
        with self._sessions() as db:
            env = self.environment(db, ctx, env_id)
            deployment = db.get(Deployment, lookup_id(deployment_id, "deployment"))
            if deployment is None or deployment.environment_id != env.id:
                raise NotFound(f"deployment {deployment_id} not found in environment {env_id}")
            query = select(Status).where(Status.deployment_id == deployment.id)
            if service_ids:
                query = query.where(Status.entity_id.in_(
                    {i for i in _entities_of(deployment.description, service_ids)
                     if could_be_id(i)}))
            return [status_view(s) for s in db.scalars(query.order_by(Status.created))]

    # -- from the conductor ------------------------------------------------------
    def apply_result(self, body: Any, message_id: str | None) -> None:
        """Store a final model (task-results); a redelivered result changes nothing.

        Every job but a ``plan`` stores the model and bumps the version (open
        sessions then become invalid: they were opened on what the job changed);
        a plan only previews, so the environment is left as it was.
        """
        model = contract.parse_result(body)
        fence = contract.fence_of(body, "result")
        with self._sessions.begin() as db:
            if fenced_off(db, model["id"], fence, f"result {message_id}"):
                return
            deployment = db.get(Deployment, message_id) if message_id else None
            if deployment is None:
                deployment = running_job(db, model["id"])
            if deployment is None or deployment.finished is not None:
                LOG.info("result %s for environment %s: no running deployment, ignored",
                         message_id, model["id"])
                return
            env = db.get(Environment, deployment.environment_id)
            errors = db.scalar(select(func.count()).select_from(Status).where(
                Status.deployment_id == deployment.id, Status.level == "error"))
            now = utcnow()
            deployment.finished = now
            deployment.updated = now
            deployment.state = "completed_w_errors" if errors else "success"
            settle_tasks(db, deployment, now)
            if env is None:
                return
            if deployment.kind == "delete":
                if errors:
                    env.state, env.updated = "delete failure", now
                else:
                    db.delete(env)
                return
            if deployment.kind == "plan":
                env.state, env.updated = settled_state(db, env.id, deployment.id), now
                return
            env.description = model
            env.version += 1
            env.state = (settled_state(db, env.id, deployment.id)
                         if deployment.kind in NOT_DEPLOYING
                         else "deploy failure" if errors else "ready")
            env.updated = now
            if deployment.session_id:
                db.execute(update(ConfigSession).where(
                    ConfigSession.id == deployment.session_id).values(
                    state="deployed", updated=now))

    def add_report(self, body: Any, message_id: str | None) -> None:
        """Store a status row (task-reports); a redelivered report is stored once."""
        outcome, = self.add_reports([(body, message_id)])
        if outcome is not None:
            raise outcome

    def add_reports(self, items: Sequence[tuple[Any, str | None]]) -> list[Outcome]:
        """Store reports (``[(body, message id)]``, in arrival order) in one
        transaction: a consumer storing them one by one spends its time on
        transactions and lookups (lock token, job, secrets) that a batch shares.

        One outcome per report: a bad one gets its ContractError (the consumer
        drops it), the rest None or, when the database failed even one by one,
        the failure (see :func:`store_all`).
        """
        outcomes: list[Outcome] = [None] * len(items)
        parsed: list[tuple[contract.Report, int | None, str | None]] = []
        places: list[int] = []
        for index, (body, message_id) in enumerate(items):
            try:
                parsed.append((contract.parse_report(body), contract.fence_of(body, "report"),
                               message_id))
            except contract.ContractError as exc:
                outcomes[index] = exc
                continue
            places.append(index)
        stored = store_all(parsed, self._store_reports, self._store_report, "reports")
        for index, outcome in zip(places, stored):
            outcomes[index] = outcome
        return outcomes

    def _store_report(self, report: tuple[contract.Report, int | None, str | None]) -> None:
        try:
            self._store_reports([report])
        except IntegrityError:  # the same report stored by a concurrent consumer
            LOG.info("report %s already stored", report[2])

    def _store_reports(self,
                       reports: Sequence[tuple[contract.Report, int | None, str | None]]) -> None:
        with self._sessions.begin() as db:
            tokens = lock_tokens(db, {report.environment_id for report, fence, _ in reports
                                      if fence is not None})
            seen = stored_message_ids(db, [message_id for _, _, message_id in reports])
            secrets: dict[str, set[str]] = {}
            rows: list[Status] = []
            for report, fence, message_id in reports:
                if fenced(tokens.get(report.environment_id), report.environment_id, fence,
                          f"report {message_id}"):
                    continue
                if message_id and message_id in seen:
                    continue
                row = _status_row(db, report, message_id, secrets)
                if row is not None:
                    rows.append(row)
                    seen.add(message_id)
            # in arrival order, whatever the clock's resolution: reports are listed by time
            now = utcnow()
            for number, row in enumerate(rows):
                row.created = row.updated = now + datetime.timedelta(microseconds=number)
            db.add_all(rows)


def stored_message_ids(db: DbSession, message_ids: Iterable[str | None]) -> set[str | None]:
    """Which of these reports are stored already (redelivered), in one query."""
    wanted = {message_id for message_id in message_ids if message_id}
    if not wanted:
        return set()
    return set(db.scalars(select(Status.message_id).where(Status.message_id.in_(wanted))))


def _status_row(db: DbSession, report: contract.Report, message_id: str | None,
                secrets: dict[str, set[str]]) -> Status | None:
    """The status row of a report (None: dropped, and said why); ``secrets``
    caches each job's secrets for the batch."""
    deployment = _report_job(db, report.environment_id, message_id)
    if deployment is None:
        LOG.info("report %s for unknown environment %s dropped", message_id,
                 report.environment_id)
        return None
    if deployment.state == "abandoned":
        LOG.info("report %s of abandoned job %s ignored", message_id, deployment.id)
        return None
    if deployment.id not in secrets:
        secrets[deployment.id] = job_secrets(db, deployment)
    known = secrets[deployment.id]
    details = report.details
    if details is not None and not isinstance(details, str):
        details = str(masked(details, known))
    if report.level == "error" and deployment.state == "success":
        _late_error(db, deployment)
    return Status(id=new_id(), deployment_id=deployment.id, message_id=message_id,
                  entity=report.entity, entity_id=None if report.id is None else str(report.id),
                  text=mask_text(report.text, known),
                  details=mask_text(details, known) if details else details,
                  level=report.level)


def store_all(items: Sequence[Item], together: Callable[[Sequence[Item]], None],
              alone: Callable[[Item], None], what: str) -> list[Outcome]:
    """Store ``items`` in one transaction (``together``); when that fails (a
    concurrent insert, a value the database refuses), one by one (``alone``),
    so that one item never loses the others.

    One outcome per item: None (stored, or dropped as its own code decided),
    or the exception that stopped it one by one.  That stops the batch: the
    later items get the same exception, untried, so that what comes from one
    queue is stored in its order (the consumer requeues them behind the
    failed one).  A single item goes straight to ``alone``.
    """
    if len(items) > 1:
        try:
            together(items)
            return [None] * len(items)
        except Exception as exc:  # noqa: BLE001 -- whatever it was, one by one tells
            LOG.warning("storing %d %s in one transaction failed (%s: %.200s); storing them "
                        "one by one", len(items), what, type(exc).__name__,
                        str(exc).split("\n", 1)[0])
    outcomes: list[Outcome] = []
    for index, item in enumerate(items):
        try:
            alone(item)
        except Exception as exc:  # noqa: BLE001 -- the consumer logs and requeues it
            return outcomes + [exc] * (len(items) - index)
        outcomes.append(None)
    return outcomes


ID_LENGTH = 64  # of the String(64) id columns


def could_be_id(value: str) -> bool:
    """Whether a stored id could equal ``value`` (from a URL, a header, a query)."""
    return len(value) <= ID_LENGTH and "\x00" not in value


def lookup_id(value: str, what: str) -> str:
    """``value``, to look up by; NotFound for one that no stored id can equal.

    A NUL must not reach the database: PostgreSQL refuses it in a text query
    parameter (a DataError, a 500).  Longer than the column, no id equals it either.
    """
    if not could_be_id(value):
        raise NotFound(f"{what} {value!r:.80} not found")
    return value


def _session_allowed(ctx: Context, env: Any, session_id: str, session: Any,
                     editable: bool) -> Any:
    """``session`` (a ConfigSession or a row of its columns), checked."""
    if session is None or session.environment_id != env.id:
        raise NotFound(f"session {session_id} not found in environment {env.id}")
    if session.user_id != ctx.user_id and not ctx.is_admin:
        raise Forbidden(f"not authorized to access session {session_id}")
    if editable:
        if session.state != "open":
            raise Forbidden(f"session {session_id} is {session.state}: it cannot be changed")
        if session.version != env.version:
            raise Forbidden(f"session {session_id} is invalid: environment {env.id} "
                            f"changed since it was opened")
    return session


def allowed(ctx: Context, env_id: str, env: Any) -> Any:
    """``env`` (an Environment or a row of its columns) if the caller may use it."""
    if env is None:
        raise NotFound(f"environment {env_id} not found")
    if env.tenant_id != ctx.tenant_id and not ctx.is_admin:
        raise Forbidden(f"not authorized to access environment {env_id}")
    return env


# -- conflicts: a busy environment, a name taken ---------------------------------------

def keep_trust(env: Environment, delegation: Delegation) -> None:
    """Store on the environment a trust made for the job being started."""
    if delegation.created:
        env.trust_id, env.trustor_id = delegation.trust_id, delegation.trustor_id


def utc(value: datetime.datetime | None) -> str | None:
    """A stored (naive UTC) time as ISO 8601 with its zone: ``2026-11-25T17:29:19Z``."""
    shown = iso(value)
    return f"{shown}Z" if shown is not None else None


def busy_message(env_name: str, job: Deployment) -> str:
    return (f"environment {env_name} is busy: job {job.id} ({job.kind}) running since "
            f"{utc(job.started)}; wait for it to end or abandon it")


def busy_error(db: DbSession, env: Environment) -> Conflict:
    """The 409 of a change refused because ``env`` runs a job: the message and the
    error's ``job`` and ``environment`` fields name them (the command line builds
    its own advice from those)."""
    where = {"id": env.id, "name": env.name}
    job = running_job(db, env.id)
    if job is None:     # the state says busy, yet no job runs: say what is known
        return Conflict(f"environment {env.name} is {env.state}; wait for it to end",
                        environment=where)
    return Conflict(busy_message(env.name, job), environment=where,
                    job={"id": job.id, "kind": job.kind, "started": utc(job.started)})


def refuse_if_busy(db: DbSession, env: Environment) -> None:
    """A 409 naming the running job when ``env`` is busy (deploying, deleting)."""
    if env.state in BUSY:
        raise busy_error(db, env)


# PostgreSQL advisory lock space of environment names ("fnam"); the key in it is
# the tenant's hash (two tenants sharing a hash only take turns)
_NAMES_LOCK = 0x666E616D


def lock_names(db: DbSession, tenant_id: str) -> None:
    """Make the tenant's environment names stay as read until the transaction ends:
    two creates (or renames) of one name take turns, so the second sees the first."""
    dialect = db.get_bind().dialect.name
    if dialect == "postgresql":
        db.execute(text("SELECT pg_advisory_xact_lock(CAST(:space AS integer), "
                        "hashtext(:tenant))"), {"space": _NAMES_LOCK, "tenant": tenant_id})
    else:
        _sqlite_write_lock(db)


def _sqlite_write_lock(db: DbSession) -> None:
    """On SQLite, take the database's write lock now (a write that changes nothing).

    The driver begins a transaction only at the first write, so the reads before
    it see other writers' commits as they come: a check then a write could both
    pass in two connections.  After this, the other writers wait until this
    transaction ends.  Other databases: nothing (they lock rows)."""
    if db.get_bind().dialect.name == "sqlite":
        db.execute(text("UPDATE environments SET name = name WHERE 1 = 0"))


def refuse_taken_name(db: DbSession, tenant_id: str, name: str, but: str | None = None) -> None:
    """A 409 naming the tenant's environment (other than ``but``) named ``name``."""
    query = select(Environment.id).where(Environment.tenant_id == tenant_id,
                                         Environment.name == name)
    if but is not None:
        query = query.where(Environment.id != but)
    existing = db.scalars(query.order_by(Environment.created).limit(1)).first()
    if existing is not None:
        raise Conflict(f"an environment named {name!r} exists already (id {existing})",
                       existing={"id": existing, "name": name})


def dangling_dependencies(services: list) -> set[str]:
    """What is wrong with the services' ``dependsOn`` lists (not a list, or naming
    no service of the environment), as the topology words it."""
    return {p for p in topology.build({"services": services}).problems if "dependsOn" in p}


def forget_dependency(services: list, service_id: str) -> None:
    """A service removed: the others' ``dependsOn`` no longer name it (the
    dashboard's confirmation names those that did)."""
    for service in services:
        depends = service.get("dependsOn") if isinstance(service, dict) else None
        if isinstance(depends, list) and service_id in map(str, depends):
            service["dependsOn"] = [d for d in depends if str(d) != service_id]


def refuse_new_dangling_dependencies(before: set[str], services: list) -> None:
    """A 400 when an edit made a ``dependsOn`` wrong: naming a service that is not
    there.  Wrong ones from before (a 0.2 description, say) do not block other
    edits."""
    new = sorted(dangling_dependencies(services) - before)
    if new:
        raise BadRequest("; ".join(new) + " (dependsOn lists the ids of services of the "
                         "same environment)")


def service_names(services: list) -> dict[str, Any]:
    """Service id -> name, of a session's services (to tell, after a change,
    which services it added or renamed)."""
    return {service["id"]: service.get("name") for service in services
            if isinstance(service, dict) and isinstance(service.get("id"), str)}


def refuse_taken_service_names(before: dict[str, Any], services: list) -> None:
    """No service a change added or renamed may share its name with another.

    With a service that was there before the change (``before``:
    :func:`service_names`): a 409 naming that service and its id.  Between
    services of the change itself (a list put at once): a 400 naming both
    places.  Services that had one name before the change are left alone.
    """
    places: dict[str, list[int]] = {}
    for index, service in enumerate(services):
        if isinstance(service, dict) and isinstance(service.get("name"), str):
            places.setdefault(service["name"], []).append(index)
    for name, indexes in places.items():
        if len(indexes) < 2:
            continue
        changed = [i for i in indexes if _renamed(services[i], before)]
        if not changed:
            continue
        kept = [i for i in indexes if i not in changed]
        if kept:
            existing = services[kept[0]].get("id")
            raise Conflict(f"a service named {name!r} (id {existing}) exists already in "
                           f"this environment", existing={"id": existing, "name": name})
        raise BadRequest(f"services[{changed[1]}].name: duplicate name {name!r} (also "
                         f"services[{changed[0]}])")


def _renamed(service: dict, before: dict[str, Any]) -> bool:
    """Whether a change added ``service`` or changed its name."""
    service_id = service.get("id")
    return (not isinstance(service_id, str) or service_id not in before
            or before[service_id] != service.get("name"))


def add_services(services: list, items: list, now: str | None,
                 catalog: Catalog | None = None) -> list:
    """Append a list of create specs to a session's ``services``, all or nothing:
    the first entry that is wrong is a 400 naming it and its field
    (``services[1].units[0].isMaster: must be a boolean``), as is a name two
    entries share.  The prepared services, in order."""
    if not items:
        raise BadRequest("services: the list is empty: nothing to add")
    names: dict[str, int] = {}
    added = []
    for index, item in enumerate(items):
        try:
            specs.validate_create(item, catalog)
            service = specs.prepare_new(item, now, services)
        except specs.SpecError as exc:
            place = f"services[{index}]"
            field = place if exc.field == "service" else f"{place}.{exc.field}"
            raise BadRequest(f"{field}: {exc.message}") from None
        name = service.get("name")
        if isinstance(name, str):
            if name in names:
                raise BadRequest(f"services[{index}].name: duplicate name {name!r} (also "
                                 f"services[{names[name]}])")
            names[name] = index
        services.append(service)
        added.append(service)
    return added


_SECRETS_KEPT = 30.0    # seconds a running job's secrets are kept between two batches
_secrets_lock = threading.Lock()
_secrets_kept: collections.OrderedDict = collections.OrderedDict()   # job id -> (time, set)


def job_secrets(db: DbSession, deployment: Deployment) -> set[str]:
    """The secrets a job's reports and logs may quote (masked before storing).

    Those of a running job are kept for a while: its reports and task
    changes come in batch after batch, and finding them means reading and
    walking the environment's and the session's descriptions (megabytes for
    a thousand units).  While the job runs neither changes what it was sent."""
    now = time.monotonic()
    if deployment.finished is None:
        with _secrets_lock:
            kept = _secrets_kept.get(deployment.id)
            if kept is not None and now - kept[0] < _SECRETS_KEPT:
                return set(kept[1])
    secrets: set[str] = set()
    for owner in (db.get(Environment, deployment.environment_id),
                  db.get(ConfigSession, deployment.session_id or "")):
        if owner is not None:
            find_secrets(owner.description, secrets)
    if deployment.finished is None:
        with _secrets_lock:
            _secrets_kept[deployment.id] = (now, frozenset(secrets))
            _secrets_kept.move_to_end(deployment.id)
            while len(_secrets_kept) > 64:
                _secrets_kept.popitem(last=False)
    return secrets


# a job's description (the model it was given) is not read to store what it sends
LIGHT_JOB = [defer(Deployment.description), defer(Deployment.parameters)]


def _report_job(db: DbSession, env_id: str, message_id: str | None) -> Deployment | None:
    """The job a report belongs to.

    The conductor names reports ``<job id>-report-<n>``: that job, when it is
    one of the environment's (so a late report of an abandoned job is not
    pinned on the job that runs now); else the running or the latest job.
    """
    if message_id and "-report-" in message_id:
        job_id = message_id.rsplit("-report-", 1)[0]
        named = db.get(Deployment, job_id, options=LIGHT_JOB) if could_be_id(job_id) else None
        if named is not None and named.environment_id == env_id:
            return named
    return running_job(db, env_id) or db.scalars(select(Deployment).where(
        Deployment.environment_id == env_id).order_by(Deployment.started.desc())).first()


# jobs that look at or operate what is deployed without deploying: how they end
# is their own state; the environment keeps the deploy status it had
NOT_DEPLOYING = ("plan", "check", "execute_operation")


def settled_state(db: DbSession, env_id: str, job_id: str) -> str:
    """The state of an environment after a job that deployed nothing (a plan, a
    check, an operation, a refused job, an abandoned plan): what the last job
    that did deploy left."""
    last = db.scalars(select(Deployment).where(
        Deployment.environment_id == env_id, Deployment.id != job_id,
        Deployment.finished.is_not(None), Deployment.kind.not_in(NOT_DEPLOYING),
        Deployment.state != "refused").order_by(Deployment.started.desc())).first()
    if last is None or last.state not in ("completed_w_errors", "abandoned"):
        return "ready"
    return "delete failure" if last.kind == "delete" else "deploy failure"


def _late_error(db: DbSession, deployment: Deployment) -> None:
    """An error report that arrived after the result (two queues, no common order)."""
    deployment.state = "completed_w_errors"
    env = db.get(Environment, deployment.environment_id)
    if env is not None and env.state == "ready" and deployment.kind != "delete" \
            and deployment.kind not in NOT_DEPLOYING:
        env.state = "deploy failure"


UNSETTLED = ("pending", "running")


def fenced_off(db: DbSession, environment_id: str, fence: int | None, what: str) -> bool:
    """Whether a write carrying the lock token ``fence`` comes from a job run that
    no longer holds the environment's lock (a newer grant, or an abandon, raised
    the token since): such writes are dropped, and said so (``what`` was
    dropped).  Writes without a token (no lock table at the conductor, 0.2
    senders) are taken as they come."""
    if fence is None:
        return False
    current = db.scalar(select(JobLock.token).where(JobLock.environment_id == environment_id))
    return fenced(current, environment_id, fence, what)


def lock_tokens(db: DbSession, environment_ids: Iterable[str]) -> dict[str, int]:
    """The current lock token of each environment that has one, in one query
    (for batches: :func:`fenced` then decides per write)."""
    wanted = [env_id for env_id in set(environment_ids) if could_be_id(env_id)]
    if not wanted:
        return {}
    rows = db.execute(select(JobLock.environment_id, JobLock.token).where(
        JobLock.environment_id.in_(wanted)))
    return {env_id: token for env_id, token in rows}


def fenced(current: int | None, environment_id: str, fence: int | None, what: str) -> bool:
    """:func:`fenced_off` with the environment's ``current`` token already known."""
    if fence is None or current is None or fence >= current:
        return False
    LOG.warning("%s dropped: sent by a run that lost the lock of environment %s (token %s, "
                "now %s)", what, environment_id, fence, current)
    return True


def settle_tasks(db: DbSession, job: Deployment, now: datetime.datetime) -> int:
    """Close the task rows a job left open when it ends (a conductor that died or
    lost its lock never finished them): ``cancelled``, with why; how many."""
    return db.execute(update(JobTask).where(
        JobTask.deployment_id == job.id, JobTask.status.in_(UNSETTLED)).values(
        status="cancelled", finished=now, updated=now,
        summary=f"superseded: job {job.id} ended ({job.state}) while this task was still "
                f"open (the run that started it stopped)")).rowcount


def running_job(db: DbSession, env_id: str) -> Deployment | None:
    return db.scalars(select(Deployment).where(
        Deployment.environment_id == env_id, Deployment.finished.is_(None)).order_by(
        Deployment.started.desc())).first()


def _entities_of(description: dict, service_ids: list[str]) -> set[str]:
    """The given services and their units (reports name either)."""
    wanted = set(service_ids)
    for service in description.get("services") or []:
        if isinstance(service, dict) and service.get("id") in service_ids:
            for unit in service.get("units") or []:
                if isinstance(unit, dict) and unit.get("id"):
                    wanted.add(unit["id"])
    return wanted


def _masked_at(services: list, segments: list[str], catalog: Catalog | None = None) -> Any:
    """The value at ``segments``, masked as a part of the whole list: masking goes
    by key, so ``/services/<id>/adminPassword`` alone must not come back in clear."""
    return tree.get(specs.masked_view(services, catalog), segments)


def _spec(check: Callable, *args: Any) -> Any:
    try:
        return check(*args)
    except specs.SpecError as exc:
        raise BadRequest(str(exc)) from None


def _revalidate(services: list, segments: list[str], now: str | None,
                catalog: Catalog | None = None) -> None:
    """After an edit below a service, the service must still be valid."""
    service = tree.top_service(services, segments)
    if isinstance(service, dict):
        _spec(specs.validate_update, service, catalog)
        prepared = _spec(specs.prepare_units, service)
        prepared["updated"] = now
        index = next(i for i, item in enumerate(services) if item is service)
        services[index] = prepared
