"""Murano's object header: ``"?": {"id": ..., "type": ...}`` on a service or a unit.

Later Murano clients give an object's id (and class) in that header instead
of as plain fields: ``openstack environment apps edit`` PUTs the services
after applying a JSON patch whose values carry ``"?": {"id": ..., "type":
...}``.  Fornace's object model keeps ``id`` and ``type`` as fields (the
workflows select ``::id``, the conductor addresses agents by service and
unit id), so the header is accepted beside them and kept in step with them:

* :func:`header_problem` -- what is wrong with an object's header: not an
  object, an id that is not an id, or a value that says otherwise than the
  field beside it (``?.id`` and ``id`` naming two ids);
* :func:`take_header` -- the object's ``id`` (and a service's ``type``)
  taken from its header where the field is missing;
* :func:`sync_header` -- once the server gave the object an id, its header
  says that id too (a client reading the header finds the id used).

A unit's header ``type`` (a Murano instance class) is kept as given: units
have no type of their own.

The clients' help tells users to write ``===id1===``, ``===id2===`` ... where
a new id goes, to be replaced by new ids (the same placeholder, the same
id); python-muranoclient 2.8 replaces them in a copy it then does not send.
:func:`with_new_ids` does it on the server: a string value that is exactly
such a placeholder anywhere in an edit's body becomes a new id.
"""
from __future__ import annotations

import re
import uuid
from typing import Any, Iterable

from fornace.common import names
from fornace.common.errors import shortened
from fornace.common.namedchecks import describe

HEADER = "?"
PLACEHOLDER = re.compile(r"===id(\d{1,9})===")
SERVICE_KEYS = ("id", "type")
"""What a service's header may give: its id and its type."""
UNIT_KEYS = ("id",)
"""What a unit's header may give: its id."""


def header_problem(obj: dict, prefix: str, keys: Iterable[str]) -> tuple[str, str] | None:
    """None when ``obj``'s header (if any) can be used, else (field path, what is
    wrong); ``prefix``: the object's path (``""`` for a service, ``units[1]``)."""
    if HEADER not in obj or obj[HEADER] is None:
        return None
    header = obj[HEADER]
    where = _join(prefix, HEADER)
    if not isinstance(header, dict):
        return where, (f"must be an object such as {{\"id\": ..., \"type\": ...}} (Murano's "
                       f"object header), not {describe(header)}")
    for key in keys:
        value = header.get(key)
        if value is None:
            continue
        problem = names.id_problem(value) if key == "id" else (
            None if isinstance(value, str) else "must be a string")
        if problem is not None:
            return f"{where}.{key}", problem
        own = obj.get(key)
        if own is not None and own != value:
            return f"{where}.{key}", (f"is {shortened(repr(value), 80)} but "
                                      f"{_join(prefix, key)} is {shortened(repr(own), 80)}: "
                                      f"give one of them, or the same in both")
    return None


def take_header(obj: dict, keys: Iterable[str]) -> dict:
    """``obj`` (changed in place) with each of ``keys`` it lacks taken from its
    header; call it once :func:`header_problem` found nothing wrong."""
    header = obj.get(HEADER)
    if isinstance(header, dict):
        for key in keys:
            if obj.get(key) is None and header.get(key) is not None:
                obj[key] = header[key]
    return obj


def sync_header(obj: dict) -> None:
    """``obj``'s header (when it has one) names ``obj``'s id."""
    header = obj.get(HEADER)
    if isinstance(header, dict) and obj.get("id") is not None:
        header["id"] = obj["id"]


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def with_new_ids(body: Any) -> Any:
    """``body`` with every string value that is exactly a placeholder
    (``===id1===``) replaced by a new id, one per placeholder (changed in place
    and returned: the body of one request)."""
    ids: dict[str, str] = {}
    pending = [body]
    while pending:   # iterative: the body's nesting is bounded, but not small
        node = pending.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(
            node, list) else ()
        for key, value in list(items):
            if isinstance(value, str):
                found = PLACEHOLDER.fullmatch(value)
                if found:
                    node[key] = ids.setdefault(found.group(1), uuid.uuid4().hex)
            elif isinstance(value, (dict, list)):
                pending.append(value)
    if isinstance(body, str) and PLACEHOLDER.fullmatch(body):
        return uuid.uuid4().hex
    return body
