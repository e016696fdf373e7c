"""Fornace and Keystone: the service user's options, sessions, tokens and trusts.

The ``[keystone_authtoken]`` group -- the section every OpenStack API reads
for token validation, with keystonemiddleware's option names -- holds the
Fornace service user, read with keystoneauth1's loading helpers
(``auth_type``, ``auth_url`` with or without ``/v3``, ``username``,
``password``, ``project_name``, the domains, ``cafile``, ``insecure``...)
and the validation's own settings (``www_authenticate_uri``,
``token_cache_time``, ``interface``, ``region_name``).  The API uses it to
validate users' tokens and to create trusts; the conductor uses it with a
trust to act for a user (:func:`trust_auth`) long after the user's own token
has expired -- as Murano did.  A trust is made at deploy time by the user
(the trustor) for the service user (the trustee) on the user's project, with
the user's roles and impersonation, and deleted with the environment.

The group was ``[keystone]`` before: every option is still read from there
when ``[keystone_authtoken]`` does not set it, and oslo.config logs a
deprecation warning naming the new place (``cache_seconds`` became
``token_cache_time``).

Only keystoneauth1 is used: no token, password or trust id is ever logged.
"""
from __future__ import annotations

import copy
import datetime
import logging
from typing import Any

from oslo_config import cfg

LOG = logging.getLogger(__name__)

AUTHTOKEN = "keystone_authtoken"
OLD_GROUP = "keystone"  # before keystonemiddleware's name: read, with a warning
PLUGIN = "password"     # the default auth_type, and the plugin the sample lists

# keystonemiddleware's names for what Fornace's own validation does (the
# options of its that Fornace does not implement -- memcached_servers,
# service_token_roles... -- are not declared: a configuration file naming them
# is not refused, and they change nothing)
authtoken_opts = [
    cfg.StrOpt("www_authenticate_uri", deprecated_name="auth_uri",
               help="Keystone's public URL named in the WWW-Authenticate header of a "
                    "401, where clients get a token (default: the identity v3 URL "
                    "tokens are validated at)."),
    cfg.IntOpt("token_cache_time", default=60, min=-1,
               deprecated_opts=[cfg.DeprecatedOpt("cache_seconds", group=OLD_GROUP)],
               help="Longest time, in seconds, a validated token is trusted before "
                    "Keystone is asked again (never past the token's own expiry); 0 or "
                    "-1: every request is validated. Kept in each API process; a "
                    "revoked token is refused at most this long after."),
    cfg.StrOpt("interface", default="internal",
               help="Interface of the identity endpoint of the service user's catalog "
                    "tokens are validated at (public, internal, admin); when the "
                    "catalog has none there, auth_url."),
    cfg.StrOpt("region_name",
               help="Region of the identity endpoint tokens are validated at."),
]
# what a trust-scoped login must not carry besides the trust (Keystone refuses
# a token request with two scopes)
_SCOPES = ("project_id", "project_name", "project_domain_id", "project_domain_name",
           "domain_id", "domain_name", "system_scope")


