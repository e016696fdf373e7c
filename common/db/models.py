"""Tables of the API.

An environment keeps its deployed description (the object model) as JSON;
a configuration session keeps a working copy that users edit until they
deploy it.  A job (a deployment, a deletion or another lifecycle action)
keeps a *masked* copy of the model it ran on, and status rows are the
reports the conductor sent while it ran.
"""
from __future__ import annotations

import datetime
import uuid

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, ForeignKey, Integer, LargeBinary,
                        String, Text, UniqueConstraint)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def new_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Environment(Base):
    __tablename__ = "environments"

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(255))
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    # ready | deploying | deploy failure | deleting | delete failure
    state: Mapped[str] = mapped_column(String(32), default="ready")
    description: Mapped[dict] = mapped_column(JSON)
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    updated: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    # the Keystone trust its jobs act with (keystone mode), and who gave it
    trust_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    trustor_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # the OpenStack region its stack (and so its units) goes to, as given at
    # creation (Murano's ``region``); None: the conductor's ``[heat] region_name``
    region: Mapped[str | None] = mapped_column(String(255), nullable=True)


class ConfigSession(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    environment_id: Mapped[str] = mapped_column(
        ForeignKey("environments.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)  # environment version it was opened on
    state: Mapped[str] = mapped_column(String(32), default="open")  # open|deploying|deployed
    description: Mapped[dict] = mapped_column(JSON)
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    updated: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


#: the actions that look at or operate what is deployed without deploying: how
#: such a job ends is its own state, the environment keeps the one it had
NOT_DEPLOYING = ("plan", "check", "execute_operation")


class Job(Base):
    """One job of an environment: a deployment, a deletion or another action.

    The table keeps Murano 0.2's name: its rows are what ``GET
    .../deployments`` lists, and its id columns elsewhere are ``deployment_id``.
    """
    __tablename__ = "deployments"

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    environment_id: Mapped[str] = mapped_column(
        ForeignKey("environments.id", ondelete="CASCADE"), index=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    session_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # the action: deploy | delete | install | uninstall | execute_operation | ...
    kind: Mapped[str] = mapped_column(String(32), default="deploy")
    # running | success | completed_w_errors | abandoned | refused
    state: Mapped[str] = mapped_column(String(32), default="running")
    description: Mapped[dict] = mapped_column(JSON)  # masked: no secrets stored here
    parameters: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # masked too
    # the package versions it ran (["kvstore 1.1.0"], ["data folder"]); null: before 0016
    packages: Mapped[list | None] = mapped_column(JSON, nullable=True)
    # while it runs: the node states its conductor sent, {unit or service id: {state, local}}
    nodes: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    started: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    finished: Mapped[datetime.datetime | None] = mapped_column(DateTime, nullable=True)
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    updated: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class Status(Base):
    __tablename__ = "statuses"
    __table_args__ = (UniqueConstraint("message_id", name="uq_statuses_message_id"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    deployment_id: Mapped[str] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    message_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    entity: Mapped[str | None] = mapped_column(String(32), nullable=True)
    entity_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    text: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[str | None] = mapped_column(Text, nullable=True)
    level: Mapped[str] = mapped_column(String(16), default="info")
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    updated: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class JobTask(Base):
    """One task of a job, as the conductor reported it on ``job-events``.

    Keyed by (environment, change id): a redelivered or later event about the
    same task updates this row instead of adding one.
    """

    __tablename__ = "job_tasks"
    __table_args__ = (UniqueConstraint("environment_id", "change_id",
                                       name="uq_job_tasks_environment_change"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    deployment_id: Mapped[str] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    environment_id: Mapped[str] = mapped_column(String(64), index=True)
    change_id: Mapped[str] = mapped_column(String(64))
    target: Mapped[str | None] = mapped_column(String(255), nullable=True)
    target_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    operation: Mapped[str | None] = mapped_column(String(255), nullable=True)
    reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    started: Mapped[datetime.datetime | None] = mapped_column(DateTime, nullable=True)
    finished: Mapped[datetime.datetime | None] = mapped_column(DateTime, nullable=True)
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)
    digest: Mapped[str | None] = mapped_column(String(128), nullable=True)
    log: Mapped[str | None] = mapped_column(Text, nullable=True)  # lines joined by \n
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    updated: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class JobTrace(Base):
    """A job's trace -- which rule fired on which object, round by round -- as
    its conductor sent it (contract 1.7): the JSON document zlib-compressed,
    kept out of ``deployments`` so that listing jobs never reads it."""

    __tablename__ = "job_traces"

    deployment_id: Mapped[str] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), primary_key=True)
    environment_id: Mapped[str] = mapped_column(String(64), index=True)
    size: Mapped[int] = mapped_column(Integer)         # bytes of the JSON, expanded
    stored: Mapped[int] = mapped_column(Integer)       # bytes of ``data``
    truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    data: Mapped[bytes] = mapped_column(LargeBinary)   # zlib
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class JobEventId(Base):
    """A task event stored (its message id and the fence token it carried): a
    batch the conductor sends again after a lost confirm, or the broker
    delivers again, is stored once -- its log lines are appended, so storing
    it twice would show them twice.  The token tells a takeover's events,
    numbered from 1 again, from the first holder's."""

    __tablename__ = "job_event_ids"

    key: Mapped[str] = mapped_column(String(300), primary_key=True)   # message id@token
    deployment_id: Mapped[str] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class JobLock(Base):
    """The environment a conductor works on: at most one job per environment."""

    __tablename__ = "job_locks"

    environment_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)   # None: free
    holder: Mapped[str | None] = mapped_column(String(255), nullable=True)  # which conductor
    acquired: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    heartbeat: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    # grows with every grant and revocation (fencing: a newer holder has a larger one)
    token: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    done_job: Mapped[str | None] = mapped_column(String(64), nullable=True)  # last ended job
    # the task the holder runs (message id, JSON body: secrets inside, never logged),
    # for another conductor to take over when the holder falls silent (0013)
    task_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    task_body: Mapped[str | None] = mapped_column(Text, nullable=True)
    takeover_at: Mapped[datetime.datetime | None] = mapped_column(DateTime, nullable=True)


class AgentQueue(Base):
    """A queue a conductor sent execution plans on (or read their results from):
    deleted with its environment's stack, or by ``fornace gc`` once the
    environment is gone.  No foreign key: the row outlives its environment."""

    __tablename__ = "agent_queues"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    environment_id: Mapped[str] = mapped_column(String(64), index=True)
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class PackageName(Base):
    """Who may upload versions of a workflow package name (:mod:`fornace.api.packages.names`):
    the project that first uploaded one (``tenant_id``; None: the cloud admin's,
    a name whose first version was public).  A name stays its project's when its
    versions are deleted; only the cloud admin moves it to another project."""

    __tablename__ = "package_names"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    updated: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class Package(Base):
    """A workflow package an operator uploaded (:mod:`fornace.api.packages.store`): the
    archive as it came, kept whole so that what deploys is what was checked.
    A name's versions are immutable and unique across projects (a deployment
    will name one unambiguously), and only the project owning the name
    (:class:`PackageName`) adds versions; ``tenant_id`` is None for a public one."""

    __tablename__ = "packages"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_packages_name_version"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[str] = mapped_column(String(32))
    description: Mapped[str] = mapped_column(Text, default="")
    tenant_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    public: Mapped[bool] = mapped_column(Boolean, default=False)
    content_type: Mapped[str] = mapped_column(String(64))
    digest: Mapped[str] = mapped_column(String(64))        # sha256, hex
    size: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[list] = mapped_column(JSON)              # member names, sorted
    # the "types" of its types.json (None: it has none): the API's catalog of an
    # environment pinned to it has them
    types: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    uploaded_by: Mapped[str] = mapped_column(String(64))
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class EnvironmentPackage(Base):
    """A workflow package version an environment is pinned to (:mod:`fornace.api.packages.pins`):
    its deployments and actions run with that version until it is moved
    explicitly; a package is not deleted while an environment names it."""

    __tablename__ = "environment_packages"

    environment_id: Mapped[str] = mapped_column(
        ForeignKey("environments.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    package_id: Mapped[str] = mapped_column(ForeignKey("packages.id"), index=True)
    pinned_by: Mapped[str] = mapped_column(String(64))
    updated: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class DeadLetter(Base):
    """A message the conductor sent back that could not be stored, even alone
    (:mod:`fornace.api.stores.deadletters`): set aside with why, so that it
    neither loops nor holds back the messages behind it, and an operator sees
    it.  Ids are those the message named, when known; ``body`` is a bounded
    copy with its secrets masked."""

    __tablename__ = "dead_letters"

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    queue: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(32))     # report | result | job event | message
    message_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    environment_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    tenant_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    reason: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    created: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow, index=True)
