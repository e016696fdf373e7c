"""The configuration session a dashboard user edits, found without a cookie.

The JSON API leaves it to the client to remember its session id; the
dashboard instead uses the caller's own open session of the environment's
current version (a user has at most the one they opened last), and opens
one when a change is made without it -- as Murano's dashboard does.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import select

from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.api.views import session_view
from fornace.common.db.models import ConfigSession


def open_session(store: Store, ctx: Context, env_id: str) -> dict[str, Any] | None:
    """The caller's latest open, still valid session of the environment, or None."""
    with store.sessions() as db:
        env = store.environment(db, ctx, env_id)
        session = db.scalars(select(ConfigSession).where(
            ConfigSession.environment_id == env.id, ConfigSession.user_id == ctx.user_id,
            ConfigSession.state == "open", ConfigSession.version == env.version).order_by(
            ConfigSession.created.desc())).first()
        return session_view(session) if session is not None else None


def ensure_session(store: Store, ctx: Context, env_id: str) -> str:
    """The id of the caller's open session, opened now when there is none."""
    session = open_session(store, ctx, env_id)
    return session["id"] if session is not None else store.config_sessions.open(ctx, env_id)["id"]
