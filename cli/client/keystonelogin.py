"""The client commands' OpenStack login: OS_* variables, ``--os-*`` options and
clouds.yaml made into a keystoneauth1 session, and Fornace's endpoint found in
its catalog.

Users of an OpenStack cloud do not know where each service listens: the
catalog says.  This module reads their credentials (the options of
:mod:`fornace.cli.client.cloudauth`, a cloud of ``clouds.yaml`` with
``secure.yaml``) as the OpenStack clients do -- through openstacksdk's
config loader, which finds, merges and validates them and makes the
session -- and gives the API client a :class:`KeystoneLogin`: the session's token for each request
(the session logs in again when the token expires) and the session itself to
send them (so ``--os-cacert``/``--insecure`` apply to Fornace's endpoint too).

Explicit ``OS_*`` variables and ``--os-*`` options override the cloud's
values.  No secret (password, token) is ever put in a message.
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from fornace.cli.client.cloudauth import (DEFAULT_AUTH_TYPE, DEFAULT_INTERFACE, DEFAULT_TIMEOUT,
                                          SERVICE_TYPE, default_loader, keystone_loading)
from fornace.cli.client.http import ClientError
from fornace.common.errors import FornaceError

AUTH_HINT = "check OS_AUTH_URL, or the auth_url of the cloud"


# -- settings: openstacksdk's merge of clouds.yaml, secure.yaml and OS_* -----------------

@dataclass
class Settings:
    """What the login is made of, as openstacksdk merged the cloud (if any) and
    the explicit ``OS_*`` / ``--os-*`` values over it."""
    auth_type: str
    auth: dict[str, Any]
    origin: str                     # for messages: which cloud, or the OS_* variables
    region: str | None = None
    interface: str = DEFAULT_INTERFACE
    cloud: Any = None               # openstacksdk's CloudRegion: it makes the session
    secrets: list[str] = field(default_factory=list)   # never shown


def settings_of(command: Any) -> Settings:
    """The command's credentials through openstacksdk's config loader
    (``openstack.config``): with ``--os-cloud``/``OS_CLOUD``, that cloud of
    clouds.yaml (./, ~/.config/openstack/, /etc/openstack/ or
    ``OS_CLIENT_CONFIG_FILE``) with secure.yaml merged in, and the explicit
    options over it; without, the ``OS_*`` variables and ``--os-*`` options
    alone (clouds.yaml is not read: a single cloud there is not taken by
    default)."""
    from keystoneauth1 import exceptions as ka_exceptions
    from openstack import config as sdk_config
    from openstack import exceptions

    name = getattr(command, "os_cloud", None)
    named = os.environ.get("OS_CLIENT_CONFIG_FILE")
    if name and named and not os.path.isfile(named):
        raise FornaceError(f"OS_CLIENT_CONFIG_FILE names {named}, which is not a file")
    try:
        # the OS_* variables are the options' defaults already (cloudauth): the
        # loader reads only those naming the files (OS_CLIENT_CONFIG_FILE...)
        loader = sdk_config.OpenStackConfig(load_yaml_config=bool(name),
                                            load_envvars=bool(name))
        if name and loader.config_filename is None:
            raise FornaceError(
                "OS_CLOUD/--os-cloud names a cloud but no clouds.yaml was found (looked in "
                "./, ~/.config/openstack/ and /etc/openstack/; OS_CLIENT_CONFIG_FILE names "
                "another file)")
        cloud = loader.get_one(cloud=name, **_explicit(command))
    except ka_exceptions.NoMatchingPlugin as exc:
        raise _unknown_auth_type(exc.name) from None
    except ka_exceptions.MissingRequiredOptions as exc:
        names = ", ".join(f"OS_{o.dest.upper()} (--os-{o.name})" for o in exc.options)
        raise FornaceError(f"missing: {names}") from None
    except exceptions.ConfigException as exc:
        if name and name not in loader.get_cloud_names():
            known = ", ".join(sorted(loader.get_cloud_names())) or "none"
            raise FornaceError(f"cloud {name!r} (OS_CLOUD/--os-cloud) is not in "
                               f"{loader.config_filename} (clouds: {known})") from None
        raise FornaceError(f"{loader.config_filename}: {exc}") from None
    origin = (f"cloud {name!r} of {loader.config_filename}" if name
              else "the OS_* variables and --os-* options")
    auth_type = cloud.config.get("auth_type") or DEFAULT_AUTH_TYPE
    loader_opts = _loader(auth_type).get_options()
    auth = {key: value for key, value in (cloud.config.get("auth") or {}).items()
            if value is not None}
    return Settings(auth_type, auth, origin, region=cloud.region_name or None,
                    interface=cloud.get_interface() or DEFAULT_INTERFACE, cloud=cloud,
                    secrets=[str(auth[o.dest]) for o in loader_opts
                             if o.secret and auth.get(o.dest)])


def _explicit(command: Any) -> dict[str, Any]:
    """The command's options given explicitly (an option left at its default
    would hide the cloud's value; keystoneauth1's default auth type is a loader,
    not a name), as openstacksdk's ``get_one`` takes them: the auth type's
    options under ``auth``, merged over the cloud's (openstacksdk lets a
    cloud's ``auth`` win over flat ones), the session's and the catalog's flat.
    The command is read by attribute: oslo.config's and the quick parse's
    commands are no namespaces."""
    chosen = getattr(command, "os_auth_type", None)
    auth_type = chosen if isinstance(chosen, str) else None
    found: dict[str, Any] = {"auth_type": auth_type} if auth_type else {}
    for name in ("region_name", "interface", "cacert", "cert", "key"):
        value = getattr(command, f"os_{name}", None)
        if value:
            found[name] = value
    if getattr(command, "insecure", False):
        found["verify"] = False
    auth = {}
    for opt in _loader(auth_type or DEFAULT_AUTH_TYPE).get_options():
        value = getattr(command, f"os_{opt.dest}", None)
        if value not in (None, "") and value != opt.default:
            auth[opt.dest] = value
    if auth:
        found["auth"] = auth
    return found


def _loader(auth_type: str) -> Any:
    from keystoneauth1 import exceptions

    loading = keystone_loading()
    if auth_type == DEFAULT_AUTH_TYPE:
        return default_loader()
    try:
        return loading.get_plugin_loader(auth_type)
    except exceptions.NoMatchingPlugin:
        raise _unknown_auth_type(auth_type) from None


def _unknown_auth_type(auth_type: str) -> FornaceError:
    known = ", ".join(sorted(keystone_loading().get_available_plugin_names()))
    return FornaceError(f"unknown auth type {auth_type!r} (OS_AUTH_TYPE, --os-auth-type or "
                        f"the cloud's auth_type; known: {known})")


# -- logging in ------------------------------------------------------------------------

class KeystoneLogin:
    """A keystoneauth1 session and Fornace's URL, as :class:`ApiClient` uses them:
    :meth:`headers` for each request, :meth:`send` to make it, :meth:`renew`
    when Fornace refused the token."""

    def __init__(self, session: Any, settings: Settings) -> None:
        self.session = session
        self.settings = settings
        self.url = ""

    def headers(self) -> dict[str, str]:
        """X-Auth-Token: the session's token, got again by the session when it expires."""
        try:
            headers = self.session.get_auth_headers()
        except Exception as exc:
            raise self.failure(exc) from None
        if not headers:
            raise ClientError(f"Keystone gave no token for {self._who()}", 401)
        return dict(headers)

    def renew(self) -> bool:
        """Forget the token, so that the next request logs in again."""
        return bool(self.session.invalidate())

    def send(self, method: str, url: str, data: bytes | None, headers: dict[str, str],
             timeout: float) -> tuple[int, str, bytes]:
        """One request through the session: (status, reason, body); OSError when
        nothing answered."""
        from keystoneauth1 import exceptions

        try:
            answer = self.session.request(url, method, data=data, headers=headers,
                                          authenticated=False, raise_exc=False,
                                          timeout=timeout)
        except exceptions.ConnectionError as exc:
            raise ConnectionError(_reason(exc)) from None
        return answer.status_code, answer.reason or "", answer.content

    def endpoint(self) -> str:
        """Fornace's URL from the token's catalog (logs in)."""
        from keystoneauth1 import exceptions

        s = self.settings
        try:
            url = self.session.get_endpoint(service_type=SERVICE_TYPE, interface=s.interface,
                                            region_name=s.region)
        except (exceptions.EndpointNotFound, exceptions.EmptyCatalog):
            url = None
        except Exception as exc:
            raise self.failure(exc) from None
        if not url:
            region = f" in region {s.region}" if s.region else ""
            raise FornaceError(
                f"the catalog Keystone gave {self._who()} has no {s.interface} endpoint of "
                f"service type '{SERVICE_TYPE}'{region}: set --url or FORNACE_URL to "
                f"Fornace's API")
        if not url.startswith(("http://", "https://")):
            raise FornaceError(f"the catalog's '{SERVICE_TYPE}' endpoint is not an http(s) "
                               f"URL: {url!r}; set --url or FORNACE_URL")
        return url

    def failure(self, exc: BaseException) -> Exception:
        """A keystoneauth1 error as the command line tells it: a ClientError (exit 3:
        refused, unreachable) or a FornaceError (exit 2: options to fix)."""
        from keystoneauth1 import exceptions

        where = f"Keystone at {self.settings.auth.get('auth_url') or '?'}"
        if isinstance(exc, exceptions.MissingRequiredOptions):
            names = ", ".join(f"OS_{o.dest.upper()} (--os-{o.name})" for o in exc.options)
            return FornaceError(f"missing: {names} (from {self.settings.origin})")
        if isinstance(exc, exceptions.Unauthorized):
            return ClientError(f"{where} refused the login of {self._who()}: check the user "
                               f"name, password, project and domains (from "
                               f"{self.settings.origin})", 401, call="keystone login")
        if isinstance(exc, exceptions.HttpError):
            return ClientError(f"{where} refused the login of {self._who()}: "
                               f"{self.clean(exc.message or '')} (HTTP {exc.http_status})",
                               exc.http_status, call="keystone login")
        unreachable = _cause(exc, exceptions.ConnectionError)   # also under a discovery
        if unreachable is not None:
            return ClientError(f"cannot reach {where}: {_reason(unreachable)}",
                               call="keystone login", hint=AUTH_HINT)
        if isinstance(exc, exceptions.DiscoveryFailure):
            return ClientError(f"{where} does not answer as an identity API: "
                               f"{self.clean(str(exc)).split('. ')[0]}", call="keystone login",
                               hint=AUTH_HINT)
        text = self.clean(str(exc)) or type(exc).__name__
        return ClientError(f"the login to {where} failed: {text}", call="keystone login",
                           hint=AUTH_HINT)

    def _who(self) -> str:
        auth = self.settings.auth
        user = auth.get("username") or auth.get("user_id")
        project = auth.get("project_name") or auth.get("project_id")
        who = f"user {user}" if user else f"auth type {self.settings.auth_type}"
        return who + (f" (project {project})" if project else "")

    def clean(self, text: str) -> str:
        for secret in self.settings.secrets:
            text = text.replace(secret, "***")
        return text.strip()


