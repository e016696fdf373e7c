"""The client commands' OpenStack login: OS_* variables, ``--os-*`` options and
clouds.yaml made into a keystoneauth1 session, and Fornace's endpoint found in
its catalog.

Users of an OpenStack cloud do not know where each service listens: the
catalog says.  This module reads their credentials (the options of
:mod:`fornace.cli.client.cloudauth`, a cloud of ``clouds.yaml``) as the
OpenStack clients do, through keystoneauth1's loading helpers, and gives the
API client a :class:`KeystoneLogin`: the session's token for each request
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
from pathlib import Path
from typing import Any

from fornace.cli.client.cloudauth import (DEFAULT_AUTH_TYPE, DEFAULT_INTERFACE, DEFAULT_TIMEOUT,
                                          SERVICE_TYPE, default_loader, keystone_loading)
from fornace.cli.client.http import ClientError
from fornace.common.errors import FornaceError

CLOUD_FILES = ("clouds.yaml", "clouds.yml")
SECURE_FILES = ("secure.yaml", "secure.yml")
AUTH_HINT = "check OS_AUTH_URL, or the auth_url of the cloud"


# -- clouds.yaml -----------------------------------------------------------------------

def cloud_files() -> list[Path]:
    """Where clouds.yaml is looked for, first found first: the current folder, the
    user's and the system's OpenStack folders (as openstacksdk looks)."""
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    folders = [Path.cwd(), config_home / "openstack", Path("/etc/openstack")]
    return [folder / name for folder in folders for name in CLOUD_FILES]


def load_cloud(name: str) -> tuple[dict[str, Any], Path]:
    """The settings of cloud ``name`` (secure.yaml's merged over clouds.yaml's) and
    the clouds file they come from; FornaceError when either is missing."""
    path = _clouds_file()
    clouds = _clouds_of(path)
    if name not in clouds:
        known = ", ".join(sorted(clouds)) or "none"
        raise FornaceError(f"cloud {name!r} (OS_CLOUD/--os-cloud) is not in {path} "
                           f"(clouds: {known})")
    cloud = clouds[name]
    if not isinstance(cloud, dict):
        raise FornaceError(f"{path}: cloud {name!r} is not a mapping")
    secure = _secure_file(path)
    if secure is not None:
        cloud = _merged(cloud, _clouds_of(secure).get(name) or {})
    return cloud, path


def _clouds_file() -> Path:
    named = os.environ.get("OS_CLIENT_CONFIG_FILE")
    if named:
        if not Path(named).is_file():
            raise FornaceError(f"OS_CLIENT_CONFIG_FILE names {named}, which is not a file")
        return Path(named)
    for path in cloud_files():
        if path.is_file():
            return path
    looked = ", ".join(str(p) for p in cloud_files() if p.name == CLOUD_FILES[0])
    raise FornaceError(f"OS_CLOUD/--os-cloud names a cloud but no clouds.yaml was found "
                       f"(looked for {looked}; OS_CLIENT_CONFIG_FILE names another file)")


def _secure_file(clouds: Path) -> Path | None:
    named = os.environ.get("OS_CLIENT_SECURE_FILE")
    if named:
        if not Path(named).is_file():
            raise FornaceError(f"OS_CLIENT_SECURE_FILE names {named}, which is not a file")
        return Path(named)
    return next((clouds.parent / name for name in SECURE_FILES
                 if (clouds.parent / name).is_file()), None)


def _clouds_of(path: Path) -> dict[str, Any]:
    """The ``clouds`` mapping of a YAML file.  A YAML error is told by position
    only: its usual excerpt of the line could show a password."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FornaceError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise FornaceError(f"{path} is not valid YAML{where}") from None
    clouds = data.get("clouds") if isinstance(data, dict) else None
    if not isinstance(clouds, dict):
        raise FornaceError(f"{path} has no 'clouds' mapping")
    return clouds


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


# -- settings: the cloud's, then the explicit ones --------------------------------------

@dataclass
class Settings:
    """What the login is made of, once the cloud and the OS_* values are merged."""
    auth_type: str
    auth: dict[str, Any]
    origin: str                     # for messages: which cloud, or the OS_* variables
    region: str | None = None
    interface: str = DEFAULT_INTERFACE
    insecure: bool = False
    cacert: str | None = None
    cert: str | None = None
    key: str | None = None
    secrets: list[str] = field(default_factory=list)   # never shown