class IdentityError(ValueError):
    """Keystone could not be reached (``status`` None) or refused what Fornace
    asked (``status``: its HTTP status); the text names the call and never
    carries a secret."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _loading() -> Any:
    from keystoneauth1 import loading
    return loading


def register_group(conf: cfg.ConfigOpts, group: str, auth_type: str | None = PLUGIN,
                   old_group: str | None = None) -> None:
    """keystoneauth1's auth and session options in ``group``, ``auth_type``
    defaulting to ``auth_type``; each also read from ``old_group`` (deprecated)
    when ``group`` does not set it.  The plugin's own options (``auth_url``,
    ``username``...) are registered when the group is read, for the plugin the
    configuration names, as keystoneauth1 does (:func:`plugin_options`)."""
    loading = _loading()
    opts = loading.get_auth_common_conf_options() + loading.get_session_conf_options()
    conf.register_opts(_also_in(old_group, opts), group=group)
    if auth_type:
        conf.set_default("auth_type", auth_type, group=group)


def _also_in(old_group: str | None, opts: list[cfg.Opt]) -> list[cfg.Opt]:
    """``opts``, each also read (with oslo.config's deprecation warning) under its
    names in ``old_group`` (None: as they are)."""
    if old_group is None:
        return opts
    moved = []
    for opt in opts:
        opt = copy.deepcopy(opt)
        names = [opt.dest] + [old.name.replace("-", "_") for old in opt.deprecated_opts
                              if old.name]
        opt.deprecated_opts = list(opt.deprecated_opts) + [
            cfg.DeprecatedOpt(name, group=old_group) for name in names]
        moved.append(opt)
    return moved


def _old_group_of(group: str) -> str | None:
    return OLD_GROUP if group == AUTHTOKEN else None


def _plugin(conf: cfg.ConfigOpts, group: str) -> tuple[Any, str] | None:
    """The loader of ``group``'s auth type and the group holding its options (its
    ``auth_section`` or itself), those options registered; None without a type."""
    loading = _loading()
    ensure(conf, group)
    section = conf[group].auth_section or group
    ensure(conf, section)
    name = conf[section].auth_type
    if not name:
        return None
    try:
        loader = loading.get_plugin_loader(name)
    except Exception as exc:
        raise IdentityError(f"[{section}] auth_type {name}: {exc}") from None
    conf.register_opts(_also_in(_old_group_of(section),
                                [opt._to_oslo_opt() for opt in loader.get_options()]),
                       group=section)
    return loader, section


def plugin_options(conf: cfg.ConfigOpts, group: str) -> Any:
    """The group holding ``group``'s plugin options (its ``auth_section`` or
    itself), with the options of its ``auth_type`` registered; None without one."""
    found = _plugin(conf, group)
    return None if found is None else conf[found[1]]


def register(conf: cfg.ConfigOpts) -> None:
    """``[keystone_authtoken]``: the Fornace service user and the validation's
    settings, each also read from the deprecated ``[keystone]``."""
    register_group(conf, AUTHTOKEN, old_group=OLD_GROUP)
    conf.register_opts(authtoken_opts, group=AUTHTOKEN)


def ensure(conf: cfg.ConfigOpts, group: str) -> None:
    """Register ``group``'s options now, if they are not yet (again is a no-op).

    They are registered when first read, not with the other options: loading
    keystoneauth1 costs every ``fornace`` command ~90 ms, and only the
    services read them (oslo.config reads late options from the files too).
    ``[keystone_authtoken]``'s auth_type defaults to ``password``; other
    groups' to none.
    """
    if group == AUTHTOKEN:
        register(conf)
    else:
        register_group(conf, group, auth_type=None)


def _plugin_opts() -> list[cfg.Opt]:
    return list(_loading().get_auth_plugin_conf_options(PLUGIN))


def group_opts(auth_type: str | None = None, old_group: str | None = None) -> list[cfg.Opt]:
    """The options :func:`register_group` adds, for oslo-config-generator (the
    sample shows ``auth_type``'s default, and the deprecated names)."""
    loading = _loading()
    common = []
    for opt in loading.get_auth_common_conf_options():
        if opt.dest == "auth_type" and auth_type:
            opt = copy.copy(opt)
            opt.sample_default = auth_type
        common.append(opt)
    return _also_in(old_group, common + _plugin_opts() + loading.get_session_conf_options())


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(AUTHTOKEN, group_opts(PLUGIN, OLD_GROUP) + authtoken_opts)]


def configured(conf: cfg.ConfigOpts, group: str = AUTHTOKEN) -> bool:
    """Whether ``group`` names an identity to log in as (an auth type and a URL)."""
    section = plugin_options(conf, group)
    return bool(section is not None and getattr(section, "auth_url", None))


