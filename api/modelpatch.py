"""JSON patches of an environment's object model: Murano's ``PATCH
.../model/`` (``openstack environment model edit``, ``murano
environment-model-edit``), body type ``application/env-model-json-patch``.

The body is a JSON patch (RFC 6902) whose changes Fornace takes only where
they keep the model one the conductor can deploy:

* ``add``, ``replace`` and ``remove`` -- what the clients send.  ``move``,
  ``copy`` and ``test`` are refused (403): a ``test`` on a password would
  tell its value without showing it, a ``copy`` would put it where it is not
  masked;
* below ``/services`` (the services, as ``PUT .../services`` takes them;
  ``/services`` itself may be replaced but not removed) and
  ``/defaultNetworks`` (the networks the environment joins; not the ids in
  the networks' headers).  The other top-level fields are refused (403)
  saying where they are changed: ``/name`` by renaming the environment,
  ``/region`` only at creation, ``/id`` never.

A path names a list item by its index, ``-`` (after the last, for ``add``),
or -- as ``model show --path`` does -- by the item's ``id``
(``/services/<SERVICE_ID>/units/-``).  :func:`parsed` checks a body's form
and these rules before anything is read; :func:`apply` applies the changes
in order to a model (with jsonpatch), each path resolved against the model
as the changes before it left it.  Errors name the change (its number from
1, its op and path) and never quote the model: it may hold secrets.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import jsonpatch
import jsonpointer

from fornace.api.errors import BadRequest, Forbidden
from fornace.common.errors import shortened
from fornace.common.namedchecks import describe

CONTENT_TYPE = "application/env-model-json-patch"
OPS = ("add", "replace", "remove")
REFUSED_OPS = ("move", "copy", "test")
EDITABLE = ("services", "defaultNetworks")
_ELSEWHERE = {
    "name": "rename the environment instead (PUT /environments/ID: 'environment rename')",
    "region": "an environment's region is given when it is created",
    "id": "an environment's id never changes",
}
MAX_CHANGES = 1000
MAX_SCANNED = 1_000_000
"""List items one patch may look through for ids (a body of 1 MB could
otherwise make a thousand changes each scan a list of 100,000 items)."""


@dataclass(frozen=True)
class Change:
    """One change of a patch: its number (from 1), op, path and value."""

    number: int
    op: str
    path: str
    segments: tuple[str, ...]
    value: Any = None

    @property
    def named(self) -> str:
        return f"change {self.number} ({self.op} {shortened(self.path, 200)})"


def parsed(body: Any) -> list[Change]:
    """The changes of a patch body, checked for form (400) and for what may be
    changed (403) -- nothing of the model read yet."""
    if not isinstance(body, list):
        raise BadRequest(f"the body must be a JSON patch: a list of changes such as "
                         f"{{\"op\": \"add\", \"path\": \"/services/-\", \"value\": {{...}}}}, "
                         f"not {describe(body)}")
    if not body:
        raise BadRequest("the JSON patch is empty: nothing to change")
    if len(body) > MAX_CHANGES:
        raise BadRequest(f"a JSON patch of at most {MAX_CHANGES} changes (got {len(body)})")
    return [_change(number, raw) for number, raw in enumerate(body, start=1)]


def _change(number: int, raw: Any) -> Change:
    where = f"change {number}"
    if not isinstance(raw, dict):
        raise BadRequest(f"{where}: must be an object with op and path, not {describe(raw)}")
    op, path = raw.get("op"), raw.get("path")
    if not isinstance(op, str):
        raise BadRequest(f"{where}: op is missing or not a string (one of {', '.join(OPS)})")
    if op in REFUSED_OPS:
        raise Forbidden(f"{where}: op {op!r} is not allowed: the object model takes "
                        f"{', '.join(OPS)}")
    if op not in OPS:
        raise BadRequest(f"{where}: unknown op {shortened(op, 40)!r} (one of {', '.join(OPS)})")
    if not isinstance(path, str):
        raise BadRequest(f"{where}: path is missing or not a string (a JSON pointer such "
                         f"as /services/-)")
    segments = _segments(path, where)
    change = Change(number, op, path, segments, raw.get("value"))
    if op != "remove" and "value" not in raw:
        raise BadRequest(f"{change.named}: {op} needs a value")
    _refuse_uneditable(change)
    return change


def _segments(path: str, where: str) -> tuple[str, ...]:
    try:
        return tuple(jsonpointer.JsonPointer(path).parts)
    except jsonpointer.JsonPointerException:
        raise BadRequest(f"{where}: path {shortened(path, 200)!r} is not a JSON pointer (it "
                         f"starts with '/', e.g. /services/0/name; '~' is written ~0 and "
                         f"'/' ~1 in a key)") from None


def _refuse_uneditable(change: Change) -> None:
    segments = change.segments
    if not segments:
        raise Forbidden(f"{change.named}: the whole model cannot be changed at once: "
                        f"change {' or '.join('/' + top for top in EDITABLE)}")
    top = segments[0]
    if top not in EDITABLE:
        reason = _ELSEWHERE.get(top, f"model edit changes only "
                                     f"{' and '.join('/' + t for t in EDITABLE)}")
        raise Forbidden(f"{change.named}: /{shortened(top, 64)} cannot be changed: {reason}")
    if top == "services" and len(segments) == 1 and change.op == "remove":
        raise Forbidden(f"{change.named}: /services cannot be removed (replace it with [] "
                        f"to remove every service)")
    if top == "defaultNetworks" and len(segments) >= 4 and segments[2:4] == ("?", "id"):
        raise Forbidden(f"{change.named}: a network's id cannot be changed (the server "
                        f"gives a new network one)")


def apply(model: dict[str, Any], changes: list[Change]) -> None:
    """Apply ``changes`` in order to ``model`` (changed in place); a 400 naming
    the first change whose path is not there."""
    budget = _Budget(MAX_SCANNED)
    for change in changes:
        pointer = _resolved(model, change, budget)
        operation = {"op": change.op, "path": pointer}
        if change.op != "remove":
            operation["value"] = copy.deepcopy(change.value)
        try:
            jsonpatch.JsonPatch([operation]).apply(model, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
            # checked by _resolved: not reached (its message would quote the model)
            raise BadRequest(f"{change.named}: cannot be applied to the model") from None


@dataclass
class _Budget:
    """The list items a patch may still look through."""

    left: int

    def spend(self, items: int, change: Change) -> None:
        self.left -= items
        if self.left < 0:
            raise BadRequest(f"{change.named}: the patch looks through more than "
                             f"{MAX_SCANNED} list items for ids: name fewer items, or "
                             f"send it in parts")


def _resolved(model: Any, change: Change, budget: _Budget) -> str:
    """The change's path as a JSON pointer of indexes (ids of list items made
    indexes), once each step but the last is found -- and the last too when
    the op replaces or removes it."""
    node, resolved = model, []
    segments = change.segments
    for depth, segment in enumerate(segments):
        last = depth == len(segments) - 1
        if isinstance(node, list):
            budget.spend(len(node), change)
        key = _key(node, segment, adding=last and change.op == "add")
        if key is None:
            where = "/" + "/".join(map(jsonpointer.escape, segments[:depth])) if depth \
                else "the model"
            if isinstance(node, (dict, list)):
                raise BadRequest(f"{change.named}: {shortened(where, 200)} has no "
                                 f"{shortened(segment, 64)!r}")
            raise BadRequest(f"{change.named}: {shortened(where, 200)} is not an object "
                             f"or a list")
        resolved.append(jsonpointer.escape(str(key)))
        if not last:
            node = node[key]
    return "/" + "/".join(resolved)


def _key(node: Any, segment: str, adding: bool) -> str | int | None:
    """Where ``segment`` points in ``node``: a key of an object, an index of a
    list (the item of that id first); with ``adding``, a new key or ``-``/the
    end of a list too.  None: nowhere."""
    if isinstance(node, dict):
        return segment if adding or segment in node else None
    if not isinstance(node, list):
        return None
    if adding and segment == "-":
        return "-"
    for index, item in enumerate(node):
        if isinstance(item, dict) and item.get("id") == segment:
            return index
    if segment.isdigit() and (segment == "0" or not segment.startswith("0")):
        index = int(segment)
        if index < len(node) or (adding and index == len(node)):
            return index
    return None
