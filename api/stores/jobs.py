"""Jobs: lifecycle actions on environments, their tasks, topology and status.

A job is a row of ``deployments`` (its ``kind`` is the action).  Besides the
0.2 session deploy (:mod:`.sessions`) and environment delete
(:mod:`.environments`), users run the other actions of
:data:`fornace.common.contract.ACTIONS` on a deployed environment; the
conductor sends what each job does, task by task, as job events
(:mod:`.jobevents`).

One job at a time per environment: a job is refused (409, naming the job
that runs) rather than queued behind another, as Unfurl refuses a job when
the ensemble is locked; a stuck job can be abandoned.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session as DbSession

from fornace.api.context import Context
from fornace.api.errors import BadRequest, Conflict, NotFound
from fornace.api.ids import lookup_id
from fornace.api.jobsecrets import job_secrets
from fornace.api.jobstate import (BUSY, NOT_DEPLOYING, busy_error, reopen_session, running_job,
                                  settle_tasks, settled_state)
from fornace.api.jobviews import (JOB_VIEW, job_view, kept_parameters, services_status,
                                  task_view, tsv)
from fornace.api.outputs import environment_outputs
from fornace.api.packages.usage import task_packages
from fornace.api.stores.store import Store
from fornace.api.traces import BadTrace, trace_view
from fornace.api.trusts import Delegation
from fornace.common import contract, notifications, topology
from fornace.common.actionparams import ActionError, check_parameters, select_units
from fornace.common.catalog import Catalog, declared_secrets
from fornace.common.db import locks
from fornace.common.db.models import (Job, Environment, JobTask, JobTrace, Status,
                                      new_id, utcnow)
from fornace.common.packages.layers import job_packages
from fornace.common.secrets import masked

# the actions users start through POST .../actions/{name}; deploy and delete
# have their own 0.2 routes (session deploy, environment delete)
USER_ACTIONS = tuple(a for a in contract.ACTIONS if a not in ("deploy", "delete"))
UNDEPLOYED_ACTIONS = ("plan",)  # may run before the first deployment


class Jobs:
    """The jobs users start, read and abandon, on the tables of ``store`` (the
    events conductors send of them: ``store.job_events``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._sessions = store.sessions

    # -- starting a job --------------------------------------------------------
    def run_action(self, ctx: Context, env_id: str, action: str,
                   parameters: Any, session_id: str | None = None) -> dict[str, Any]:
        """Start a job of ``action`` on an environment; its view (the task is queued).

        A ``plan`` with a configuration session plans the session's description:
        what deploying that session would run.
        """
        if action not in USER_ACTIONS:
            raise NotFound(f"unknown action {action[:80]!r}: the actions are "
                           f"{', '.join(USER_ACTIONS)}")
        if session_id and action != "plan":
            raise BadRequest(f"only plan takes a configuration session; {action} runs on "
                             f"the deployed environment")
        # a plan acts on no cloud: it needs no trust of its own
        with self.store.delegated(ctx, env_id, create=action != "plan") as delegation:
            body, view, previous, started = self._start(ctx, env_id, action, parameters,
                                                        session_id, delegation)
            self.store.send_task(body, view["id"], env_id, previous)
        self.store.notify(ctx, notifications.job_event(action, "start"), started)
        return view

    def _start(self, ctx: Context, env_id: str, action: str, parameters: Any,
               session_id: str | None,
               delegation: Delegation) -> tuple[dict, dict[str, Any], str, dict | None]:
        """Check the job and claim the environment for it: the task's body, the
        job's view, the environment's state before and the payload of
        ``environment.action.start`` (None: notifications are off)."""
        with self._sessions.begin() as db:
            env = self.store.environment(db, ctx, env_id)
            description = self.store.description(db, ctx, env, session_id)
            if env.state in BUSY:  # first: a first deployment running is no "never deployed"
                raise busy_error(db, env)
            catalog = self.store.catalog_of(db, env.id)
            parameters = self._checked(action, parameters, description, catalog)
            keys = declared_secrets(catalog)    # = self.store.secret_keys(db, env.id)
            if env.version == 0 and action not in UNDEPLOYED_ACTIONS:
                raise Conflict(f"environment {env_id} has never been deployed: deploy it "
                               f"before running {action}")
            previous = env.state
            self._claim(db, env)
            packages = task_packages(db, env.id)
            job = Job(id=new_id(), environment_id=env.id, tenant_id=env.tenant_id,
                             kind=action,
                             parameters=kept_parameters(parameters, description, keys),
                             description=masked(description, keys=keys),
                             packages=job_packages(packages))
            db.add(job)
            self.store.keep_trust(env, delegation)
            body = contract.task_body(description, ctx.token, env.tenant_id,
                                      job=contract.job_section(job.id, action, parameters),
                                      trust_id=delegation.trust_of(env),
                                      packages=packages,
                                      region=env.region)
            db.flush()
            view = job_view(job, secret_keys=keys)
        started = notifications.job_payload(env, job, ctx.user_id) \
            if self.store.notifications.enabled else None
        return body, view, previous, started

    def _checked(self, action: str, parameters: Any, model: dict[str, Any],
                 catalog: Catalog) -> dict[str, Any]:
        """The parameters with their defaults; a 400 naming the wrong one."""
        try:
            checked = check_parameters(action, parameters, model, catalog)
            if action == "execute_operation":
                select_units(checked, model, catalog)  # a unit without the operation: now
        except ActionError as exc:
            raise BadRequest(str(exc)) from None
        if action == "scale":
            self.store.limits.check_scale(model, checked["node_id"], checked["delta"])
        return checked

    def _claim(self, db: DbSession, env: Environment) -> None:
        """Mark the environment busy (uninstall too: it keeps the environment);
        a 409 naming the running job when another one has it."""
        claimed = db.execute(update(Environment).where(
            Environment.id == env.id, Environment.state.not_in(BUSY)).values(
            state="deploying", updated=utcnow())).rowcount
        if claimed != 1:    # a job started since the environment was read
            raise busy_error(db, env)

    # -- reading jobs -------------------------------------------------------------
    def list_jobs(self, ctx: Context, env_id: str) -> list[dict[str, Any]]:
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id, description=False)
            counts = _task_counts(db, JobTask.environment_id == env.id)
            jobs = db.scalars(select(Job).options(*JOB_VIEW).where(
                Job.environment_id == env.id).order_by(
                Job.started.desc(), Job.created.desc()))
            keys = self.store.secret_keys(db, env.id)
            return [job_view(job, counts.get(job.id), keys) for job in jobs]

    def get_job(self, ctx: Context, env_id: str, job_id: str) -> dict[str, Any]:
        with self._sessions() as db:
            job = self._job(db, ctx, env_id, job_id, JOB_VIEW)
            tasks = list(db.scalars(select(JobTask).where(
                JobTask.deployment_id == job.id).order_by(JobTask.change_id)))
            counts = _task_counts(db, JobTask.deployment_id == job.id)
            return {**job_view(job, counts.get(job.id),
                               self.store.secret_keys(db, job.environment_id)),
                    "tasks": [task_view(t) for t in tasks]}

    def trace(self, ctx: Context, env_id: str, job_id: str) -> dict[str, Any]:
        """The job's trace (404 for a job without one: older jobs, or a trace lost)."""
        with self._sessions() as db:
            job = self._job(db, ctx, env_id, job_id)
            row = db.get(JobTrace, job.id)
            if row is None:
                raise NotFound(f"job {job_id} has no trace (jobs before Fornace's contract "
                               f"1.7 have none)")
            try:
                found = trace_view(row, job_secrets(db, job, self.store.secret_keys),
                                   self.store.secret_keys(db, job.environment_id))
            except BadTrace as exc:
                raise NotFound(f"job {job_id} has no readable trace: its data {exc}") from None
            found.update(job_id=job.id, environment_id=job.environment_id, action=job.kind,
                         state=job.state)
            return found

    def tasks_tsv(self, ctx: Context, env_id: str, job_id: str | None = None) -> str:
        """The tasks of one job (or of every job of the environment) as TSV."""
        with self._sessions() as db:
            if job_id is None:
                where = JobTask.environment_id == self.store.environment(db, ctx, env_id).id
            else:
                where = JobTask.deployment_id == self._job(db, ctx, env_id, job_id).id
            rows = db.execute(select(
                JobTask.change_id, JobTask.deployment_id, Job.kind, JobTask.status,
                JobTask.reason, JobTask.target, JobTask.target_name, JobTask.operation,
                JobTask.started, JobTask.finished, JobTask.summary).join(
                Job, Job.id == JobTask.deployment_id).where(where).order_by(
                JobTask.change_id))
            return tsv(rows)

    def _job(self, db: DbSession, ctx: Context, env_id: str, job_id: str,
             options: list[Any] | None = None) -> Job:
        """The job ``job_id`` of the environment (404); ``options``: its columns loaded."""
        env = self.store.environment(db, ctx, env_id, description=False)
        job = db.get(Job, lookup_id(job_id, "job"), options=options)
        if job is None or job.environment_id != env.id:
            raise NotFound(f"job {job_id} not found in environment {env_id}")
        return job

    # -- views of the environment ---------------------------------------------------
    def topology(self, ctx: Context, env_id: str,
                 session_id: str | None = None) -> dict[str, Any]:
        """The dependency graph of the deployed description (or of a session's)."""
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            description = self.store.description(db, ctx, env, session_id)
            return topology.build(description, self.store.catalog_of(db, env.id)).view()

    def status(self, ctx: Context, env_id: str, session_id: str | None = None,
               details: bool = False) -> dict[str, Any]:
        """Per service and unit the status the conductor keeps in the description.

        While a job runs, its model's services are shown (also those it
        adds), with the node states and endpoints it has sent so far
        (contract 1.5, 1.15); a unit it has not reached yet is pending.  A
        session's description (given) shows what that session would deploy.
        ``details``: the conductor's bookkeeping in each status too.
        """
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            return self._status(db, ctx, env, running_job(db, env.id), session_id, details)

    def outputs(self, ctx: Context, env_id: str) -> dict[str, Any]:
        """The endpoints of the environment (:mod:`fornace.api.outputs`): while a
        job runs, of the services it works on, with the endpoints it has sent so
        far (an instance's address as soon as its stack is up), as
        :meth:`status` shows them."""
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            return self._outputs(env, running_job(db, env.id))

    def status_and_outputs(self, ctx: Context, env_id: str, session_id: str | None = None,
                           ) -> tuple[dict[str, Any], dict[str, Any]]:
        """:meth:`status` and :meth:`outputs` from one read of the environment and
        its running job (the dashboard's environment page shows both)."""
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            running = running_job(db, env.id)
            return (self._status(db, ctx, env, running, session_id, False),
                    self._outputs(env, running))

    def _status(self, db: DbSession, ctx: Context, env: Environment, running: Job | None,
                session_id: str | None, details: bool) -> dict[str, Any]:
        description, deployed, live = env.description, env.version > 0, None
        if session_id:
            description = self.store.config_session(db, ctx, env, session_id,
                                                    editable=False).description
        elif running is not None:   # what the job works on, as it moves
            description, deployed, live = running.description, False, running.nodes
        return {"environment_id": env.id, "version": env.version, "state": env.state,
                "job": running.id if running is not None else None,
                "services": services_status(description, deployed, live, details)}

    @staticmethod
    def _outputs(env: Environment, running: Job | None) -> dict[str, Any]:
        if running is not None:
            found = environment_outputs(running.description or {}, running.nodes)
        else:
            found = environment_outputs(env.description or {})
        found["job"] = running.id if running is not None else None
        found["environment"] = {"id": env.id, "name": env.name}
        return found

    # -- abandoning a job -------------------------------------------------------------
    def abandon(self, ctx: Context, env_id: str) -> dict[str, Any]:
        """Give up the running job: it ends as ``abandoned``, the environment is
        usable again and its job lock is cleared; what the job still sends is ignored."""
        with self._sessions.begin() as db:
            env = self.store.environment(db, ctx, env_id, lock=True)
            job = running_job(db, env.id)
            if job is None:
                raise Conflict(f"environment {env_id} runs no job: nothing to abandon")
            now = utcnow()
            job.state, job.finished, job.updated = "abandoned", now, now
            settle_tasks(db, job.id, job.state, now)
            env.state, env.updated = self._after_abandon(db, env, job), now
            reopen_session(db, job, now)
            locks.revoke(db, env.id)   # its conductor finds the lock lost and stops
            db.add(Status(id=new_id(), deployment_id=job.id, entity="environment",
                          entity_id=env.id, level="warning",
                          text=f"job {job.id} ({job.kind}) abandoned by user {ctx.user_id}"))
            db.flush()
            view = job_view(job, secret_keys=self.store.secret_keys(db, env.id))
        if self.store.notifications.enabled:
            self.store.notify(ctx, notifications.ended_event(job.kind, job.state),
                              notifications.job_payload(env, job, ctx.user_id), error=True)
        return view

    @staticmethod
    def _after_abandon(db: DbSession, env: Environment, job: Job) -> str:
        if job.kind in NOT_DEPLOYING:  # it deployed nothing
            return settled_state(db, env.id, job.id)
        return "delete failure" if job.kind == "delete" else "deploy failure"


def _task_counts(db: DbSession, where: Any) -> dict[str, dict[str, int]]:
    """job id -> {status: number of tasks} (statuses without tasks left out)."""
    counts: dict[str, dict[str, int]] = {}
    for job_id, status, number in db.execute(select(
            JobTask.deployment_id, JobTask.status, func.count()).where(where).group_by(
            JobTask.deployment_id, JobTask.status)):
        counts.setdefault(job_id, {})[status] = number
    return counts
