"""The Keystone trusts environments act with (keystone mode).

A user's token lives an hour or so; a deployment, and the heal or scale that
comes weeks later, need to act on the cloud for that user long after.  So,
as Murano did, at deploy time (and at every job a user starts) the API makes
sure the environment has a trust from that user to the Fornace service user
on the environment's project, with the user's roles and impersonation; the
task carries its id (contract 1.6) and the conductor logs in as the service
user scoped to it.  The trust stays with the environment and is reused while
the same user starts its jobs and Keystone still has it (another user's job
gets a trust of their own, and the previous one is deleted); the conductor deletes it once the
environment's deletion succeeded.

A trust made for a request that then fails (the environment was busy, the
broker refused the task) is deleted again: nothing is left behind.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fornace.api.errors import Forbidden, Unavailable
from fornace.common.identity import IdentityError, Keystone

if TYPE_CHECKING:   # the store uses this module
    from fornace.api.context import Context

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delegation:
    """The trust a task carries, and what changed to get it."""

    trust_id: str | None            # what the task carries (None: no trust)
    trustor_id: str | None = None
    created: bool = False           # made for this request: undone if it fails
    replaced: str | None = None     # the environment's previous trust, deleted on success
    replaced_trustor: str | None = None
    # no trusts are made here (noauth): the task carries the environment's own,
    # read with it in the job's transaction (:meth:`trust_of`)
    current: bool = False

    def trust_of(self, env: Any) -> str | None:
        """The trust the task of a job on ``env`` carries."""
        return env.trust_id if self.current else self.trust_id


def refusal(delegated_by: str) -> str:
    """Why a job of a delegated token is refused, and what to do instead."""
    how = ("a trust" if delegated_by == "trust" else
           "OAuth 1.0a" if delegated_by == "OAuth 1.0a" else delegated_by)
    return (f"this token was issued through {how}: Keystone lets no delegated token "
            f"(an application credential, restricted or not, a trust, OAuth) make the "
            f"trust Fornace acts on the cloud with for your deployments, so a job that "
            f"acts on the cloud (deploy, an action, delete) is refused before it starts. "
            f"Log in with your password (auth_type password in clouds.yaml, "
            f"OS_AUTH_TYPE=password, or the dashboard's login) to start it; listing, "
            f"showing and editing sessions work with this token.")


class Trusts:
    """Makes and deletes environments' trusts with Keystone.

    A token delegated to its bearer -- an application credential (restricted
    or not), a trust, OAuth -- cannot make trusts (Keystone answers
    "Delegated tokens cannot manage trusts"), nor act through the trust
    another login of its user made: that trust carries the user's roles,
    which may be more than the credential's.  A job of such a token is
    refused with a 403 naming what to do, before anything is asked of
    Keystone or started."""

    def __init__(self, keystone: Keystone) -> None:
        self.keystone = keystone

    def for_job(self, ctx: Context, trust_id: str | None,
                trustor_id: str | None) -> Delegation:
        """The trust a job of ``ctx`` acts with, given the environment's current one."""
        if not ctx.token:
            return Delegation(trust_id, trustor_id)
        if ctx.delegated_by:
            raise Forbidden(refusal(ctx.delegated_by))
        if trust_id and trustor_id == ctx.user_id:
            if self._usable(trust_id):
                return Delegation(trust_id, trustor_id)
            LOG.warning("the environment's trust is gone from Keystone; making another")
            trust_id = trustor_id = None
        try:
            made = self.keystone.create_trust(ctx.token, ctx.user_id, ctx.tenant_id,
                                              sorted(ctx.roles))
        except IdentityError as exc:
            if exc.status is not None and exc.status < 500:
                raise Forbidden(f"Keystone refused the trust Fornace needs to act for you "
                                f"on the cloud: {exc}") from None
            raise Unavailable(f"cannot make the trust Fornace needs to act for you on the "
                              f"cloud: {exc}") from None
        LOG.info("trust made for user %s on project %s", ctx.user_id, ctx.tenant_id)
        return Delegation(made, ctx.user_id, True, trust_id, trustor_id)

    def _usable(self, trust_id: str) -> bool:
        """Whether the trust still exists (deleted by hand, or with its trustor's
        role); when Keystone cannot say, it is taken to be there."""
        try:
            return self.keystone.trust_exists(trust_id)
        except IdentityError:
            return True

    def discard(self, trust_id: str) -> None:
        """Delete a trust no environment uses; a failure is logged, not raised (an
        unused trust lets nobody but the Fornace service user act)."""
        try:
            self.keystone.delete_trust(trust_id)
        except IdentityError as exc:
            LOG.error("an unused trust could not be deleted (%s); delete it with "
                      "'openstack trust delete'", exc)
