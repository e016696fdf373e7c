"""Logging in to the dashboard with a Keystone password, and out again.

The password goes to Keystone once and is never kept (nor shown back, nor
logged): Keystone answers with a project-scoped token, and the token is what
the dashboard's cookie holds (:mod:`fornace.api.dashboard.login`).  The token
is then checked by the API's own authenticator, as every later page does, so
a login gives no more than an ``X-Auth-Token`` header would.  A logout revokes
the token in Keystone -- a copy of the cookie is worthless afterwards -- and
drops it from the authenticator's cache, which would otherwise trust it for
up to ``[keystone_authtoken] token_cache_time`` more.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from starlette.concurrency import run_in_threadpool

from fornace.api.auth import KeystoneAuth
from fornace.api.dashboard.formdata import Form
from fornace.api.dashboard.login import LoginRequired, authenticate
from fornace.api.errors import Unavailable
from fornace.api.context import Context
from fornace.common.identity import IdentityError

DEFAULT_DOMAIN = "Default"
WRONG = "Wrong user name, password or project."
REQUIRED = "The user name, password and project are required."


@dataclass(frozen=True)
class Credentials:
    """What the login form names, the password aside (it is never kept)."""

    username: str
    project: str
    user_domain: str = DEFAULT_DOMAIN
    project_domain: str = DEFAULT_DOMAIN

    @classmethod
    def of(cls, form: Form) -> "Credentials":
        """The form's fields; an empty domain is the default one, as in Keystone's
        own clients."""
        return cls(username=form.get("username").strip(), project=form.get("project").strip(),
                   user_domain=form.get("user_domain").strip() or DEFAULT_DOMAIN,
                   project_domain=form.get("project_domain").strip() or DEFAULT_DOMAIN)

    def fields(self) -> dict[str, str]:
        """The values to fill the login form with again."""
        return asdict(self)


class LoginRefused(Exception):
    """The login page comes back with ``message`` (HTTP ``status``)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


async def log_in(auth: KeystoneAuth, who: Credentials, password: str) -> tuple[str, Context]:
    """A token of ``who`` for ``password`` and the context the API gives it;
    :class:`LoginRefused` saying why not (wrong credentials: 401, Keystone
    unreachable: 503)."""
    if not (who.username and password and who.project):
        raise LoginRefused(REQUIRED, 400)
    try:
        answer = await run_in_threadpool(auth.keystone.password_login, who.username, password,
                                         who.project, who.user_domain, who.project_domain)
    except IdentityError as exc:
        raise LoginRefused(_unreachable(exc), 503) from None
    if answer is None:
        raise LoginRefused(WRONG, 401)
    token = answer[0]
    try:
        return token, await authenticate(auth, {"x-auth-token": token})
    except Unavailable as exc:
        raise LoginRefused(exc.message, 503) from None
    except LoginRequired as exc:   # e.g. a token Fornace cannot use
        raise LoginRefused(f"Keystone accepted the login but Fornace cannot use its token: "
                           f"{exc.reason}", 401) from None


async def log_out(auth: KeystoneAuth, token: str) -> str | None:
    """Revoke ``token`` and forget it; what to tell the user when Keystone
    could not be told (the cookie goes anyway)."""
    try:
        await run_in_threadpool(auth.keystone.revoke, token)
    except IdentityError as exc:
        return (f"Keystone could not revoke your token ({exc}): it stays valid until "
                "it expires.")
    finally:
        auth.forget(token)
    return None


def _unreachable(exc: IdentityError) -> str:
    return f"Keystone cannot check the login now ({exc}); try again in a moment."