def connect(command: Any, url: str | None) -> KeystoneLogin:
    """Log in with the command's credentials; Fornace's URL is ``url``, else the
    catalog's.  The login happens here, so that a refused password is told
    before anything is asked of Fornace."""
    logging.getLogger("keystoneauth").addHandler(logging.NullHandler())  # no stray lines
    settings = settings_of(command)
    _check_secrets(settings)
    login = KeystoneLogin(None, settings)
    try:
        login.session = settings.cloud.get_session()
    except Exception as exc:
        raise login.failure(exc) from None
    # --timeout (else DEFAULT_TIMEOUT) for Keystone's calls as for Fornace's
    login.session.timeout = getattr(command, "timeout", None) or DEFAULT_TIMEOUT
    if url is None:
        login.url = login.endpoint()
    else:
        login.url = url
        login.headers()
    return login


def _check_secrets(settings: Settings) -> None:
    """A secret the auth type asks for (a password) must be there: Keystone's
    refusal of an empty one would not say what is missing."""
    for opt in _loader(settings.auth_type).get_options():
        if opt.prompt and not settings.auth.get(opt.dest):
            raise FornaceError(
                f"no {opt.name} is given (in {settings.origin}): set "
                f"{opt.argparse_envvars[0]} (or "
                f"--os-{opt.name}, or auth.{opt.dest} of the cloud, e.g. in secure.yaml)")


def _cause(exc: BaseException, kind: type) -> BaseException | None:
    """``exc`` or the first exception of its chain of causes that is a ``kind``."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _reason(exc: BaseException) -> str:
    """The reason of a connection failure, without requests' and urllib3's wrapping."""
    text = str(exc)
    if re.search(r"certificate verify failed|CERTIFICATE_VERIFY_FAILED", text):
        return "its TLS certificate is not trusted (set OS_CACERT, or --insecure)"
    found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if found:
        return found.group(1).strip()
    if "timed out" in text.lower():
        return "timed out"
    return type(exc).__name__