def auth_of(conf: cfg.ConfigOpts, group: str = AUTHTOKEN, **overrides: Any) -> Any:
    """The auth plugin of ``group``; ``overrides`` replace options the plugin has."""
    found = _plugin(conf, group)
    if found is None:
        raise IdentityError(f"[{group}] auth_type is not set")
    loader, section = found
    values = conf[section]
    known = set(values.keys())
    try:
        return loader.load_from_options_getter(
            lambda opt: values[opt.dest],
            **{k: v for k, v in overrides.items() if k in known})
    except Exception as exc:   # a missing option
        raise IdentityError(f"[{section}] {exc}") from None


def session_of(conf: cfg.ConfigOpts, group: str = AUTHTOKEN, auth: Any = None) -> Any:
    """A keystoneauth1 session with ``group``'s TLS options (``auth``: its plugin)."""
    ensure(conf, group)
    return _loading().load_session_from_conf_options(conf, group, auth=auth)


def service_session(conf: cfg.ConfigOpts) -> Any:
    """The session of the Fornace service user (``[keystone_authtoken]``)."""
    return session_of(conf, AUTHTOKEN, auth_of(conf, AUTHTOKEN))


def trust_auth(conf: cfg.ConfigOpts, trust_id: str) -> Any:
    """The service user's login scoped to ``trust_id``: tokens that act for the
    trustor on the trust's project, renewed by keystoneauth1 as they expire."""
    return auth_of(conf, AUTHTOKEN, trust_id=trust_id, **{name: None for name in _SCOPES})


def token_auth(conf: cfg.ConfigOpts, token: str, project_id: str | None,
               group: str = AUTHTOKEN) -> Any:
    """A login with a user's own token (rescoped to ``project_id``), at ``group``'s
    Keystone: it ends with the token."""
    from keystoneauth1.identity import generic
    section = plugin_options(conf, group)
    auth_url = getattr(section, "auth_url", None) if section is not None else None
    if not auth_url:
        raise IdentityError(f"[{group}] auth_url is not set")
    scope = {"project_id": project_id} if project_id else {}
    return generic.Token(auth_url=auth_url, token=token, **scope)


