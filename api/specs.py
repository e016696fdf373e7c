"""Service objects of the REST API: validation and preparation.

A client POSTs a service object to ``/environments/{id}/services`` (a
*create spec*, seed chapter 4 "Create Object Specs"), may later PUT it back
whole or edit one attribute by sub-path, and GETs it with its passwords
masked.  This module decides what is acceptable and fills in what the server
owns:

* :func:`validate_create` -- the strict check of a new service: known type,
  required fields present, every field of the right JSON type, no unknown
  field (a typo such as ``adminPasword`` is an error, not a silently dropped
  password);
* :func:`validate_update` -- the check after a PUT or a sub-path edit: the
  same rules, but "user can update or add any attribute" (seed), so unknown
  fields and the server/workflow-owned ``id``/``created``/``updated``/
  ``state``/``temp`` are accepted anywhere;
* :func:`prepare_new` / :func:`prepare_units` -- ids, timestamps and the unit
  names (``<service name>_instance_<n>``) that the 0.2 workflows rely on;
* :func:`masked_view` / :func:`keep_secrets` -- a GUI GETs a masked object and
  PUTs it back: the stored passwords must survive the round trip.

Service types are declared as data -- a :class:`TypeSpec` made of
:class:`FieldSpec` entries -- in :data:`SERVICE_TYPES`; adding a type is one
``register_type(TypeSpec(...))`` call.  Every problem is a :class:`SpecError`
(an HTTP 400) naming the field path, e.g. ``units[1].isMaster``.
"""
from __future__ import annotations

import copy
import ipaddress
import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from fornace.common.errors import FornaceError
from fornace.common.secrets import MASK, is_secret_key, masked

__all__ = [
    "SpecError", "FieldSpec", "TypeSpec", "SERVICE_TYPES", "register_type",
    "COMMON_SERVICE_FIELDS", "COMMON_UNIT_FIELDS", "MANAGED_KEYS",
    "validate_create", "validate_update", "prepare_new", "prepare_units",
    "keep_secrets", "masked_view", "check_naming_pattern",
]


