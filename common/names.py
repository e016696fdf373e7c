"""The rule of every id and name Fornace takes from outside, in one place.

The API checks what a client gives against it at the door (a 400 naming the
field), the message contract checks the ids messages carry against it, and
the package archive names packages by it -- so that nothing the API accepts
is refused later by the contract or by the database.

* An **id** (a service's or unit's ``id``, a package's name): 1 to
  :data:`ID_MAX` characters -- the ``String(64)`` id columns -- of ASCII
  letters, digits, ``.``, ``_`` and ``-``, starting with a letter or a digit.
  ASCII: ids make agent queue names (``e<env>-<service>-<unit>``), which a
  broker takes up to 255 bytes; no ``/``: a service is addressed by its id
  in URL paths (``/services/<id>/units``), and ``.``/``..`` would be path
  steps; no NUL: PostgreSQL text cannot hold it.
* A **name** (an environment's, a service's, a unit's): any text of 1 to
  :data:`NAME_MAX` characters that is not blank and holds no control
  character: none of C0/C1 and DEL (NUL cannot be stored, a newline or an
  escape forges log lines and reports), no line or paragraph separator, no
  bidirectional embedding/override/isolate (they disguise what a dashboard
  or a log shows), no lone surrogate (it cannot be encoded in UTF-8).  A
  service name has at most :data:`SERVICE_NAME_MAX`, so that its units'
  names (``<name>_instance_<n>``) fit the 255 of a name.

Messages never quote the value whole (it may be 10,000 characters): only
the first offending character, as ``U+XXXX``.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any, Iterator

ID_MAX = 64
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,%d}" % (ID_MAX - 1))
ID_RULE = (f"must be an id of 1 to {ID_MAX} characters: ASCII letters, digits, '.', '_' "
           f"and '-', starting with a letter or a digit")

NAME_MAX = 255
SERVICE_NAME_MAX = 200
VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+-]{0,31}")   # a package's version

_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


def id_problem(value: Any) -> str | None:
    """None when ``value`` is an id by the rule, else what is wrong with it
    (without quoting it)."""
    if not isinstance(value, str):
        return "must be a string"
    if ID.fullmatch(value):
        return None
    if not value:
        return "must not be empty"
    if len(value) > ID_MAX:
        return f"{ID_RULE} (got {len(value)} characters)"
    return ID_RULE


def is_id(value: Any) -> bool:
    """Whether ``value`` is an id by the rule."""
    return isinstance(value, str) and ID.fullmatch(value) is not None


def fits_id_column(value: str) -> bool:
    """Whether a stored id could equal ``value`` (an id the server made, or a
    tenant's from Keystone): no longer than the id columns, no NUL."""
    return len(value) <= ID_MAX and "\x00" not in value


def refused_character(text: str) -> str | None:
    """The first character of ``text`` a name may not hold (None: none)."""
    for char in text:
        if char.isprintable() or char == " ":
            continue   # the common case, one call: letters, digits, punctuation, spaces
        if char in _BIDI_CONTROLS or unicodedata.category(char) in _REFUSED_CATEGORIES:
            return char
    return None


def name_problem(value: Any, max_length: int = NAME_MAX) -> str | None:
    """None when ``value`` is a name by the rule (at most ``max_length``
    characters), else what is wrong with it (without quoting it)."""
    if not isinstance(value, str):
        return "must be a string"
    if not value.strip():
        return "must not be empty"
    if len(value) > max_length:
        return f"must have at most {max_length} characters (got {len(value)})"
    char = refused_character(value)
    if char is not None:
        return (f"must not contain control characters such as U+{ord(char):04X} "
                f"(NUL, newlines, escapes, line separators, bidirectional controls)")
    return None


def texts(value: Any) -> Iterator[tuple[str, str, bool]]:
    """Every string in ``value`` (a JSON value), keys included: ``(path, text,
    is_key)``, the path as ``a.b[0]`` ("" for ``value`` itself; a key's is its
    object's).  What may hold a NUL (U+0000), which no PostgreSQL text column
    stores, is found by walking this once."""
    pending: list[tuple[Any, str]] = [(value, "")]
    while pending:
        item, path = pending.pop()
        if isinstance(item, str):
            yield path, item, False
        elif isinstance(item, dict):
            for key, child in item.items():
                yield path, key, True
                pending.append((child, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            pending.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
