"""The checks a service type's schema names with ``x-check``.

A type's create spec is JSON Schema in the catalog (``data/types.json``,
see :mod:`fornace.common.typeschema`); what JSON Schema cannot say -- the
rules of a hostname pattern, a DNS or NetBIOS name, "exactly one unit is the
master", "saPassword when mixed mode" -- is named in the data and
implemented here, once.  The catalog refuses a name this module does not
know, so a typo in a data folder is an error at load, not a check skipped.

Two kinds:

* :data:`VALUE_CHECKS` -- ``"x-check"`` on a property: the value (already of
  the property's JSON type, never null) -> None when fine, else a message
  about the value or ``(suffix, message)`` about a part of it (``".name"``,
  ``"[2]"``);
* :data:`SERVICE_CHECKS` -- ``"x-check"`` on a type's schema itself: the
  whole service (every field well typed) -> None, or ``(field path,
  message)``.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Any, Callable

ValueCheck = Callable[[Any], "str | tuple[str, str] | None"]
ServiceCheck = Callable[[dict], "tuple[str, str] | None"]

_HOST_CHARS = re.compile(r"[A-Za-z0-9-]*")
_PATTERN_CHARS = re.compile(r"[A-Za-z0-9#-]")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")
_GIT_URL = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*://|[A-Za-z0-9._-]+@[A-Za-z0-9._-]+:)\S+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HOSTNAME_MAX = 63
NETBIOS_MAX = 15


KIND_NAMES = {"null": "null", "boolean": "a boolean", "integer": "an integer",
              "number": "a number", "string": "a string", "array": "a list",
              "object": "an object"}
"""A JSON type as errors name it."""

_KINDS = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
          (list, "array"), (dict, "object"))


def json_kind(value: Any) -> str:
    """The JSON type of ``value`` (``integer``, never ``number``, for an int;
    a bool is a ``boolean``, not an integer)."""
    if value is None:
        return "null"
    for python, kind in _KINDS:     # bool before int: a bool is an int in Python
        if isinstance(value, python):
            return kind
    return type(value).__name__


def describe(value: Any) -> str:
    """The JSON kind of ``value`` as errors name it (``an integer``, ``null``)."""
    kind = json_kind(value)
    return KIND_NAMES.get(kind, kind)


# -- value checks ---------------------------------------------------------------

def nonblank(value: Any) -> str | None:
    """Blank strings (and empty lists) are not values: "  " is not a name."""
    if isinstance(value, str) and not value.strip():
        return "must not be empty"
    if isinstance(value, list) and not value:
        return "must not be empty"
    return None


def naming_pattern(pattern: Any) -> str | None:
    """A ``unitNamingPattern``: ``#`` becomes the unit's number (1, 2, ...), so
    the pattern must give a valid hostname label for numbers of up to three
    digits."""
    if not isinstance(pattern, str):
        return f"must be a string, not {describe(pattern)}"
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


def ip_address(value: str) -> str | None:
    """IPv4 or IPv6 (JSON Schema's formats take one or the other)."""
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
    if len(value) > 253 or not all(len(part) <= 63 and _LABEL.fullmatch(part)
                                   for part in labels):
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
                               f"{describe(item)}")
        if isinstance(item, str) and "\0" in item:
            return (f".{key}", "must not contain NUL characters")
    return None


# -- whole-service checks ---------------------------------------------------------

def exactly_one_master(service: dict) -> tuple[str, str] | None:
    """Exactly one unit is the master (primary DC / primary replica)."""
    masters = [i for i, unit in enumerate(service["units"]) if unit.get("isMaster") is True]
    if len(masters) != 1:
        found = ", ".join(f"units[{i}]" for i in masters) or "none"
        return "units", f"exactly one unit must have isMaster true (found {found})"
    return None


def sa_password_when_mixed(service: dict) -> tuple[str, str] | None:
    """Mixed mode authentication needs the SQL ``sa`` password."""
    if service.get("mixedModeAuth") is True:
        password = service.get("saPassword")
        if not isinstance(password, str) or not password.strip():
            return "saPassword", "required when mixedModeAuth is true"
    return None


VALUE_CHECKS: dict[str, ValueCheck] = {
    "nonblank": nonblank,
    "naming-pattern": naming_pattern,
    "ip-address": ip_address,
    "domain-name": domain_name,
    "netbios-name": netbios_name,
    "app-source": app_source,
    "url-path": url_path,
    "environment-variables": environment_variables,
}

# the JSON types each value check judges: it is not called on other values
# (the catalog refuses it on a property that can hold none of them)
VALUE_KINDS: dict[str, frozenset[str]] = {
    "nonblank": frozenset({"string", "array"}),
    "environment-variables": frozenset({"object"}),
}
VALUE_KINDS.update((name, frozenset({"string"})) for name in VALUE_CHECKS
                   if name not in VALUE_KINDS)

SERVICE_CHECKS: dict[str, ServiceCheck] = {
    "exactly-one-master": exactly_one_master,
    "sa-password-when-mixed": sa_password_when_mixed,
}