class SpecError(FornaceError, ValueError):
    """A 400: names the field path (e.g. ``units[1].isMaster``) and what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self):  # keep pickling (e.g. across processes) working
        return (type(self), (self.field, self.message))


# A check gets a value already known to be of the field's kind and returns
# None when it is fine, else the problem: a message about the field itself,
# or ``(suffix, message)`` about a part of it (the suffix is appended to the
# field path, e.g. ``(".name", ...)`` or ``("[2]", ...)``).
Check = Callable[[Any], "str | tuple[str, str] | None"]
ServiceCheck = Callable[[dict], None]  # raises SpecError

_KIND_NAMES = {"str": "a string", "bool": "a boolean", "int": "an integer",
               "list": "a list", "object": "an object", "any": "any value"}


@dataclass(frozen=True)
class FieldSpec:
    """One attribute of a service or unit object.

    ``kind`` is a JSON type -- ``str``, ``bool``, ``int`` (never a boolean),
    ``list``, ``object``, ``any`` -- or a tuple of them.  ``items`` is the kind
    of every list item.  ``nonempty`` rejects blank strings (and empty lists).
    An optional field may be null (the seed: "may be empty/null/omitted").
    """

    name: str
    kind: str | tuple[str, ...]
    required: bool = True
    check: Check | None = None
    items: str | None = None
    nonempty: bool = False
    doc: str = ""

    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.kind,) if isinstance(self.kind, str) else tuple(self.kind)


@dataclass(frozen=True)
class TypeSpec:
    """A service type: its create spec, its unit spec and cross-field rules.

    ``fields`` are added to (and override) :data:`COMMON_SERVICE_FIELDS`;
    ``unit_fields`` to :data:`COMMON_UNIT_FIELDS`.  ``checks`` see the whole
    service once every field is known to be well typed and raise
    :class:`SpecError`.
    """

    name: str
    fields: tuple[FieldSpec, ...] = ()
    unit_fields: tuple[FieldSpec, ...] = ()
    min_units: int = 1
    max_units: int | None = None
    checks: tuple[ServiceCheck, ...] = ()
    doc: str = ""

    def service_fields(self) -> dict[str, FieldSpec]:
        merged = {f.name: f for f in COMMON_SERVICE_FIELDS}
        merged.update((f.name, f) for f in self.fields)
        merged.pop("units", None)  # units are described by the unit spec
        return merged

    def unit_field_specs(self) -> dict[str, FieldSpec]:
        merged = {f.name: f for f in COMMON_UNIT_FIELDS}
        merged.update((f.name, f) for f in self.unit_fields)
        return merged


SERVICE_TYPES: dict[str, TypeSpec] = {}


def register_type(spec: TypeSpec, *, replace: bool = False) -> TypeSpec:
    """Add a service type (``replace=True`` to redefine an existing one)."""
    if not isinstance(spec, TypeSpec):
        raise TypeError("register_type expects a TypeSpec")
    if spec.name in SERVICE_TYPES and not replace:
        raise ValueError(f"service type {spec.name!r} is already registered")
    if spec.min_units < 1:
        raise ValueError("a service type needs min_units >= 1")
    SERVICE_TYPES[spec.name] = spec
    return spec


# -- checks -------------------------------------------------------------------

_HOST_CHARS = re.compile(r"[A-Za-z0-9-]*")
_PATTERN_CHARS = re.compile(r"[A-Za-z0-9#-]")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")
HOSTNAME_MAX = 63
NETBIOS_MAX = 15


def check_naming_pattern(pattern: Any) -> str | None:
    """Problem with a ``unitNamingPattern`` (see "Hostname assignment"), or None.

    ``#`` becomes the unit's number (1, 2, ...), so the pattern must give a
    valid hostname label for numbers of up to three digits.
    """
    if not isinstance(pattern, str):
        return f"must be a string, not {_describe(pattern)}"
    if not pattern:
        return "must not be empty (omit it for random hostnames)"
    bad = sorted({c for c in pattern if not _PATTERN_CHARS.fullmatch(c)})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        return f"may only contain letters, digits, '-' and '#' (found {shown})"
    if pattern.count("#") > 1:
        return "may contain '#' only once"
    longest = len(pattern) + 2 if "#" in pattern else len(pattern)
    if longest > HOSTNAME_MAX:
        return (f"too long: hostnames made from it may reach {longest} characters "
                f"(at most {HOSTNAME_MAX}, '#' counting as up to 3 digits)")
    if pattern.startswith("-") or pattern.endswith("-"):
        return "a hostname cannot start or end with '-'"
    if not any(c.isalpha() for c in pattern):
        return "must contain a letter (all-numeric hostnames are not valid)"
    return None


def port_number(value: int) -> str | None:
    return None if 1 <= value <= 65535 else "must be a port number between 1 and 65535"


def ip_address(value: str) -> str | None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return f"must be an IP address (got {value!r})"
    return None


def domain_name(value: str) -> str | None:
    """Empty is fine (not a domain member); otherwise a DNS domain name."""
    if value == "":
        return None
    labels = value[:-1].split(".") if value.endswith(".") else value.split(".")
    if len(value) > 253 or not all(len(l) <= 63 and _LABEL.fullmatch(l) for l in labels):
        return f"must be a DNS domain name such as 'acme.local' (got {value!r})"
    return None


def netbios_name(value: str) -> str | None:
    """A Windows network name (cluster, listener): 1-15 letters, digits, '-'."""
    if (len(value) > NETBIOS_MAX or not _HOST_CHARS.fullmatch(value)
            or value.startswith("-") or value.endswith("-")):
        return (f"must be a network name of at most {NETBIOS_MAX} letters, digits "
                f"and inner '-' (got {value!r})")
    if value.isdigit():
        return "must contain a letter"
    return None


def os_image(value: Any) -> str | tuple[str, str] | None:
    """A string, or an object with a string ``name`` (and string other keys)."""
    if isinstance(value, str):
        return None if value.strip() else "must not be empty"
    if "name" not in value or value["name"] is None:
        return (".name", "required (the name of the image)")
    for key, item in value.items():
        if not isinstance(item, str):
            return (f".{key}", f"must be a string, not {_describe(item)}")
    if not value["name"].strip():
        return (".name", "must not be empty")
    return None


def unique_items(value: list) -> Any:
    seen: set = set()
    for index, item in enumerate(value):
        if item in seen:
            return (f"[{index}]", f"duplicate value {item!r}")
        seen.add(item)
    return None


def exactly_one_master(service: dict) -> None:
    """Exactly one unit is the master (primary DC / primary replica)."""
    masters = [i for i, unit in enumerate(service["units"]) if unit.get("isMaster") is True]
    if len(masters) != 1:
        found = ", ".join(f"units[{i}]" for i in masters) or "none"
        raise SpecError("units", f"exactly one unit must have isMaster true (found {found})")


def sa_password_when_mixed(service: dict) -> None:
    """Mixed mode authentication needs the SQL ``sa`` password."""
    if service.get("mixedModeAuth") is True:
        password = service.get("saPassword")
        if not isinstance(password, str) or not password.strip():
            raise SpecError("saPassword", "required when mixedModeAuth is true")


# -- field declarations -------------------------------------------------------

def text(name: str, required: bool = True, *, nonempty: bool | None = None,
         check: Check | None = None, doc: str = "") -> FieldSpec:
    """A string field; required strings must not be blank by default."""
    return FieldSpec(name, "str", required, check,
                     nonempty=required if nonempty is None else nonempty, doc=doc)


def flag(name: str, required: bool = True, doc: str = "") -> FieldSpec:
    return FieldSpec(name, "bool", required, doc=doc)


def port(name: str, required: bool = True, doc: str = "") -> FieldSpec:
    return FieldSpec(name, "int", required, port_number, doc=doc)


COMMON_SERVICE_FIELDS: tuple[FieldSpec, ...] = (
    text("id", False, nonempty=True, doc="unique id; generated when omitted"),
    text("name", False, nonempty=True, doc="user-friendly name"),
    text("type", doc="service type"),
    text("created", False, doc="ISO date-time, set by the server"),
    text("updated", False, doc="ISO date-time, set by the server"),
    FieldSpec("unitNamingPattern", "str", False, check_naming_pattern,
              doc="hostname pattern, '#' = unit number"),
    text("availabilityZone", False),
    text("flavor", False),
    FieldSpec("osImage", ("str", "object"), False, os_image,
              doc="image name, or {name, type, ...}"),
    text("keyPair", False),
    FieldSpec("dependsOn", "list", False, unique_items, items="str",
              doc="ids of services to deploy first"),
)

COMMON_UNIT_FIELDS: tuple[FieldSpec, ...] = (
    text("id", False, nonempty=True),
    text("name", False, nonempty=True, doc="instance name; generated when omitted"),
    text("location", False),
    text("address", False),
)

MANAGED_KEYS = frozenset({"id", "created", "updated", "state", "temp"})
"""Keys the server and the workflows own; always accepted by validate_update."""

NAME = text("name", doc="user-friendly name")
DOMAIN = text("domain", False, check=domain_name,
              doc="domain to join; empty/null/omitted when not a member")
ADMIN_PASSWORD = text("adminPassword", False, doc="local administrator password")
URI = text("uri", False, doc="URI of the service")
REPOSITORY = text("repository", doc="git repository with the application")
LB_PORT = port("loadBalancerPort", doc="port of the farm's load balancer")
_WINDOWS_OPTIONAL = (DOMAIN, ADMIN_PASSWORD)

for _spec in (
    TypeSpec(
        "activeDirectory",
        fields=(NAME,
                text("domain", check=domain_name, doc="domain name"),
                text("adminPassword", doc="domain administrator password")),
        unit_fields=(flag("isMaster", doc="true for the primary domain controller"),
                     text("recoveryPassword", doc="directory services recovery password")),
        checks=(exactly_one_master,),
        doc="Active Directory: one primary and optional secondary domain controllers",
    ),
    TypeSpec("webServer", fields=(NAME, *_WINDOWS_OPTIONAL, URI),
             doc="IIS web server"),
    TypeSpec("aspNetApp", fields=(NAME, REPOSITORY, *_WINDOWS_OPTIONAL, URI),
             doc="ASP.NET application on IIS"),
    TypeSpec("webServerFarm", fields=(NAME, LB_PORT, *_WINDOWS_OPTIONAL, URI),
             doc="IIS web farm behind a load balancer"),
    TypeSpec("aspNetAppFarm", fields=(NAME, REPOSITORY, LB_PORT, *_WINDOWS_OPTIONAL, URI),
             doc="ASP.NET application farm behind a load balancer"),
    TypeSpec(
        "msSqlServer",
        fields=(NAME, flag("mixedModeAuth", doc="SQL Server and Windows authentication"),
                text("saPassword", False, doc="SQL Server sa password (mixed mode)"),
                *_WINDOWS_OPTIONAL),
        checks=(sa_password_when_mixed,),
        doc="Microsoft SQL Server",
    ),
    TypeSpec(
        "msSqlClusterServer",
        fields=(NAME,
                text("domain", check=domain_name, doc="domain the cluster nodes join"),
                text("adminPassword", doc="local administrator password"),
                text("domainAdminUserName", doc="domain account creating the cluster"),
                text("domainAdminPassword"),
                text("clusterName", check=netbios_name, doc="failover cluster name"),
                text("clusterIP", check=ip_address, doc="failover cluster address"),
                text("agGroupName", doc="AlwaysOn availability group name"),
                text("agListenerName", check=netbios_name,
                     doc="availability group listener name"),
                text("agListenerIP", check=ip_address, doc="listener address"),
                text("sqlServiceUserName", doc="domain account running SQL Server"),
                text("sqlServicePassword"),
                flag("mixedModeAuth", False),
                text("saPassword", False),
                FieldSpec("databases", "list", False, unique_items, items="str",
                          doc="databases in the availability group")),
        unit_fields=(flag("isMaster", doc="true for the primary replica"),
                     flag("isSync", False, doc="synchronous-commit replica")),
        min_units=2,
        checks=(exactly_one_master, sa_password_when_mixed),
        doc="SQL Server failover cluster with an AlwaysOn availability group",
    ),
    TypeSpec("linuxWebServer",
             fields=(NAME, port("port", False, doc="port the site is served on"),
                     ADMIN_PASSWORD, DOMAIN),
             doc="static web site on Linux"),
):
    register_type(_spec)
del _spec


# -- Linux applications and farms (data/workflows/LinuxApp.xml, LinuxFarm.xml) --

_GIT_URL = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*://|[A-Za-z0-9._-]+@[A-Za-z0-9._-]+:)\S+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def app_source(value: str) -> str | None:
    """An absolute folder path on the units, or a git URL."""
    if "\0" in value or "\n" in value:
        return "must not contain NUL or newline characters"
    if value.startswith("/") or _GIT_URL.fullmatch(value):
        return None
    return ("must be an absolute folder path on the units (/srv/app) or a git URL "
            f"(https://..., ssh://..., git@host:repo, file:///...) (got {value!r})")


def url_path(value: str) -> str | None:
    if not value.startswith("/") or any(c.isspace() for c in value):
        return f"must be a URL path starting with '/' and without spaces (got {value!r})"
    return None


def environment_variables(value: dict) -> str | tuple[str, str] | None:
    """Names of environment variables -> string, number or boolean values."""
    for key, item in value.items():
        if not _ENV_NAME.fullmatch(key):
            return (f".{key}", "is not an environment variable name "
                               "(letters, digits and '_', not starting with a digit)")
        if item is not None and not isinstance(item, (str, int, float, bool)):
            return (f".{key}", f"must be a string, a number or a boolean, not "
                               f"{_describe(item)}")
        if isinstance(item, str) and "\0" in item:
            return (f".{key}", "must not contain NUL characters")
    return None


def start_timeout(value: int) -> str | None:
    return None if 1 <= value <= 3600 else "must be between 1 and 3600 seconds"


_APP_FIELDS = (
    NAME,
    text("source", check=app_source,
         doc="absolute folder path on the units, or git URL, of the application"),
    text("revision", False, doc="git branch, tag or commit (default: the remote's HEAD)"),
    text("startCommand", doc="command starting the app (/bin/sh, in the app folder; "
                             "PORT and HOST are set)"),
    port("port", doc="port the app listens on"),
    text("healthPath", False, nonempty=True, check=url_path,
         doc="path answering 2xx/3xx once the app is up (default /)"),
    FieldSpec("env", "object", False, environment_variables,
              doc="extra environment variables of the app"),
    FieldSpec("startTimeout", "int", False, start_timeout,
              doc="seconds the app has to answer on its health path (default 60)"),
)

for _spec in (
    TypeSpec("linuxApp", fields=_APP_FIELDS,
             doc="application on Linux, from a folder or a git repository, with a "
                 "health check"),
    TypeSpec("linuxWebServerFarm",
             fields=(NAME, port("port", False, doc="port the units serve the site on"),
                     LB_PORT),
             doc="static web site on Linux units behind a load balancer"),
    TypeSpec("linuxAppFarm", fields=(*_APP_FIELDS, LB_PORT),
             doc="application on Linux units behind a load balancer"),
):
    register_type(_spec)
del _spec


# -- validation ---------------------------------------------------------------

def validate_create(service: Any) -> None:
    """Full check of a service object POSTed to ``/environments/{id}/services``."""
    _validate(service, strict=True)


def validate_update(service: Any) -> None:
    """Check of a whole service after a PUT or a sub-path edit.

    Same types and rules as :func:`validate_create` and required fields are
    still required, but unknown fields (and ``id``/``created``/``updated``/
    ``state``/``temp``) are accepted anywhere.
    """
    _validate(service, strict=False)


def _validate(service: Any, *, strict: bool) -> None:
    if not isinstance(service, dict):
        raise SpecError("service", f"must be a JSON object, not {_describe(service)}")
    spec = _type_of(service)
    _check_fields(service, spec.service_fields(), "", strict, f"a {spec.name} service",
                  extra=("units",))
    units = _check_units(service, spec, strict)
    seen: dict[str, int] = {}
    for index, unit in enumerate(units):
        unit_id = unit.get("id")
        if unit_id is None:
            continue
        if unit_id in seen:
            raise SpecError(f"units[{index}].id",
                            f"duplicate unit id {unit_id!r} (also units[{seen[unit_id]}])")
        seen[unit_id] = index
    for check in spec.checks:
        check(service)


def _type_of(service: dict) -> TypeSpec:
    if "type" not in service:
        raise SpecError("type", "required")
    kind = service["type"]
    if not isinstance(kind, str):
        raise SpecError("type", f"must be a string, not {_describe(kind)}")
    spec = SERVICE_TYPES.get(kind)
    if spec is None:
        known = ", ".join(sorted(SERVICE_TYPES))
        raise SpecError("type", f"unknown service type {kind!r} (known: {known})")
    return spec


def _check_units(service: dict, spec: TypeSpec, strict: bool) -> list[dict]:
    if "units" not in service:
        raise SpecError("units", "required")
    units = service["units"]
    if not isinstance(units, list):
        raise SpecError("units", f"must be a list of unit objects, not {_describe(units)}")
    if len(units) < spec.min_units:
        need = "at least one unit" if spec.min_units == 1 else f"at least {spec.min_units} units"
        raise SpecError("units", f"a {spec.name} service needs {need} (got {len(units)})")
    if spec.max_units is not None and len(units) > spec.max_units:
        raise SpecError("units", f"a {spec.name} service takes at most {spec.max_units} units "
                                 f"(got {len(units)})")
    fields = spec.unit_field_specs()
    for index, unit in enumerate(units):
        path = f"units[{index}]"
        if not isinstance(unit, dict):
            raise SpecError(path, f"must be a unit object, not {_describe(unit)}")
        _check_fields(unit, fields, path, strict, f"a {spec.name} unit")
    return units


def _check_fields(obj: dict, fields: dict[str, FieldSpec], prefix: str, strict: bool,
                  what: str, extra: Iterable[str] = ()) -> None:
    if strict:  # unknown fields first: a typo is more useful than "x: required"
        allowed = set(fields) | set(extra)
        for key in obj:
            if key not in allowed:
                names = ", ".join(sorted(allowed))
                raise SpecError(_join(prefix, key),
                                f"unknown field for {what} (allowed: {names})")
    for spec in fields.values():
        path = _join(prefix, spec.name)
        if spec.name not in obj or (obj[spec.name] is None and not spec.required):
            if spec.required:
                raise SpecError(path, "required")
            continue
        _check_value(spec, obj[spec.name], path)


def _check_value(spec: FieldSpec, value: Any, path: str) -> None:
    kinds = spec.kinds
    if not any(_is_kind(value, kind) for kind in kinds):
        expected = " or ".join(_KIND_NAMES[k] for k in kinds)
        raise SpecError(path, f"must be {expected}, not {_describe(value)}")
    if spec.nonempty and isinstance(value, (str, list)) and not (
            value.strip() if isinstance(value, str) else value):
        raise SpecError(path, "must not be empty")
    if spec.items is not None and isinstance(value, list):
        for index, item in enumerate(value):
            if not _is_kind(item, spec.items):
                raise SpecError(f"{path}[{index}]", f"must be {_KIND_NAMES[spec.items]}, "
                                                    f"not {_describe(item)}")
            if spec.items == "str" and not item.strip():
                raise SpecError(f"{path}[{index}]", "must not be empty")
    if spec.check is not None:
        problem = spec.check(value)
        if isinstance(problem, tuple):
            suffix, message = problem
            raise SpecError(path + suffix, message)
        if problem:
            raise SpecError(path, problem)


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "any":
        return True
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    raise ValueError(f"unknown field kind {kind!r}")


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


# -- preparation --------------------------------------------------------------

def new_id() -> str:
    return uuid.uuid4().hex


def prepare_new(service: dict, now: str, existing: list[dict]) -> dict:
    """A copy of a validated create spec, ready to store.

    The service gets an id (unless given: then it must not clash with any
    service or unit of ``existing``), ``created``/``updated`` = ``now``, and
    every unit an id and a ``<service name>_instance_<n>`` name.  Ids must be
    unique in the whole environment: the workflow engine mutes rule matches
    by object id.
    """
    prepared = copy.deepcopy(service)
    taken = _ids_in(existing)
    given = prepared.get("id")
    if given is None:
        prepared["id"] = new_id()
    elif given in taken:
        raise SpecError("id", f"id {given!r} is already used in this environment")
    taken.add(prepared["id"])
    for index, unit in enumerate(prepared.get("units") or []):
        unit_id = unit.get("id") if isinstance(unit, dict) else None
        if unit_id is not None and unit_id in taken:
            raise SpecError(f"units[{index}].id",
                            f"id {unit_id!r} is already used in this environment")
        if unit_id is not None:
            taken.add(unit_id)
    prepared["created"] = now
    prepared["updated"] = now
    return _default_units(prepared)


def prepare_units(service: dict) -> dict:
    """A copy with ids and names for units that have none (a PUT adding units)."""
    return _default_units(copy.deepcopy(service))


def _default_units(service: dict) -> dict:
    units = service.get("units")
    if not isinstance(units, list):
        return service
    base = f"{service.get('name')}_instance_"
    names = {u.get("name") for u in units if isinstance(u, dict)}
    for index, unit in enumerate(units):
        if not isinstance(unit, dict):
            continue
        if unit.get("id") is None:
            unit["id"] = new_id()
        if unit.get("name") is None:
            number = index
            while f"{base}{number}" in names:  # e.g. after a unit was removed
                number += 1
            unit["name"] = f"{base}{number}"
            names.add(unit["name"])
    return service


def _ids_in(services: Iterable[Any]) -> set[str]:
    ids = set()
    for service in services or ():
        if not isinstance(service, dict):
            continue
        if isinstance(service.get("id"), str):
            ids.add(service["id"])
        units = service.get("units")
        for unit in units if isinstance(units, list) else ():
            if isinstance(unit, dict) and isinstance(unit.get("id"), str):
                ids.add(unit["id"])
    return ids


# -- secrets ------------------------------------------------------------------

def masked_view(value: Any) -> Any:
    """A copy with every secret field's (non-null) value replaced by ``***``."""
    return masked(value)


