"""Tables of the API.

An environment keeps its deployed description (the object model) as JSON;
a configuration session keeps a working copy that users edit until they
deploy it.  Deployments keep a *masked* copy of what was deployed, and
status rows are the reports the conductor sent while it ran.
"""
from __future__ import annotations

import datetime
import uuid

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
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


class Deployment(Base):
    __tablename__ = "deployments"

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    environment_id: Mapped[str] = mapped_column(
        ForeignKey("environments.id", ondelete="CASCADE"), index=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    session_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    kind: Mapped[str] = mapped_column(String(16), default="deploy")  # deploy | delete
    # running | success | completed_w_errors
    state: Mapped[str] = mapped_column(String(32), default="running")
    description: Mapped[dict] = mapped_column(JSON)  # masked: no secrets stored here
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
