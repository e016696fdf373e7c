"""Keeping secrets out of reports, traces and logs.

A field is secret when its name is ``token`` or ends in ``password``
(any case, e.g. ``adminPassword``, ``saPassword``), or when a service type's
schema declares it so (``writeOnly``: the callers pass those names as
``keys``: :func:`fornace.common.catalog.declared_secrets` of a catalog; the
API's one answer for an environment, with the types of the packages it is
pinned to, is ``Store.secret_keys``).  Their values are also
masked wherever they appear inside free text, such as a report a workflow
composed from a selected password.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Iterable

from fornace.common.canonicaljson import canonical_json

MASK = "***"
_MIN_LENGTH = 4  # shorter values would mask ordinary words


# a field whose name (lower case, without '_' and '-') ends like this holds a secret
SECRET_ENDINGS = ("password", "passwd", "passphrase", "secret", "secretkey", "token",
                  "apikey", "privatekey", "credentials")


@functools.lru_cache(maxsize=4096)  # the same few field names, over and over
def is_secret_key(key: Any) -> bool:
    """``adminPassword``, ``db_passwd``, ``apiKey``, ``private-key``, ``authToken``..."""
    if not isinstance(key, str):
        return False
    normalized = key.lower().replace("_", "").replace("-", "")
    return normalized.endswith(SECRET_ENDINGS)


def find_secrets(value: Any, found: set[str] | None = None,
                 keys: frozenset[str] = frozenset()) -> set[str]:
    """Every string value stored under a secret key, anywhere in ``value``;
    ``keys``: field names that are secret besides those :func:`is_secret_key`
    knows (the catalog's declared secrets, :attr:`Catalog.secret_fields`)."""
    found = set() if found is None else found
    if isinstance(value, dict):
        for key, item in value.items():
            if ((key in keys or is_secret_key(key)) and isinstance(item, str)
                    and len(item) >= _MIN_LENGTH):
                found.add(item)
            else:
                find_secrets(item, found, keys)
    elif isinstance(value, list):
        for item in value:
            find_secrets(item, found, keys)
    return found


@functools.lru_cache(maxsize=64)
def _pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    """One pattern for all secrets, longest first: where two start at the same
    place the longer is masked, so none leaks in part."""
    ordered = sorted((s for s in secrets if s), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


def mask_text(text: str, secrets: Iterable[str]) -> str:
    """Mask every secret inside ``text``."""
    pattern = _pattern(frozenset(secrets))
    return text if pattern is None else pattern.sub(MASK, text)


def masked(value: Any, secrets: Iterable[str] = (),
           keys: frozenset[str] = frozenset()) -> Any:
    """A copy of ``value`` with secret fields and secret substrings masked;
    ``keys``: field names that are secret besides those :func:`is_secret_key`
    knows (a type's declared secrets)."""
    return _masked(value, _pattern(frozenset(secrets)), keys)


# any secret ending, anywhere (one scan of the text instead of one per ending)
_ANY_ENDING = re.compile("|".join(sorted(map(re.escape, SECRET_ENDINGS), key=len, reverse=True)))


def _may_name_a_secret(text: str) -> bool:
    """False when no key of the JSON ``text`` can be a secret one: no secret
    ending anywhere in it, in any case, with or without ``_`` and ``-``."""
    if "\\u" in text:   # an escaped character may lower() to a letter of one
        return True
    return _ANY_ENDING.search(text.lower().replace("_", "").replace("-", "")) is not None


def masked_json(value: Any) -> str:
    """``json.dumps(masked(value), sort_keys=True, separators=(",", ":"),
    default=str)`` -- the text digests are taken of -- without the walk of
    :func:`masked` when the text of ``value`` names no secret at all (the
    common case; the C encoder and a scan of its output cost less than a
    walk in Python, which a value with secrets takes as before)."""
    if isinstance(value, dict) and any(is_secret_key(key) for key in value):
        return canonical_json(masked(value))   # a secret in sight: no need to look
    text = canonical_json(value)
    if not _may_name_a_secret(text):
        return text
    return canonical_json(masked(value))


def _masked(value: Any, pattern: re.Pattern[str] | None,
            keys: frozenset[str] = frozenset()) -> Any:
    if isinstance(value, dict):
        return {k: (MASK if v is not None and (is_secret_key(k) or k in keys)
                    else _masked(v, pattern, keys))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, pattern, keys) for v in value]
    if isinstance(value, str) and pattern is not None:
        return pattern.sub(MASK, value)
    return value