def keep_secrets(new: Any, old: Any) -> Any:
    """``new`` with masked secret fields (value ``***``) restored from ``old``.

    Dicts are matched by key; list items that have an ``id`` are matched by
    id (so reordered units keep their passwords; a unit with an unknown id
    restores nothing), items without one by index.  A real new password is
    kept.  ``new`` is not modified.
    """
    if isinstance(new, dict):
        source = old if isinstance(old, dict) else {}
        result = {}
        for key, value in new.items():
            if (value == MASK and is_secret_key(key)
                    and source.get(key) is not None):
                result[key] = copy.deepcopy(source[key])
            else:
                result[key] = keep_secrets(value, source.get(key))
        return result
    if isinstance(new, list):
        source = old if isinstance(old, list) else []
        by_id = {item["id"]: item for item in source
                 if isinstance(item, dict) and _hashable(item.get("id"))}
        result_list = []
        for index, item in enumerate(new):
            if isinstance(item, dict) and item.get("id") is not None:
                match = by_id.get(item["id"]) if _hashable(item["id"]) else None
            else:
                match = source[index] if index < len(source) else None
            result_list.append(keep_secrets(item, match))
        return result_list
    return new


def _hashable(value: Any) -> bool:
    return value is not None and isinstance(value, (str, int, float, bool))
