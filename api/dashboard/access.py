"""What the dashboard lets its user do: the API's policy, page by page.

Each page and each form post names the rules of the API calls it makes
(:mod:`fornace.api.policy`) and is refused as those calls are (a 403 page),
so the dashboard never allows more than the API.  The templates ask
``may(action, env)`` before they show a button, a link or a form, so a user
sees only what they may do: a reader sees the pages without their change
buttons, and only the cloud admin sees the view of every project.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from fastapi import Request

from fornace.api import routing
from fornace.api.dashboard.login import current_context
from fornace.api.context import Context


async def caller(request: Request, *actions: str, env_id: str | None = None) -> Context:
    """The logged-in user (``is_admin`` as the policy says), once the policy
    allows them every one of ``actions`` on environment ``env_id`` (on their
    own project without one); else a 403 naming the first refused."""
    ctx = request.app.state.policy.with_admin(await current_context(request))
    request.state.ctx = ctx          # the pages' frame shows who is logged in
    for action in actions:
        await routing.authorize(request, ctx, action, env_id)
    return ctx


def may(request: Request) -> Callable[..., bool]:
    """The templates' ``may(action, env=None)``: whether the logged-in user may do
    ``action`` on ``env`` (a view with its ``tenant_id``; without one, on their
    own project).  Nobody logged in (the login and error pages) may nothing."""
    ctx = getattr(request.state, "ctx", None)
    rules = request.app.state.policy

    def may_do(action: str, env: Mapping[str, Any] | None = None) -> bool:
        if ctx is None:
            return False
        return rules.allows(ctx, action, env.get("tenant_id") if env else None)
    return may_do