def settings_of(command: Any) -> Settings:
    """The cloud's settings (if any) with the command's explicit values over them."""
    cloud: dict[str, Any] = {}
    origin = "the OS_* variables and --os-* options"
    if getattr(command, "os_cloud", None):
        cloud, path = load_cloud(command.os_cloud)
        origin = f"cloud {command.os_cloud!r} of {path}"
    chosen = getattr(command, "os_auth_type", None)
    explicit_type = chosen if isinstance(chosen, str) else None
    auth_type = explicit_type or cloud.get("auth_type") or DEFAULT_AUTH_TYPE
    loader = _loader(auth_type)
    auth = _cloud_auth(cloud.get("auth") or {}, loader, auth_type, origin)
    for opt in loader.get_options():
        value = getattr(command, f"os_{opt.dest}", None)
        if value is None:   # an option the parser lacks (another auth type): its variable
            value = next((os.environ[v] for v in opt.argparse_envvars if os.environ.get(v)),
                         None)
        if value is not None and value != opt.default:
            auth[opt.dest] = opt.type(value) if isinstance(value, str) else value
    regions = cloud.get("regions") or [None]
    first = regions[0].get("name") if isinstance(regions[0], dict) else regions[0]
    verify = cloud.get("verify", True)
    return Settings(
        auth_type, auth, origin,
        region=getattr(command, "os_region_name", None) or cloud.get("region_name") or first,
        interface=(getattr(command, "os_interface", None) or cloud.get("interface")
                   or DEFAULT_INTERFACE),
        insecure=bool(getattr(command, "insecure", False)) or verify is False,
        cacert=getattr(command, "os_cacert", None) or cloud.get("cacert"),
        cert=getattr(command, "os_cert", None) or cloud.get("cert"),
        key=getattr(command, "os_key", None) or cloud.get("key"),
        secrets=[str(auth[o.dest]) for o in loader.get_options()
                 if o.secret and auth.get(o.dest)])


def _loader(auth_type: str) -> Any:
    from keystoneauth1 import exceptions

    loading = keystone_loading()
    if auth_type == DEFAULT_AUTH_TYPE:
        return default_loader()
    try:
        return loading.get_plugin_loader(auth_type)
    except exceptions.NoMatchingPlugin:
        known = ", ".join(sorted(loading.get_available_plugin_names()))
        raise FornaceError(f"unknown auth type {auth_type!r} (OS_AUTH_TYPE, "
                           f"--os-auth-type or the cloud's auth_type; known: {known})") from None


def _cloud_auth(auth: Any, loader: Any, auth_type: str, origin: str) -> dict[str, Any]:
    """The cloud's ``auth`` with its keys as the loader's options name them
    (``project-name`` and deprecated names too); a key the auth type does not
    take is an error, not a silent typo."""
    if not isinstance(auth, dict):
        raise FornaceError(f"{origin}: 'auth' is not a mapping")
    names: dict[str, str] = {}
    for opt in loader.get_options():
        names[opt.dest] = opt.dest
        for old in opt.deprecated:
            names[old.dest] = opt.dest
    known: dict[str, Any] = {}
    for key, value in auth.items():
        name = names.get(str(key).replace("-", "_"))
        if name is None:
            takes = ", ".join(sorted({n for n in names.values()}))
            raise FornaceError(f"{origin}: auth type {auth_type} takes no {key!r} in "
                               f"'auth' (it takes: {takes})")
        known[name] = value
    return known


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
    loader = _loader(settings.auth_type)
    login = KeystoneLogin(None, settings)
    try:
        auth = loader.load_from_options(**settings.auth)
    except (TypeError, ValueError) as exc:   # an option the plugin needs is missing
        raise FornaceError(f"auth type {settings.auth_type} cannot log in with the options "
                           f"of {settings.origin}: {login.clean(str(exc))}") from None
    except Exception as exc:
        raise login.failure(exc) from None
    timeout = getattr(command, "timeout", None) or DEFAULT_TIMEOUT
    login.session = keystone_loading().load_session_from_argparse_arguments(
        _SessionOptions(command), auth=auth, insecure=settings.insecure,
        cacert=settings.cacert, cert=settings.cert, key=settings.key, timeout=timeout,
        app_name="fornace")
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


class _SessionOptions:
    """The command's session options, for keystoneauth1's loader, with those a
    command line without them (a test's namespace) lacks as unset."""

    def __init__(self, command: Any) -> None:
        self._command = command

    def __getattr__(self, name: str) -> Any:
        return getattr(self._command, name, None)


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