def expiry(token_body: dict[str, Any]) -> float | None:
    """A token's ``expires_at`` as a POSIX time (None: absent or unreadable)."""
    text = token_body.get("expires_at")
    if not isinstance(text, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


class Keystone:
    """The identity v3 calls Fornace makes, as its service user.

    They go to the identity endpoint of ``interface`` (and ``region_name``) of
    the service user's catalog, as keystonemiddleware's do, or to ``auth_url``
    when the catalog has none there (or ``interface`` is None)."""

    def __init__(self, session: Any, interface: str | None = None,
                 region_name: str | None = None) -> None:
        self.session = session
        self.interface = interface
        self.region_name = region_name
        self._url: str | None = None

    @classmethod
    def from_config(cls, conf: cfg.ConfigOpts) -> "Keystone":
        ensure(conf, AUTHTOKEN)
        group = conf[AUTHTOKEN]
        return cls(service_session(conf), group.interface, group.region_name)

    # -- where ---------------------------------------------------------------
    @property
    def url(self) -> str:
        """The identity v3 URL (of the catalog, else discovered from ``auth_url``,
        with or without /v3)."""
        if self._url is None:
            from keystoneauth1 import plugin
            try:
                url = self._catalog_url()
                if not url:
                    url = self.session.get_endpoint(interface=plugin.AUTH_INTERFACE,
                                                    version=(3, 0))
            except Exception as exc:
                raise IdentityError(f"cannot reach Keystone: {_text(exc)}") from None
            if not url:
                raise IdentityError("Keystone offers no identity v3 API at auth_url")
            self._url = url.rstrip("/")
        return self._url

    def _catalog_url(self) -> str | None:
        """The catalog's identity v3 endpoint of :attr:`interface` (None: none)."""
        from keystoneauth1 import exceptions
        if not self.interface:
            return None
        try:
            return self.session.get_endpoint(service_type="identity",
                                             interface=self.interface,
                                             region_name=self.region_name, version=(3, 0))
        except (exceptions.EndpointNotFound, exceptions.EmptyCatalog):
            return None

    def service_user_id(self) -> str:
        try:
            return self.session.get_user_id()
        except Exception as exc:
            raise IdentityError(f"the service user cannot log in: {_text(exc)}") from None

    # -- tokens --------------------------------------------------------------
    def validate(self, token: str) -> dict[str, Any] | None:
        """The token's body, or None when Keystone does not know it (or it expired)."""
        response = self._call("GET", "/auth/tokens", "validate a token",
                              headers={"X-Subject-Token": token})
        if response.status_code in (401, 404):
            return None
        self._check(response, "validate a token")
        return response.json().get("token") or {}

    def password_login(self, username: str, password: str, project_name: str,
                       user_domain_name: str = "Default",
                       project_domain_name: str = "Default") -> tuple[str, dict[str, Any]] | None:
        """A project-scoped token for a user's password: ``(token, body)``, or None
        when Keystone refuses the user, password or project."""
        body = {"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": username, "password": password,
                "domain": {"name": user_domain_name}}}},
            "scope": {"project": {"name": project_name,
                                  "domain": {"name": project_domain_name}}}}}
        response = self._call("POST", "/auth/tokens", "log in", json=body,
                              authenticated=False)
        if response.status_code in (400, 401, 403, 404):
            return None
        self._check(response, "log in")
        return response.headers["X-Subject-Token"], response.json().get("token") or {}

    def revoke(self, token: str) -> None:
        """Revoke a user's token (a logout); an unknown one is already gone."""
        response = self._call("DELETE", "/auth/tokens", "revoke a token",
                              headers={"X-Subject-Token": token, "X-Auth-Token": token},
                              authenticated=False)
        if response.status_code not in (401, 404):
            self._check(response, "revoke a token")

    # -- trusts --------------------------------------------------------------
    def create_trust(self, user_token: str, user_id: str, project_id: str,
                     roles: list[str]) -> str:
        """A trust from the user (with their token) to the service user on
        ``project_id`` with ``roles`` and impersonation; its id."""
        body = {"trust": {"trustor_user_id": user_id, "trustee_user_id": self.service_user_id(),
                          "project_id": project_id, "impersonation": True,
                          "roles": [{"name": name} for name in sorted(roles)]}}
        response = self._call("POST", "/OS-TRUST/trusts", "create a trust", json=body,
                              headers={"X-Auth-Token": user_token}, authenticated=False)
        self._check(response, "create a trust")
        return response.json()["trust"]["id"]

    def trust_exists(self, trust_id: str) -> bool:
        """Whether Keystone still has the trust (as its trustee sees it)."""
        response = self._call("GET", f"/OS-TRUST/trusts/{trust_id}", "read a trust")
        if response.status_code in (403, 404):
            return False
        self._check(response, "read a trust")
        return True

    def delete_trust(self, trust_id: str) -> bool:
        """Delete a trust (as the service user); False when it was already gone."""
        response = self._call("DELETE", f"/OS-TRUST/trusts/{trust_id}", "delete a trust")
        if response.status_code == 404:
            return False
        self._check(response, "delete a trust")
        return True

    # -- plumbing ------------------------------------------------------------
    def _call(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        try:
            return self.session.request(self.url + path, method, raise_exc=False, **kwargs)
        except IdentityError:
            raise
        except Exception as exc:   # keystoneauth1: connection refused, TLS, time-out
            raise IdentityError(f"cannot {what}: {_text(exc)}") from None

    @staticmethod
    def _check(response: Any, what: str) -> None:
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except Exception:
                message = response.reason or ""
            raise IdentityError(f"Keystone refused to {what}: HTTP {response.status_code} "
                                f"{message}".strip(), response.status_code)


def _text(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__
