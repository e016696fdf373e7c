"""The API's database, and what every store on it shares.

A :class:`Store` holds the database, the type catalog, the unit limits, the
trusts (keystone mode) and the task publisher, and gives each store the
lookups they all make: an environment or a configuration session, checked
against the caller's :class:`~fornace.api.context.Context` (another
tenant's is a 403 but for the cloud admin, a missing one a 404), an
environment's catalog, and starting a job (its trust, its task).

It holds one store per concern, each in a module of its own:
:attr:`~Store.environments` (:mod:`.environments`),
:attr:`~Store.config_sessions` (:mod:`.sessions`: opening, deploying),
:attr:`~Store.services` (:mod:`.services`), :attr:`~Store.reports`
(:mod:`.reports`: the 0.2 deployments and their reports), and what the
conductor sends back: :attr:`~Store.results` (:mod:`.results`) and
:attr:`~Store.job_events` (:mod:`.jobevents`) beside the reports, all
three stored by one loop (:mod:`fornace.api.messagestore`).  The jobs users
start (:mod:`.jobs`), workflow packages and pins are built on a Store the
same way, by the app.

Changes that must not be half-stored happen in one transaction; starting a
job is claimed with conditional UPDATEs so two concurrent jobs cannot both
win.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import logging
import threading
from typing import Any, Callable, Iterator

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session as DbSession, defer, sessionmaker

from fornace.api.context import Context, allowed, session_allowed
from fornace.api.errors import BadRequest, Conflict, Unavailable
from fornace.api.ids import could_be_id, lookup_id
from fornace.api.jobstate import first_deployment_model
from fornace.api.limits import UnitLimits
from fornace.api.packages.usage import Pins, package_types, pinned
from fornace.api.stores.deadletters import DeadLetters
from fornace.api.stores.environments import Environments
from fornace.api.stores.jobevents import JobEvents
from fornace.api.stores.reports import Reports
from fornace.api.stores.results import Results
from fornace.api.stores.services import Services
from fornace.api.stores.sessions import ConfigSessions
from fornace.api.trusts import Delegation, Trusts
from fornace.common.catalog import (Catalog, CatalogError, catalog_with, declared_secrets,
                                     load_catalog)
from fornace.common import contract, requestcontext
from fornace.common.db.models import ConfigSession, Job, Environment
from fornace.common.notifications import OFF, Notifications, context
from fornace.common.resources import BUILTIN_DATA

LOG = logging.getLogger(__name__)

Publisher = Callable[[dict, str], None]  # (task body, message id)


class Store:
    """The database and the lookups every store makes; one store per concern."""

    def __init__(self, sessions: sessionmaker, publish: Publisher,
                 catalog: Catalog | None = None, limits: UnitLimits | None = None,
                 trusts: Trusts | None = None,
                 notifications: Notifications = OFF) -> None:
        self._sessions = sessions
        self._publish = publish
        # what happens to environments and jobs, told on the message bus once
        # stored (fornace.common.notifications; OFF: not configured)
        self.notifications = notifications
        # keystone mode: the trusts jobs act with (None: tasks carry no trust)
        self.trusts = trusts
        # caps on the units of a service and of an environment (sessions, scale jobs)
        self.limits = limits if limits is not None else UnitLimits()
        # the type catalog the conductor uses: job parameters are checked against it
        self.catalog = catalog if catalog is not None else load_catalog(
            BUILTIN_DATA / "types.json")
        # the catalogs of pinned versions, by their digests (see catalog_for)
        self._catalogs: collections.OrderedDict[Pins, Catalog] = collections.OrderedDict()
        self._catalogs_lock = threading.Lock()
        # The hot reads (list and show an environment) use a plain connection
        # without a transaction: no ORM session, no BEGIN/ROLLBACK round trips.
        # Nothing changes for them: they write nothing, and under READ COMMITTED
        # (PostgreSQL's default) each statement sees the latest committed data
        # whether or not it is in a transaction; SQLite does not begin one
        # before a SELECT anyway.
        engine = sessions.kw.get("bind")
        self._reader = (engine.execution_options(isolation_level="AUTOCOMMIT")
                        if engine is not None else None)
        self.environments = Environments(self)
        self.config_sessions = ConfigSessions(self)
        self.services = Services(self)
        self.reports = Reports(self)
        self.results = Results(self)
        self.job_events = JobEvents(self)
        self.dead_letters = DeadLetters(sessions, self.secret_keys)

    @property
    def sessions(self) -> sessionmaker:
        """The factory of database sessions (ORM), for the stores' transactions."""
        return self._sessions

    def read(self) -> Any:
        """A connection for reads (or an ORM session if the factory has no engine)."""
        return self._reader.connect() if self._reader is not None else self._sessions()

    # -- catalogs ------------------------------------------------------------
    #: catalogs of distinct sets of pinned versions kept (least recently used dropped)
    CATALOGS_KEPT = 256

    def catalog_of(self, db: Any, env_id: str) -> Catalog:
        """The catalog of an environment: the API's, with the types of the workflow
        packages it is pinned to (:meth:`catalog_for` its pins)."""
        return self.catalog_for(db, pinned(db, env_id))

    def catalog_for(self, db: Any, digests: Pins) -> Catalog:
        """The API's catalog with the types of the workflow package versions of
        ``digests`` (an environment's pins, :func:`~fornace.api.packages.usage.pinned`),
        layered in that order.

        Remembered by the digests (a bounded LRU): a digest names immutable
        content, so the catalog of a set of digests never changes, whichever
        environment or tenant is pinned to them -- nothing of one tenant's can
        reach another's through it, and a new pinned version is a new key.  Only
        a set seen for the first time reads the versions' types (one query);
        the request that read the pins asks nothing more."""
        if not digests:
            return self.catalog
        with self._catalogs_lock:
            catalog = self._catalogs.get(digests)
            if catalog is not None:
                self._catalogs.move_to_end(digests)
                return catalog
        catalog = self.catalog
        for package_id, types in package_types(db, digests):
            try:
                catalog = catalog_with(catalog, types)
            except CatalogError as exc:
                # stored before a rule it breaks (a pattern RE2 refuses, say)
                raise Conflict(f"the environment uses workflow package {package_id}, "
                               f"whose types.json this Fornace refuses ({exc}): move it "
                               f"to another version of the package") from None
        with self._catalogs_lock:
            self._catalogs[digests] = catalog
            while len(self._catalogs) > self.CATALOGS_KEPT:
                self._catalogs.popitem(last=False)
        return catalog

    def secret_keys(self, db: Any, env_id: str) -> frozenset[str]:
        """The field names secret in environment ``env_id`` besides those named
        like passwords (:func:`fornace.common.secrets.is_secret_key`): those the
        types of its catalog declare ``writeOnly`` -- the API's and those of the
        workflow packages it is pinned to.  The one answer every view, stored
        description, report, task event and trace of the environment is masked by."""
        return declared_secrets(self.catalog_of(db, env_id))

    def secret_keys_for(self, db: Any, digests: Pins) -> frozenset[str]:
        """:meth:`secret_keys` of an environment whose pins were read already."""
        return declared_secrets(self.catalog_for(db, digests))

    def environment_catalog(self, env_id: str) -> Catalog:
        """:meth:`catalog_of` an environment, on a connection of its own (the
        caller checked the access already)."""
        with self.read() as db:
            return self.catalog_of(db, lookup_id(env_id, "environment"))

    # -- checked lookups ---------------------------------------------------------
    def environment(self, db: DbSession, ctx: Context, env_id: str,
                    lock: bool = False, description: bool = True) -> Environment:
        """The environment ``env_id``, if the caller may use it (404, 403);
        without its description (a large JSON document) unless ``description``."""
        return allowed(ctx, env_id, db.scalars(_environment_query(lock, description), {
            "env_id": lookup_id(env_id, "environment")}).first())

    def tenant_of(self, env_id: str) -> str | None:
        """The project ``env_id`` belongs to (None: no such environment): the
        target a cloud admin's call on another project's environment is checked
        against (:mod:`fornace.api.policy`)."""
        if not could_be_id(env_id):
            return None
        with self.read() as db:
            return db.execute(select(Environment.tenant_id).where(
                Environment.id == env_id)).scalar()

    def config_session(self, db: DbSession, ctx: Context, env: Environment,
                       session_id: str | None, editable: bool,
                       lock: bool = False) -> ConfigSession:
        """The configuration session named by the header, checked; with ``lock``
        (PostgreSQL) the other transactions that lock it wait until this one ends."""
        if not session_id:
            raise BadRequest("the X-Configuration-Session header is required")
        return session_allowed(ctx, env, session_id,
                               db.get(ConfigSession, lookup_id(session_id, "session"),
                                      with_for_update=lock or None),
                               editable)

    def description(self, db: DbSession, ctx: Context, env: Environment,
                    session_id: str | None) -> dict[str, Any]:
        """The environment's description, or with ``session_id`` that session's
        (checked, as :meth:`config_session` does, but not to be changed)."""
        if not session_id:
            return env.description
        return self.config_session(db, ctx, env, session_id, editable=False).description

    def shown_description(self, db: DbSession, ctx: Context, env: Environment,
                          session_id: str | None) -> dict[str, Any]:
        """What reads of the environment's services show: as :meth:`description`,
        but while its first deployment runs the model that job deploys
        (:func:`fornace.api.jobstate.first_deployment_model`), not the empty one."""
        if not session_id:
            deploying = first_deployment_model(db, env.id, env.version, env.state)
            if deploying is not None:
                return deploying
        return self.description(db, ctx, env, session_id)

    # -- starting a job ------------------------------------------------------------
    @contextlib.contextmanager
    def delegated(self, ctx: Context, env_id: str, deleting: bool = False,
                  create: bool = True) -> Iterator[Delegation]:
        """The trust the job ``ctx`` starts in the block acts with (keystone mode:
        :mod:`fornace.api.trusts`); one made for it is undone when the block fails
        (and the environment's previous one restored), the one it replaced is
        deleted when it succeeds.  The block stores it with :meth:`keep_trust`.
        Without ``create`` (or for the deletion of a never deployed environment)
        only the environment's current trust is passed on; without Keystone
        (noauth) nothing is read here: the block reads it with the environment
        (:meth:`Delegation.trust_of`)."""
        if self.trusts is None:   # nothing to read before the job's own transaction
            yield Delegation(None, current=True)
            return
        with self._sessions() as db:
            env = self.environment(db, ctx, env_id, description=False)
            trust_id, trustor_id = env.trust_id, env.trustor_id
            forgotten = deleting and env.version == 0   # nothing on the cloud to act on
        if forgotten or not create:
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

    def notify(self, ctx: Context | None, event_type: str, payload: dict[str, Any] | None,
               error: bool = False) -> None:
        """Send a notification (``payload`` None: nothing to send), once what it
        tells is committed; ``ctx``: the caller whose request caused it."""
        if payload is None:
            return
        request = requestcontext.current()   # the request being served, if any
        request_id = request.request_id if request is not None else None
        self.notifications.emit(event_type, payload, error, context(
            ctx.user_id, ctx.tenant_id, request_id) if ctx is not None
            else context(None, payload.get("tenant_id"), request_id))

    @staticmethod
    def keep_trust(env: Environment, delegation: Delegation) -> None:
        """Store on the environment a trust made for the job being started."""
        if delegation.created:
            env.trust_id, env.trustor_id = delegation.trust_id, delegation.trustor_id

    def publish(self, body: dict, message_id: str) -> None:
        """Publish a task as it is (no claim to undo: see :meth:`send_task`)."""
        self._publish(with_request(body), message_id)

    def send_task(self, body: dict, message_id: str, env_id: str, previous: str,
                  session_id: str | None = None) -> None:
        """Publish a task; if the broker refuses, undo the claim (nothing half-done)."""
        try:
            self._publish(with_request(body), message_id)
        except Exception as exc:
            LOG.error("environment %s: cannot publish task %s: %s", env_id, message_id, exc)
            with self._sessions.begin() as db:
                db.execute(update(Environment).where(Environment.id == env_id).values(
                    state=previous))
                if session_id:
                    db.execute(update(ConfigSession).where(
                        ConfigSession.id == session_id).values(state="open"))
                deployment = db.get(Job, message_id)
                if deployment is not None:
                    db.delete(deployment)
            raise Unavailable("the task queue is unavailable; nothing was started, "
                              "try again later") from None


def with_request(body: dict) -> dict:
    """A task body naming the request being served (contract 1.13), for the
    conductor's log lines of its job; as it is outside a request."""
    ctx = requestcontext.current()
    if ctx is None:
        return body
    return contract.with_request(body, ctx.request_id, ctx.global_request_id)


@functools.lru_cache(maxsize=4)
def _environment_query(lock: bool, description: bool) -> Any:
    """:meth:`Store.environment`'s read, built once per kind
    (:mod:`fornace.common.db.prepared`)."""
    query = select(Environment).where(Environment.id == bindparam("env_id"))
    if not description:   # read on first use, should a caller need it after all
        query = query.options(defer(Environment.description))
    if lock:
        query = query.with_for_update()
    return query
